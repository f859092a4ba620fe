"""What this server serves: the cached models and the folders of ``local_models`` that the config
allows, whose task has a local path, plus the ControlNet annotators whose backing is present.
ControlNet checkpoints are served only when the Stable Diffusion base named by ``controlnet_base``
is cached too (they are charged both sizes)."""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path

from .cache import CachedModel, describe, hub_cache_dir, scan, snapshots, weights_size
from .config import ServerConfig
from .tasks import task_for
from .tasks.annotators import AUX_FILES

log = logging.getLogger(__name__)


def _allowed(model_id: str, task: str, config: ServerConfig) -> bool:
    if not any(fnmatch.fnmatchcase(model_id, pat) for pat in config.allow_models):
        return False
    if any(fnmatch.fnmatchcase(model_id, pat) for pat in config.deny_models):
        return False
    return not config.allow_tasks or task in config.allow_tasks


def _pick(found: dict[str, CachedModel], wanted: str, ok: callable) -> CachedModel | None:  # type: ignore[valid-type]
    if wanted:
        m = found.get(wanted)
        return m if m is not None and ok(m) else None
    return next((m for _, m in sorted(found.items()) if ok(m)), None)


def annotators(found: dict[str, CachedModel], config: ServerConfig, snaps: dict[str, Path]) -> dict[str, CachedModel]:
    """The ``<cond>-control`` models whose backing is present (see the module docstring)."""
    out = {"canny-control": CachedModel("canny-control", "canny-control", "opencv", Path("."), 0)}
    depth = _pick(found, config.depth_model, lambda m: m.task == "depth-estimation")
    if depth is not None:
        out["depth-control"] = CachedModel("depth-control", "depth-control", "transformers", depth.path,
                                           depth.size_bytes, depth.architectures)
    seg = _pick(found, config.seg_model, lambda m: m.task == "image-segmentation" and m.semantic)
    if seg is not None:
        out["seg-control"] = CachedModel("seg-control", "seg-control", "transformers", seg.path, seg.size_bytes,
                                         seg.architectures)
    path = snaps.get(config.annotators)
    for cond, (cls, files) in AUX_FILES.items():
        if path is not None and all((path / f).is_file() for f in files):
            size = sum((path / f).stat().st_size for f in files)
            out[f"{cond}-control"] = CachedModel(f"{cond}-control", f"{cond}-control", "controlnet_aux", path, size, [cls])
    return out


def servable(config: ServerConfig) -> dict[str, CachedModel]:
    """Model id → :class:`CachedModel` for everything this server can run (blocking: reads the
    cache)."""
    cache = hub_cache_dir(config.cache_dir)
    snaps = snapshots(cache)
    found = scan(cache, config.tasks)
    for model_id, folder in config.local_models.items():  # the operator's own folders win over the cache
        m = describe(model_id, folder, config.tasks)
        if m is not None:
            found[model_id] = m
    out: dict[str, CachedModel] = {}
    base = snaps.get(config.controlnet_base)
    for model_id, m in found.items():
        if task_for(m.task) is None:
            log.info("%s: task %s has no local path here; not served", model_id, m.task)
            continue
        if m.architectures == ["ControlNetModel"]:
            if base is None:
                log.info("%s: its Stable Diffusion base %s is not cached; not served", model_id, config.controlnet_base)
                continue
            m.base, m.size_bytes = base, m.size_bytes + weights_size(base)
        if _allowed(model_id, m.task, config):
            out[model_id] = m
    for model_id, m in annotators(found, config, snaps).items():
        if _allowed(model_id, m.task, config):
            out[model_id] = m
    log.info("cache %s: %d servable models", cache, len(out))
    return out
