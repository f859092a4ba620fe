"""``experts download``: put checkpoints into the Hugging Face cache with
:func:`huggingface_hub.snapshot_download` (the presets are ``presets.toml`` beside this module)."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

log = logging.getLogger(__name__)

PRESETS = ("minimal", "standard", "full")


def preset_models(name: str) -> list[str]:
    """The model ids of preset ``name`` (each preset includes the smaller ones).

    Raises:
        ValueError: no such preset.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    data = tomllib.loads((Path(__file__).with_name("presets.toml")).read_text(encoding="utf-8"))
    out: list[str] = []
    for p in PRESETS[: PRESETS.index(name) + 1]:
        out += [m for m in data[p]["models"] if m not in out]
    return out


def download(models: list[str], cache_dir: str | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Download every model of ``models`` (blocking); returns ``(done, failed)`` where ``failed``
    holds ``(model, one sentence)``. Only weights in safetensors (or, where a repository has none,
    PyTorch) format are fetched, with configs, tokenizers and the model card."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    done, failed = [], []
    for model in models:
        try:
            path = snapshot_download(model, cache_dir=cache_dir, ignore_patterns=[
                "*.msgpack", "*.h5", "*.onnx", "*.ot", "*.tflite", "*.mlmodel", "*fp16*", "*.ckpt", "*.gguf",
                "flax_model*", "tf_model*", "rust_model*", "coreml/*", "onnx/*"])
            done.append(model)
            log.info("%s -> %s", model, path)
        except RepositoryNotFoundError:
            failed.append((model, "the Hub has no such model (or it is gated: set HF_TOKEN)"))
        except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
            failed.append((model, f"{e.__class__.__name__}: {str(e).splitlines()[0][:200]}"))
    return done, failed
