"""Tasks computed in-process, where that is honest and cheap: the canny edge map (OpenCV), as the
reference implementation's ControlNet annotator does. No model is called."""

from __future__ import annotations

import asyncio
from typing import Any

from ..config import OutputLimits
from ..errors import ExpertError
from ..llm import Usage
from ..media import PixelLimitError
from ..tasks import TASKS
from ..tasks.outputs import ImageSize
from ..types import Output, ResourceSink
from ..tasks import drawing as render
from .base import TaskSaver, read_inputs

LOCAL_MODEL = "opencv-canny"
"""What the selection shows as the model of a local task."""


class LocalRunner:
    """:class:`pipeline.experts.base.ExpertRunner` for local tasks (``canny-control``).

    Args:
        limits: what is kept of an answer; ``max_image_pixels``: pixels, largest image decoded.
    """

    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits

    async def run(
        self, task: str, model: str, args: dict[str, Any], sink: ResourceSink, *, task_id: int, usage: Usage | None = None
    ) -> Output:
        """Compute ``task`` locally; ``model`` is only a label.

        Returns:
            :class:`Output` with the edge map as a PNG file and its :class:`ImageSize`.

        Raises:
            ExpertError: ``reason="unavailable"`` for a task with no local implementation;
                ``"refused"`` for missing or wrong arguments; ``"too_large"`` for an image over
                the pixel limit (checked before decoding).
            HuggingGPTError: the sink's error, unchanged.
        """
        spec = TASKS.get(task)
        if spec is None or not spec.local:
            raise ExpertError(f"No local implementation serves {task}.", reason="unavailable")
        inputs = await read_inputs(spec, args)
        try:
            png = await asyncio.to_thread(render.canny_edges, inputs.media["image"], max_pixels=self.limits.max_image_pixels)
        except PixelLimitError as exc:
            raise ExpertError("The image has too many pixels to process safely.", str(exc), reason="too_large") from exc
        w, h = await asyncio.to_thread(render.image_size, png)
        res = await TaskSaver(sink, task, task_id, self.limits).file(png, "image", "image/png", f"canny edge map, {w}x{h} pixels")
        return Output(files=[res], data=ImageSize(w, h), where="in-process")
