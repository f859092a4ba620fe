"""Pictures people can open: expert outputs drawn onto images (Pillow, OpenCV).

Every function here is blocking and CPU-bound: call it through :func:`in_thread` (or
``asyncio.to_thread``). Inputs are encoded image bytes; outputs are PNG bytes. Images are checked
against a pixel limit from their header before they are decoded; the loops over boxes and masks
stop at the next item once their ``stop`` event is set (:func:`in_thread` sets it when the awaiting
task is cancelled, e.g. by the task timeout), so no drawing outlives its task.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..media import PixelLimitError, check_pixels

from PIL import Image, ImageDraw, ImageFont

if TYPE_CHECKING:  # numpy loads with the first depth or edge map, not with the task registry
    import numpy as np

# Distinct colours for boxes and masks (Tableau 10).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)


MASKS_DRAWN = 20
"""Masks drawn onto one picture at most (the best-scored; the others stay in the data): each costs a
pass over every pixel, and the palette has ten colours."""

T = TypeVar("T")


class Stopped(Exception):
    """A drawing loop saw its ``stop`` event set (its task was cancelled) and gave up."""


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Stopped()


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, stop=event, **kwargs)`` in a worker thread; when the awaiting task is
    cancelled the event is set, so ``fn`` stops at its next check instead of running on."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(fn, *args, stop=stop, **kwargs)
    finally:
        stop.set()


def open_rgb(data: bytes, max_pixels: int) -> Image.Image:
    """Decode image bytes into an RGB image (loaded).

    Raises:
        pipeline.media.PixelLimitError: the header declares more than ``max_pixels`` pixels
            (checked before decoding).
    """
    try:
        with Image.open(io.BytesIO(data)) as im:
            check_pixels(im.size, max_pixels)
            im.load()
            return im.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise PixelLimitError(None, max_pixels) from exc


PNG_COMPRESS_LEVEL = 1
"""zlib level of every PNG the bot encodes (Pillow's default is 6). An encoded picture lies on a
run's critical path (a detection's drawn boxes are the next task's input): boxes drawn on a
512x512 photo take 32 ms, decoding and encoding included, at level 1 and 91 ms at level 6, for a
file 10 % larger; on a 451x300 one 19 ms instead of 55 ms, 7 % larger."""


def to_png(image: Image.Image) -> bytes:
    """Encode a PIL image as PNG bytes (at :data:`PNG_COMPRESS_LEVEL`)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - old Pillow
        return ImageFont.load_default()


def draw_boxes(
    image: bytes, objects: Sequence[dict[str, Any]], *, max_pixels: int,
    stop: threading.Event | None = None,
) -> bytes:
    """Draw object-detection boxes with their labels onto the image.

    Args:
        image: encoded input image.
        objects: ``{"label": str, "score": float, "box": [xmin, ymin, xmax, ymax]}`` in pixels
            (bound the count before: each box is drawn).
        max_pixels: pixel limit of the image.
        stop: checked before each box.

    Returns:
        PNG bytes of the annotated image (same size as the input).

    Raises:
        PixelLimitError: the image is over ``max_pixels``. Stopped: ``stop`` was set.
    """
    im = open_rgb(image, max_pixels)
    draw = ImageDraw.Draw(im)
    width = max(2, round(min(im.size) / 150))
    font = _font(max(12, min(im.size) // 25))
    for i, obj in enumerate(objects):
        _check(stop)
        colour = PALETTE[i % len(PALETTE)]
        x0, y0, x1, y1 = (int(round(v)) for v in obj["box"])
        draw.rectangle([x0, y0, x1, y1], outline=colour, width=width)
        text = f"{obj['label']} {obj.get('score', 0):.2f}"
        tb = draw.textbbox((0, 0), text, font=font)
        tw, th = tb[2] - tb[0], tb[3] - tb[1]
        ty = y0 - th - 6 if y0 - th - 6 >= 0 else y0 + 2  # above the box, else just inside it
        tx = max(0, min(x0 + 2, im.width - tw - 4))  # keep the label inside the picture
        tb = draw.textbbox((tx, ty), text, font=font)
        draw.rectangle([tb[0] - 2, tb[1] - 2, tb[2] + 2, tb[3] + 2], fill=colour)
        draw.text((tx, ty), text, fill=(255, 255, 255), font=font)
    return to_png(im)


def overlay_masks(
    image: bytes, segments: Sequence[tuple[str, float | None, Image.Image]], alpha: float = 0.5, *,
    max_pixels: int, stop: threading.Event | None = None,
) -> bytes:
    """Overlay segmentation masks in colours on the image, with a legend strip below it.

    Args:
        image: encoded input image.
        segments: ``(label, score or None, mask)``, best first; a mask is a PIL image (opened, not
            yet decoded), non-zero = inside, resized to the image if its size differs. The first
            :data:`MASKS_DRAWN` are drawn.
        alpha: mask opacity, 0..1.
        max_pixels: pixel limit of the image and of each mask (checked before decoding).
        stop: checked before each mask.

    Returns:
        PNG bytes: the image with coloured masks, plus a legend (one row per drawn mask).

    Raises:
        PixelLimitError: the image or a mask is over ``max_pixels``. Stopped: ``stop`` was set.
    """
    im = open_rgb(image, max_pixels)
    drawn = list(segments[:MASKS_DRAWN])
    level = max(0, min(255, round(alpha * 255)))
    for i, (_, _, mask) in enumerate(drawn):
        _check(stop)
        check_pixels(mask.size, max_pixels)
        m = mask.convert("L")
        if m.size != im.size:
            m = m.resize(im.size, Image.NEAREST)
        weight = m.point(lambda v: level if v > 127 else 0)  # blend weight: alpha inside, 0 outside
        im.paste(PALETTE[i % len(PALETTE)], (0, 0, *im.size), weight)
    font = _font(14)
    row = 20
    legend_h = row * len(drawn) + 8 if drawn else 0
    canvas = Image.new("RGB", (im.width, im.height + legend_h), (255, 255, 255))
    canvas.paste(im, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for i, (label, score, _) in enumerate(drawn):
        y = im.height + 4 + i * row
        draw.rectangle([6, y + 3, 20, y + 17], fill=PALETTE[i % len(PALETTE)])
        text = label if score is None else f"{label} {score:.2f}"
        draw.text((26, y + 2), text, fill=(0, 0, 0), font=font)
    _check(stop)
    return to_png(canvas)


def depth_to_png(depth: Image.Image | np.ndarray) -> bytes:
    """Normalise a depth map to 8-bit grey (near = bright) and encode it as PNG."""
    import numpy as np

    arr = np.asarray(depth, dtype=np.float32)
    if arr.ndim == 3:
        arr = arr.mean(axis=2)
    lo, hi = float(arr.min()), float(arr.max())
    norm = (arr - lo) / (hi - lo) * 255 if hi > lo else np.zeros_like(arr)
    return to_png(Image.fromarray(norm.astype(np.uint8), mode="L"))


def canny_edges(image: bytes, low: int = 100, high: int = 200, *, max_pixels: int) -> bytes:
    """Canny edge map (white edges on black) of an image, as ControlNet's canny condition expects.

    Thresholds follow the ControlNet reference annotator (low 100, high 200).

    Raises:
        PixelLimitError: the image is over ``max_pixels`` (checked before decoding).
    """
    import cv2
    import numpy as np

    grey = np.asarray(open_rgb(image, max_pixels).convert("L"))
    edges = cv2.Canny(grey, low, high)
    return to_png(Image.fromarray(edges, mode="L").convert("RGB"))


def image_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels of encoded image bytes."""
    with Image.open(io.BytesIO(data)) as im:
        return im.size
