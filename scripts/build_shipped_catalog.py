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


# Models for tasks the reference snapshot has none of (download counts unknown: 0).
EXTRA_CARDS: tuple[ModelCard, ...] = (
    ModelCard(id="google-bert/bert-base-uncased", task="fill-mask", downloads=0, likes=0,
              description="BERT base (uncased), pretrained on English with masked language modelling: "
                          "predicts the word behind [MASK].", providers=None, tags=("bert", "fill-mask", "en")),
    ModelCard(id="FacebookAI/roberta-base", task="fill-mask", downloads=0, likes=0,
              description="RoBERTa base, pretrained on English with masked language modelling: "
                          "predicts the word behind <mask>.", providers=None, tags=("roberta", "fill-mask", "en")),
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
