"""What the Hugging Face cache holds, and the task of each model in it.

The cache is the one ``huggingface_hub`` lays out (``HF_HUB_CACHE``, else ``$HF_HOME/hub``), read
with :func:`huggingface_hub.scan_cache_dir`; nothing here touches the network. A model's task is,
as on the Hub, its model card's ``pipeline_tag`` (the cached ``README.md`` front matter); else the
``[tasks]`` table of the server's config; else it is inferred from ``config.json`` ``architectures``
(transformers) or ``model_index.json`` ``_class_name`` (diffusers). ControlNet checkpoints
(``ControlNetModel``) serve ``<cond>-text-to-image``, the condition read from the id or the card.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CONDITIONS = ("canny", "depth", "hed", "mlsd", "normal", "openpose", "scribble", "seg")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".onnx")

# architecture-name suffix → pipeline tag (first match wins; exact names are checked before)
_EXACT = {
    "ViltForQuestionAnswering": "visual-question-answering",
    "Blip2ForConditionalGeneration": "image-to-text",
    "BlipForConditionalGeneration": "image-to-text",
    "BlipForQuestionAnswering": "visual-question-answering",
    "VisionEncoderDecoderModel": "image-to-text",
    "GitForCausalLM": "image-to-text",
    "LayoutLMv3ForQuestionAnswering": "document-question-answering",
    "LayoutLMForQuestionAnswering": "document-question-answering",
    "MarianMTModel": "translation",
    "VitsModel": "text-to-speech",
    "SpeechT5ForTextToSpeech": "text-to-speech",
    "BarkModel": "text-to-speech",
    "MusicgenForConditionalGeneration": "text-to-audio",
    "WhisperForConditionalGeneration": "automatic-speech-recognition",
    "SpeechEncoderDecoderModel": "automatic-speech-recognition",
    "DPTForDepthEstimation": "depth-estimation",
    "DetrForSegmentation": "image-segmentation",
}
_SUFFIXES = (
    ("ForImageClassification", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "image-segmentation"),
    ("ForUniversalSegmentation", "image-segmentation"),
    ("ForInstanceSegmentation", "image-segmentation"),
    ("ForDepthEstimation", "depth-estimation"),
    ("ForAudioClassification", "audio-classification"),
    ("ForCTC", "automatic-speech-recognition"),
    ("ForSpeechSeq2Seq", "automatic-speech-recognition"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForTokenClassification", "token-classification"),
    ("ForSequenceClassification", "text-classification"),
    ("ForMaskedLM", "fill-mask"),
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForConditionalGeneration", "text2text-generation"),
    ("Model", "feature-extraction"),
)
_AUDIO_TYPES = {"wav2vec2", "hubert", "wavlm", "whisper", "audio-spectrogram-transformer", "data2vec-audio",
                "unispeech", "unispeech-sat", "sew", "sew-d", "wav2vec2-bert", "wav2vec2-conformer", "clap"}
_DIFFUSERS = {
    "StableDiffusionPipeline": "text-to-image", "StableDiffusionXLPipeline": "text-to-image",
    "StableDiffusion3Pipeline": "text-to-image", "FluxPipeline": "text-to-image", "PixArtAlphaPipeline": "text-to-image",
    "LatentConsistencyModelPipeline": "text-to-image", "AutoPipelineForText2Image": "text-to-image",
    "StableDiffusionImg2ImgPipeline": "image-to-image", "StableDiffusionInstructPix2PixPipeline": "image-to-image",
    "StableDiffusionImageVariationPipeline": "image-to-image", "StableDiffusionXLImg2ImgPipeline": "image-to-image",
    "TextToVideoSDPipeline": "text-to-video", "VideoToVideoSDPipeline": "video-to-video",
    "LTXImageToVideoPipeline": "image-text-to-video",
}


@dataclass
class CachedModel:
    """One model of the cache.

    Attributes:
        id: the Hub id (``org/name``). task: its pipeline tag (or ``<cond>-text-to-image``).
        library: ``transformers`` | ``diffusers``. path: the snapshot directory.
        size_bytes: the weights we would load, on disk (bytes). architectures: from config.json.
        semantic: a segmentation model whose output is one class per pixel (usable for seg-control).
        base: for ControlNet checkpoints, the snapshot of the Stable Diffusion base they run on.
    """

    id: str
    task: str
    library: str
    path: Path
    size_bytes: int
    architectures: list[str] = field(default_factory=list)
    semantic: bool = False
    base: Path | None = None  # ControlNet: the Stable Diffusion base snapshot


def hub_cache_dir(explicit: str | None = None) -> Path:
    """The cache directory: ``explicit``, else ``HF_HUB_CACHE``, else ``$HF_HOME/hub`` (as
    :mod:`huggingface_hub.constants` reads them)."""
    if explicit:
        return Path(explicit)
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def snapshots(cache_dir: Path) -> dict[str, Path]:
    """Model id → snapshot directory of its ``main`` ref (else the newest revision), for every model
    repository in the cache. An unreadable or missing cache gives ``{}`` (logged)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound, CorruptedCacheException

    try:
        info = scan_cache_dir(cache_dir)
    except (CacheNotFound, CorruptedCacheException, OSError) as e:
        log.warning("cannot read the Hugging Face cache at %s: %s", cache_dir, e)
        return {}
    out: dict[str, Path] = {}
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        main = repo.refs.get("main")
        rev = main or max(repo.revisions, key=lambda r: r.last_modified)
        out[repo.repo_id] = Path(rev.snapshot_path)
    return out


