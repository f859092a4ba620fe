"""``experts download``: put checkpoints into the Hugging Face cache with
:func:`huggingface_hub.snapshot_download` (the presets are ``presets.toml`` beside this module)."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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


class HubUnreachable(ConnectionError):
    """The Hugging Face Hub cannot be reached: every further model would fail alike, so the
    download stops. ``str()`` is one sentence for the user.

    Attributes:
        done: the models downloaded before it happened.
    """

    def __init__(self, sentence: str, done: list[str]) -> None:
        super().__init__(sentence)
        self.done = done


def _unreachable(e: BaseException) -> bool:
    """Whether ``e`` (or an exception in its chain) is a failed connection, not an answer."""
    import httpx2

    seen: list[BaseException] = []
    x: BaseException | None = e
    while x is not None and x not in seen:
        if isinstance(x, (httpx2.TransportError, ConnectionError, TimeoutError)):
            return True
        seen.append(x)
        x = x.__cause__ or x.__context__
    return False


def _hub_sentence(left: int, total: int) -> str:
    """Why ``left`` of ``total`` models were not downloaded, naming the endpoint (``HF_ENDPOINT``,
    without credentials) and what to check."""
    from huggingface_hub import constants

    missed = f"{left} of {total} models were not downloaded"
    parts = urlsplit(constants.ENDPOINT)
    where = urlunsplit((parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""), "", "", ""))
    return f"The Hugging Face Hub at {where} cannot be reached, so {missed}; check the network, the proxy and HF_ENDPOINT."


def download(models: list[str], cache_dir: str | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Download every model of ``models`` (blocking); returns ``(done, failed)`` where ``failed``
    holds ``(model, one sentence)``. Only weights in safetensors (or, where a repository has none,
    PyTorch) format are fetched, with configs, tokenizers and the model card.

    Raises:
        HubUnreachable: the Hub cannot be reached (or may not be asked); the models before it are
            in its ``done``.
    """
    from huggingface_hub import constants, snapshot_download
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
            if constants.HF_HUB_OFFLINE:  # the cached models are still found: each one is said
                failed.append((model, "not in the Hugging Face cache, and HF_HUB_OFFLINE forbids downloading it"))
                continue
            if _unreachable(e):
                log.warning("download of %s stopped: %s: %s", model, e.__class__.__name__, e)
                raise HubUnreachable(_hub_sentence(len(models) - len(done), len(models)), done) from None
            failed.append((model, f"{e.__class__.__name__}: {str(e).splitlines()[0][:200]}"))
    return done, failed
