"""Build ``pipeline/data/catalog.jsonl``, the catalog shipped with the package.

We cannot reach the Hub when building the package, so the shipped catalog is the reference
implementation's snapshot (``tests/fixtures/catalog/p0_models.jsonl``, March 2023) read with our
loader (descriptions condensed), plus the ControlNet models the reference implementation used
(``lllyasviel/sd-controlnet-<cond>`` for ``<cond>-text-to-image``; ``lllyasviel/Annotators`` and
``lllyasviel/ControlNet`` for ``<cond>-control``). Availability is unknown (``providers: null``):
:class:`pipeline.catalog.Availability` asks the Hub at run time. Operators get fresh data with
``hugginggpt catalog refresh``.

Usage: ``python scripts/build_shipped_catalog.py [--source FILE] [--out FILE]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.catalog import SHIPPED_CATALOG, Catalog, ModelCard
from pipeline.catalog.refresh import write_catalog
from pipeline.tasks import CONTROLNET_CONDITIONS, TASKS

SNAPSHOT = "2023-03 reference snapshot; availability checked at run time"

_COND_WORDS = {
    "canny": "Canny edge maps",
    "depth": "depth maps",
    "hed": "HED soft edge maps",
    "mlsd": "M-LSD straight line maps",
    "normal": "surface normal maps",
    "openpose": "OpenPose human pose skeletons",
    "scribble": "hand-drawn scribbles",
    "seg": "ADE20K semantic segmentation maps",
}


def controlnet_cards() -> list[ModelCard]:
    """The ControlNet models of the reference implementation (download counts unknown: 0)."""
    cards: list[ModelCard] = []
    for cond in CONTROLNET_CONDITIONS:
        words = _COND_WORDS[cond]
        cards.append(
            ModelCard(
                id=f"lllyasviel/sd-controlnet-{cond}",
                task=f"{cond}-text-to-image",
                downloads=0,
                likes=0,
                description=(
                    f"ControlNet for Stable Diffusion 1.5 conditioned on {words}: draws a new image that "
                    f"follows the structure of the condition image and the text prompt."
                ),
                providers=None,
                tags=("controlnet", "stable-diffusion", cond),
            )
        )
        if TASKS[f"{cond}-control"].local:
            continue
        cards.append(
            ModelCard(
                id="lllyasviel/Annotators",
                task=f"{cond}-control",
                downloads=0,
                likes=0,
                description=f"Annotator (preprocessor) weights of ControlNet that extract {words} from an image.",
                providers=None,
                tags=("controlnet", "annotator", cond),
            )
        )
        cards.append(
            ModelCard(
                id="lllyasviel/ControlNet",
                task=f"{cond}-control",
                downloads=0,
                likes=0,
                description=f"Original ControlNet release, including the annotators that extract {words} from an image.",
                providers=None,
                tags=("controlnet", "annotator", cond),
            )
        )
    return cards


def _by_hand(model: str, task: str, description: str) -> ModelCard:
    """A card added by hand (the snapshot has no Hub counts for it: downloads 0)."""
    return ModelCard(id=model, task=task, downloads=0, likes=0, providers=None, tags=(task,),
                     description=f"{description} (Added by hand for {task}; the catalog snapshot has no Hub counts for it.)")


# Models for tasks the reference snapshot has none of (download counts unknown: 0).
EXTRA_CARDS: tuple[ModelCard, ...] = (
    ModelCard(id="google-bert/bert-base-uncased", task="fill-mask", downloads=0, likes=0,
              description="BERT base (uncased), pretrained on English with masked language modelling: "
                          "predicts the word behind [MASK].", providers=None, tags=("bert", "fill-mask", "en")),
    ModelCard(id="FacebookAI/roberta-base", task="fill-mask", downloads=0, likes=0,
              description="RoBERTa base, pretrained on English with masked language modelling: "
                          "predicts the word behind <mask>.", providers=None, tags=("roberta", "fill-mask", "en")),
    _by_hand("MCG-NJU/videomae-base-finetuned-kinetics", "video-classification", "VideoMAE base model fine-tuned on Kinetics-400: names which of 400 human actions a short video shows."),
    _by_hand("facebook/timesformer-base-finetuned-k400", "video-classification", "TimeSformer base model fine-tuned on Kinetics-400: classifies the action in a video clip into 400 classes."),
    _by_hand("black-forest-labs/FLUX.1-Kontext-dev", "image-text-to-image", "FLUX.1 Kontext [dev]: edits an image by a text instruction (change a colour, remove an object, restyle) and keeps the rest."),
    _by_hand("Qwen/Qwen-Image-Edit", "image-text-to-image", "Qwen-Image-Edit: edits an image by an instruction, including text in the image, in English and Chinese."),
    _by_hand("timbrooks/instruct-pix2pix", "image-text-to-image", "InstructPix2Pix: a Stable Diffusion model that follows an editing instruction on an input image."),
    _by_hand("Wan-AI/Wan2.2-I2V-A14B", "image-text-to-video", "Wan 2.2 image-to-video: a short video that starts from an image and follows a text description."),
    _by_hand("Lightricks/LTX-Video", "image-text-to-video", "LTX-Video: generates short videos from a text prompt and an optional first image."),
    _by_hand("Wan-AI/Wan2.1-VACE-14B", "video-to-video", "Wan 2.1 VACE: edits and restyles a video (and extends it) as a text instruction says."),
    _by_hand("llava-hf/LLaVA-NeXT-Video-7B-hf", "video-text-to-text", "LLaVA-NeXT-Video: a chat model that watches a video and answers questions about it."),
    _by_hand("Qwen/Qwen2.5-VL-7B-Instruct", "video-text-to-text", "Qwen2.5-VL: a vision-language chat model that reads images and videos (events over time)."),
    _by_hand("Qwen/Qwen2-Audio-7B-Instruct", "audio-text-to-text", "Qwen2-Audio: a chat model that listens to speech, sounds and music and answers questions about them."),
    _by_hand("mistralai/Voxtral-Mini-3B-2507", "audio-text-to-text", "Voxtral Mini: a chat model that understands speech: transcribes, summarises and answers questions about audio."),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT / "tests/fixtures/catalog/p0_models.jsonl")
    parser.add_argument("--out", type=Path, default=SHIPPED_CATALOG)
    args = parser.parse_args()
    reference = Catalog.load(args.source)
    cards = reference.cards() + controlnet_cards() + list(EXTRA_CARDS)
    catalog = Catalog(cards)
    header = {"_catalog": {"snapshot": SNAPSHOT, "source": "reference implementation p0_models.jsonl (JARVIS)", "generated_at": None}}
    write_catalog(args.out, catalog, header)
    print(f"wrote {len(catalog)} models for {len(catalog.tasks())} tasks to {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