def weights_size(path: Path) -> int:
    """Bytes of the weight files a loader would read in the snapshot ``path``: safetensors when the
    folder (or a component folder) has them, else the other formats; fp16 variants are not counted
    when full-precision files sit beside them."""
    total = 0
    dirs = {p.parent for p in path.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)}
    for d in dirs:
        files = [p for p in d.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
        safe = [p for p in files if p.suffix == ".safetensors"]
        files = safe or files
        full = [p for p in files if ".fp16." not in p.name]
        for p in full or files:
            total += p.stat().st_size  # follows the symlink into blobs/
    return total


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def card_tag(path: Path) -> str | None:
    """The ``pipeline_tag`` of the model card cached at ``path/README.md``, or ``None``."""
    readme = path / "README.md"
    if not readme.is_file():
        return None
    from huggingface_hub import ModelCard

    try:
        return ModelCard.load(readme).data.pipeline_tag or None
    except Exception as e:  # noqa: BLE001 - a malformed card is the model author's problem, not ours
        log.info("model card %s is unreadable: %s", readme, e)
        return None


def _condition(model_id: str, path: Path) -> str | None:
    """The ControlNet condition of a checkpoint, from its id (``sd-controlnet-canny``,
    ``control_v11p_sd15_openpose``) else its card's text."""
    name = model_id.split("/")[-1].lower().replace("_", "-")
    aliases = {"softedge": "hed", "lineart": "scribble", "segmentation": "seg", "normalbae": "normal", "pose": "openpose"}
    words = name.split("-")
    for word in reversed(words):
        if word in CONDITIONS:
            return word
        if word in aliases:
            return aliases[word]
    return None


def infer_task(model_id: str, path: Path) -> tuple[str | None, str, list[str]]:
    """``(task, library, architectures)`` of the snapshot at ``path`` from its files alone (not the
    card). ``task`` is ``None`` when nothing says it."""
    index = _read_json(path / "model_index.json")
    if index:
        return _DIFFUSERS.get(str(index.get("_class_name", ""))), "diffusers", [str(index.get("_class_name", ""))]
    config = _read_json(path / "config.json")
    if config.get("_class_name") == "ControlNetModel":
        cond = _condition(model_id, path)
        return (f"{cond}-text-to-image" if cond else None), "diffusers", ["ControlNetModel"]
    archs = [str(a) for a in config.get("architectures") or []]
    for arch in archs:
        if arch in _EXACT:
            return _EXACT[arch], "transformers", archs
        for suffix, task in _SUFFIXES:
            if arch.endswith(suffix):
                if task == "text-classification" and config.get("model_type") in _AUDIO_TYPES:
                    task = "audio-classification"
                if task == "feature-extraction" and (path / "modules.json").is_file():
                    task = "sentence-similarity"  # a sentence-transformers repository
                return task, "transformers", archs
    return None, "transformers", archs


def describe(model_id: str, path: Path, overrides: dict[str, str]) -> CachedModel | None:
    """The :class:`CachedModel` for one snapshot, or ``None`` when its task cannot be told."""
    inferred, library, archs = infer_task(model_id, path)
    tag = card_tag(path) if not (archs == ["ControlNetModel"] and inferred) else None
    task = tag or overrides.get(model_id) or inferred
    if task is None:
        log.info("%s: no pipeline_tag in its card and no known architecture (%s); not served", model_id, archs or "none")
        return None
    semantic = any(a.endswith("ForSemanticSegmentation") for a in archs)
    return CachedModel(model_id, task, library, path, weights_size(path), archs, semantic)


def scan(cache_dir: Path, overrides: dict[str, str] | None = None) -> dict[str, CachedModel]:
    """Every servable model of the cache at ``cache_dir``: model id → :class:`CachedModel`."""
    out: dict[str, CachedModel] = {}
    for model_id, path in snapshots(cache_dir).items():
        m = describe(model_id, path, overrides or {})
        if m is not None:
            out[model_id] = m
    return out
