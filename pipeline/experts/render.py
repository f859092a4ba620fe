"""Pictures people can open: expert outputs drawn onto images (Pillow, OpenCV).

Every function here is blocking and CPU-bound: call it through ``asyncio.to_thread``.
Inputs are encoded image bytes; outputs are PNG bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# Distinct colours for boxes and masks (Tableau 10).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)


def open_rgb(data: bytes) -> Image.Image:
    """Decode image bytes into an RGB image (loaded)."""
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.convert("RGB")


def to_png(image: Image.Image) -> bytes:
    """Encode a PIL image as PNG bytes."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - old Pillow
        return ImageFont.load_default()


def draw_boxes(image: bytes, objects: Sequence[dict[str, Any]]) -> bytes:
    """Draw object-detection boxes with their labels onto the image.

    Args:
        image: encoded input image.
        objects: ``{"label": str, "score": float, "box": [xmin, ymin, xmax, ymax]}`` in pixels.

    Returns:
        PNG bytes of the annotated image (same size as the input).
    """
    im = open_rgb(image)
    draw = ImageDraw.Draw(im)
    width = max(2, round(min(im.size) / 150))
    font = _font(max(12, min(im.size) // 25))
    for i, obj in enumerate(objects):
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


def overlay_masks(image: bytes, segments: Sequence[tuple[str, float | None, Image.Image]], alpha: float = 0.5) -> bytes:
    """Overlay segmentation masks in colours on the image, with a legend strip below it.

    Args:
        image: encoded input image.
        segments: ``(label, score or None, mask)``; a mask is a PIL image, non-zero = inside,
            resized to the image if its size differs.
        alpha: mask opacity, 0..1.

    Returns:
        PNG bytes: the image with coloured masks, plus a legend (one row per label).
    """
    im = open_rgb(image)
    base = np.asarray(im, dtype=np.float32)
    out = base.copy()
    for i, (_, _, mask) in enumerate(segments):
        m = mask.convert("L")
        if m.size != im.size:
            m = m.resize(im.size, Image.NEAREST)
        inside = np.asarray(m) > 127
        colour = np.array(PALETTE[i % len(PALETTE)], dtype=np.float32)
        out[inside] = (1 - alpha) * out[inside] + alpha * colour
    result = Image.fromarray(out.clip(0, 255).astype(np.uint8))
    font = _font(14)
    row = 20
    legend_h = row * len(segments) + 8 if segments else 0
    canvas = Image.new("RGB", (im.width, im.height + legend_h), (255, 255, 255))
    canvas.paste(result, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for i, (label, score, _) in enumerate(segments):
        y = im.height + 4 + i * row
        draw.rectangle([6, y + 3, 20, y + 17], fill=PALETTE[i % len(PALETTE)])
        text = label if score is None else f"{label} {score:.2f}"
        draw.text((26, y + 2), text, fill=(0, 0, 0), font=font)
    return to_png(canvas)


def depth_to_png(depth: Image.Image | np.ndarray) -> bytes:
    """Normalise a depth map to 8-bit grey (near = bright) and encode it as PNG."""
    arr = np.asarray(depth, dtype=np.float32)
    if arr.ndim == 3:
        arr = arr.mean(axis=2)
    lo, hi = float(arr.min()), float(arr.max())
    norm = (arr - lo) / (hi - lo) * 255 if hi > lo else np.zeros_like(arr)
    return to_png(Image.fromarray(norm.astype(np.uint8), mode="L"))


def canny_edges(image: bytes, low: int = 100, high: int = 200) -> bytes:
    """Canny edge map (white edges on black) of an image, as ControlNet's canny condition expects.

    Thresholds follow the ControlNet reference annotator (low 100, high 200).
    """
    import cv2

    grey = np.asarray(open_rgb(image).convert("L"))
    edges = cv2.Canny(grey, low, high)
    return to_png(Image.fromarray(edges, mode="L").convert("RGB"))


def image_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels of encoded image bytes."""
    with Image.open(io.BytesIO(data)) as im:
        return im.size
