"""What every expert runner shares: the protocol, reading a task's arguments, saving its files."""

from __future__ import annotations

import asyncio
import io
from typing import Any, Literal, Protocol

from ..errors import ExpertError
from ..llm import Usage
from ..media import check_pixels, extension_for, image_size_checked, sniff
from ..tasks import TaskSpec
from ..config import OutputLimits
from ..tasks.base import Inputs
from ..types import Modality, Output, Resource, ResourceSink, article
from ..tasks import drawing as render

RunnerKind = Literal["hub", "controller", "local", "mcp"]
"""Which runner serves a selection (:attr:`pipeline.types.Selection.runner`)."""


class ExpertRunner(Protocol):
    """Runs one task on one model and normalises the output."""

    async def run(
        self, task: str, model: str, args: dict[str, Any], sink: ResourceSink, *, task_id: int, usage: Usage | None = None
    ) -> Output:
        """Run ``task`` (a registry name) on ``model`` with resolved ``args`` (text or
        :class:`Resource`); generated files go to ``sink``; controller calls are counted in ``usage``.

        Raises:
            ExpertError: the call failed (one sentence for the user; ``reason`` for the executor).
        """
        ...


async def read_inputs(spec: TaskSpec, args: dict[str, str | Resource]) -> Inputs:
    """Check ``args`` against the entry's argument kinds and read media files.

    Media are read from :attr:`Resource.path` only (files of this conversation); a text argument is
    never taken as a path or URL (LLM output is untrusted).

    Raises:
        ExpertError: ``reason="refused"``: a required argument is missing or of another kind.
    """
    text: dict[str, str] = {}
    media: dict[str, bytes] = {}
    resources: dict[str, Resource] = {}
    task = spec.name
    for key, kind in spec.allowed.items():
        value = args.get(key)
        if value is None:
            if key in spec.required:
                raise ExpertError(f"The task {task} needs {article(kind)} {kind} argument '{key}'.", reason="refused")
            continue
        if kind == "text":
            if isinstance(value, Resource):
                if value.kind != "text":
                    raise ExpertError(f"The task {task} needs text for '{key}', not {value.id}.", reason="refused")
                text[key] = (await asyncio.to_thread(value.path.read_bytes)).decode("utf-8", errors="replace")
            else:
                text[key] = str(value)
            continue
        if not isinstance(value, Resource):
            raise ExpertError(
                f"The task {task} needs {kind} '{key}' from this conversation, not the text {str(value)[:40]!r}.",
                reason="refused",
            )
        if value.kind != kind:
            raise ExpertError(f"The task {task} needs {kind} for '{key}', but {value.id} is {value.kind}.", reason="refused")
        media[key] = await asyncio.to_thread(value.path.read_bytes)
        resources[key] = value
    inputs = Inputs(text, media, resources)
    if spec.prepare is not None:
        try:
            prepared = spec.prepare(inputs)
        except ValueError as e:
            raise ExpertError(str(e), reason="refused") from None
        inputs = Inputs(text, media, resources, prepared)
    return inputs


DELIVERABLE = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
"""Image formats every front end shows as they are (Pillow format name → MIME type)."""


def _encoded_bytes(image: Any) -> tuple[bytes, str] | None:
    """The bytes a lazily opened PIL image was read from, when that is a deliverable format
    (``huggingface_hub`` opens the reply with ``Image.open(BytesIO(...))`` and decodes nothing)."""
    mime = DELIVERABLE.get(getattr(image, "format", None) or "")
    fp = getattr(image, "fp", None)
    if mime is None or not isinstance(fp, io.BytesIO):
        return None
    data = fp.getvalue()
    sniffed = sniff(data)
    return (data, mime) if sniffed is not None and sniffed.mime == mime else None


class TaskSaver:
    """:class:`pipeline.tasks.Saver` bound to one task of one run: files get the origin
    ``task:<id>`` and the name ``<task>-<id>.<ext>``.

    Args:
        sink: where the files go.
        task: the task's registry name.
        task_id: the task's id in the plan.
        limits: what the task's normaliser may keep and decode (``[inference]``).
    """

    def __init__(self, sink: ResourceSink, task: str, task_id: int, limits: OutputLimits) -> None:
        self.sink, self.task, self.task_id = sink, task, task_id
        self.limits = limits

    async def file(self, data: bytes, kind: Modality, mime: str, what: str) -> Resource:
        """Store ``data`` and return its :class:`Resource`.

        Raises:
            HuggingGPTError: whatever the sink raises (``bot.errors.StorageError``), unchanged.
        """
        return await self.sink.add(
            data, kind=kind, mime=mime, origin=f"task:{self.task_id}", description=what,
            name=f"{self.task}-{self.task_id}{extension_for(mime)}",
        )

    async def image(self, image: Any, what: str) -> Resource:
        """Store a PIL image or encoded image bytes, described as ``"<what> (WxH pixels)"``.

        Bytes, and a PIL image opened lazily from PNG/JPEG/WebP/GIF bytes (as ``huggingface_hub``
        returns them), are stored as they came, never decoded or re-encoded; any other image is
        encoded as PNG in a worker thread.

        The size is checked against ``limits.max_image_pixels`` from the header before any pixel
        is decoded.

        Raises:
            pipeline.media.PixelLimitError: the image has more pixels than the limit.
        """
        limit = self.limits.max_image_pixels
        if isinstance(image, bytes):
            w, h = await asyncio.to_thread(image_size_checked, image, limit)
            sniffed = sniff(image)
            mime = sniffed.mime if sniffed is not None and sniffed.kind == "image" else "image/png"
            return await self.file(image, "image", mime, f"{what} ({w}x{h} pixels)")
        check_pixels(image.size, limit)  # a PIL image from the client: opened, not decoded yet
        w, h = image.size
        encoded = _encoded_bytes(image)
        if encoded is not None:  # already PNG/JPEG/WebP/GIF as the model sent it: kept as is
            data, mime = encoded
        else:
            data, mime = await asyncio.to_thread(render.to_png, image), "image/png"
        return await self.file(data, "image", mime, f"{what} ({w}x{h} pixels)")


async def condense(out: Output, saver: TaskSaver) -> Output:
    """Cut ``out.text`` to ``saver.limits.max_text_chars`` characters before it is stored or shown.

    The full text is kept as a ``.txt`` file resource of the task (``text/plain``, UTF-8) and the
    cut text ends with ``"… [cut: N characters in all; the full text is <id>]"``.

    Returns:
        ``out`` itself when the text fits, else a new :class:`Output` with the cut text and the file.

    Raises:
        HuggingGPTError: the sink's error when the file cannot be stored.
    """
    limit = saver.limits.max_text_chars
    text = out.text
    if text is None or len(text) <= limit:
        return out
    full = await saver.file(text.encode("utf-8"), "text", "text/plain", f"full text of task {saver.task_id} "
                            f"({len(text):,} characters)")
    note = f"… [cut: {len(text):,} characters in all; the full text is {full.id}]"
    return Output(text=text[: max(0, limit - len(note))] + note, files=[*out.files, full], data=out.data)
