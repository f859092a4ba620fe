"""The sandbox controller's answer to a re-planning call (``task-replanning``): a labelled
stand-in, not a language model.

For each failed task it plans one task of a neighbouring kind on the same input, where one is
served (a caption that failed becomes a classification, failed object detection becomes
segmentation...), and plans again the tasks that were skipped because of it, now reading the new
task's output; finished tasks are reused by ``<resource>-N``, never planned again. With nothing
to try it answers ``{"tasks": []}`` (answer from what exists). When the last message shows
generated images (a vision controller's checking round), :func:`seen_images` says what they are,
read from their pixels, as the ``"found"`` sentence. Deterministic.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

from PIL import Image

from .imaging import describe_image

ALTERNATIVES: dict[str, tuple[str, ...]] = {
    "image-to-text": ("image-classification", "object-detection"),
    "object-detection": ("image-segmentation", "image-classification"),
    "image-classification": ("object-detection", "image-to-text"),
    "image-segmentation": ("object-detection",),
    "automatic-speech-recognition": ("audio-classification",),
}
"""Task → tasks that take the same input and say something of the same kind about it."""

_REF = re.compile(r"<resource>-(\d+)")


def replan(plan: list[dict[str, Any]], results: dict[str, Any], available: list[str], next_id: int) -> list[dict[str, Any]]:
    """Further tasks for a plan whose results show failures (see the module docstring).

    Args:
        plan: the plan so far (``{"task", "id", "dep", "args"}`` records).
        results: task id (string) → ``{"status", ...}`` as the re-planning prompt shows them.
        available: the served task names.
        next_id: the first free task id.

    Returns:
        The further task records (``[]``: answer from what exists).
    """
    status = {int(k): (v or {}).get("status") for k, v in results.items()}
    renamed: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    for t in sorted(plan, key=lambda t: t["id"]):
        tid = t["id"]
        if status.get(tid) == "failed":
            alt = next((a for a in ALTERNATIVES.get(t["task"], ()) if a in available), None)
            if alt is None or _refs(t) - set(renamed) - {i for i, s in status.items() if s == "ok"}:
                continue
            renamed[tid] = next_id
            out.append({"task": alt, "id": next_id, "dep": [], "args": _rewire(t["args"], renamed)})
            next_id += 1
        elif status.get(tid) == "skipped" and _refs(t) & set(renamed):
            if _refs(t) - set(renamed) - {i for i, s in status.items() if s == "ok"}:
                continue
            renamed[tid] = next_id
            out.append({"task": t["task"], "id": next_id, "dep": [], "args": _rewire(t["args"], renamed)})
            next_id += 1
    for rec in out:
        rec["dep"] = sorted({int(n) for v in rec["args"].values() for n in _REF.findall(str(v))}) or [-1]
    return out


def _refs(task: dict[str, Any]) -> set[int]:
    return {int(n) for v in (task.get("args") or {}).values() for n in _REF.findall(str(v))} | {
        d for d in task.get("dep") or [] if isinstance(d, int) and d >= 0}


def _rewire(args: dict[str, Any], renamed: dict[int, int]) -> dict[str, Any]:
    return {k: _REF.sub(lambda m: f"<resource>-{renamed.get(int(m.group(1)), int(m.group(1)))}", str(v))
            for k, v in args.items()}


_JPEG_URI = re.compile(r"^data:image/[a-z0-9.+-]+;base64,(.+)$", re.S)


def seen_images(message: Any) -> str:
    """``"[sandbox vision] image-3: a 512x512 image, mostly red, evenly lit"`` for each image part
    of a user message (named by the text part before it), or ``""`` when it has none. Only
    ``data:`` URIs are read (the stand-in never fetches a URL)."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    seen, name = [], "an image"
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            name = str(part.get("text", "")).strip().rstrip(":")[-40:] or name
        m = _JPEG_URI.match(str((part.get("image_url") or {}).get("url", ""))) if part.get("type") == "image_url" else None
        if m is not None:
            with Image.open(io.BytesIO(base64.b64decode(m.group(1)))) as im:
                seen.append(f"{name}: {describe_image(im.convert('RGB'))}")
    return "[sandbox vision] " + "; ".join(seen) if seen else ""
