"""Images for the inference stand-in, derived from their inputs (sandbox only; PIL, numpy, OpenCV).

Descriptions, boxes, masks and labels come from an image's size, brightness and named colours;
generated images are filled with the prompt's first colour word and carry the prompt as text and
a ``[sandbox]`` label, so nobody mistakes them for a model's output.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageStat

from .faults import Fault

# Named colours used to describe images and to colour generated ones.
COLOURS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "gray": (128, 128, 128),
    "red": (220, 30, 30),
    "orange": (240, 140, 20),
    "yellow": (240, 220, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "purple": (140, 50, 170),
    "pink": (240, 150, 190),
    "brown": (130, 85, 45),
    "beige": (215, 195, 160),
}


def _palette_image() -> Image.Image:
    """A ``P`` image whose palette is :data:`COLOURS` in order (the rest of the 256 entries repeat
    the last colour, so no pixel maps outside the named ones)."""
    flat = [v for rgb in COLOURS.values() for v in rgb]
    pal = Image.new("P", (1, 1))
    pal.putpalette(flat + flat[-3:] * (256 - len(COLOURS)))
    return pal


_PALETTE = _palette_image()


def open_image(data: bytes) -> Image.Image:
    """Decode image bytes (any format PIL reads) to RGB.

    Raises:
        Fault: 400 when the bytes are not an image.
    """
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.convert("RGB")
    except Exception as exc:  # noqa: BLE001
        raise Fault(400, {"error": f"could not decode image: {exc}"}) from exc


def png(im: Image.Image) -> bytes:
    """The image encoded as PNG bytes."""
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def colour_name(rgb: Any) -> str:
    """Nearest named colour of an RGB triple."""
    r, g, b = (float(v) for v in rgb)
    return min(COLOURS, key=lambda n: sum((c - v) ** 2 for c, v in zip(COLOURS[n], (r, g, b))))


def colour_shares(im: Image.Image) -> list[tuple[str, float, np.ndarray]]:
    """Pixels quantised to the named colours: ``(name, share, mask)``, largest share first.

    The nearest colour comes from PIL's conversion to a palette (C code, one pass, no dithering;
    it looks colours up in a cache of coarse RGB cells, so a pixel near the middle of two named
    colours may go to either): 1-2 ms for a 640x427 photo, where a numpy matrix product took
    10-35 ms and, on OpenBLAS, left worker threads spinning on the cores of the program the
    sandbox runs in (the bot's, with ``--sandbox``)."""
    idx = np.asarray(im.quantize(palette=_PALETTE, dither=Image.Dither.NONE))
    counts = np.bincount(idx.ravel(), minlength=len(COLOURS))
    names = list(COLOURS)
    present = sorted((i for i in range(len(names)) if counts[i]), key=lambda i: -counts[i])
    return [(names[i], float(counts[i]) / idx.size, idx == i) for i in present]


def describe_image(im: Image.Image) -> str:
    """``"a 451x300 image, mostly brown, brighter at the top"``."""
    half = im.height // 2
    halves = ((0, 0, im.width, half), (0, half, im.width, im.height))
    top, bottom = (sum(ImageStat.Stat(im.crop(box)).mean) / 3 for box in halves)
    where = "brighter at the top" if top > bottom + 8 else "brighter at the bottom" if bottom > top + 8 else "evenly lit"
    return f"a {im.width}x{im.height} image, mostly {colour_name(ImageStat.Stat(im).mean)}, {where}"


def prompt_colour(text: str, default: tuple[int, int, int] = (70, 110, 160)) -> tuple[int, int, int]:
    """RGB of the first colour word in ``text`` (``grey`` counts as gray), else ``default``."""
    words = re.findall(r"[a-z]+", text.lower())
    for w in words:
        if w == "grey":
            w = "gray"
        if w in COLOURS:
            return COLOURS[w]
    return default


def load_font(size: int):
    """PIL's default font at ``size`` pixels (fixed size on old Pillow versions)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover
        return ImageFont.load_default()


def draw_prompt(prompt: str, width: int = 512, height: int = 512, fmt: str = "PNG") -> bytes:
    """An image of the prompt's colour (first colour word, else steel blue) with the prompt written
    on it, encoded as ``fmt`` (``"PNG"`` or ``"JPEG"``, quality 95)."""
    colour = prompt_colour(prompt)
    im = Image.new("RGB", (width, height), colour)
    d = ImageDraw.Draw(im)
    ink = (0, 0, 0) if sum(colour) > 380 else (255, 255, 255)
    font = load_font(max(12, width // 24))
    words, lines, line = prompt.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > 28:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    if line:
        lines.append(line)
    y = height // 8
    for ln in ["[sandbox]"] + lines[:10]:
        d.text((width // 16, y), ln, fill=ink, font=font)
        y += int(font.size * 1.3) if hasattr(font, "size") else 16
    if fmt == "JPEG":
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=95)
        return buf.getvalue()
    return png(im)


def edges(im: Image.Image) -> Image.Image:
    """Canny edge map (OpenCV, thresholds 100/200) as an RGB image: white edges on black."""
    import cv2

    e = cv2.Canny(np.asarray(im.convert("L")), 100, 200)
    return Image.fromarray(e, mode="L").convert("RGB")


def depth_map(im: Image.Image) -> Image.Image:
    """Depth-like map: a top-to-bottom gradient mixed with blurred brightness (near = bright)."""
    grey = np.asarray(im.convert("L"), dtype=np.float32)
    h, w = grey.shape
    grad = np.linspace(0, 255, h, dtype=np.float32)[:, None].repeat(w, axis=1)
    small = Image.fromarray(grey.astype(np.uint8)).resize((max(1, w // 8), max(1, h // 8))).resize((w, h))
    depth = 0.6 * grad + 0.4 * np.asarray(small, dtype=np.float32)
    return Image.fromarray(depth.clip(0, 255).astype(np.uint8), mode="L")


def boxes(im: Image.Image) -> list[dict[str, Any]]:
    """Boxes around the largest bright and dark regions (thresholds mean ± 0.8 std)."""
    import cv2

    grey = np.asarray(im.convert("L"), dtype=np.float32)
    arr = np.asarray(im)
    mu, sd = grey.mean(), grey.std() or 1.0
    found = []
    for which, mask in (("bright", grey > mu + 0.8 * sd), ("dark", grey < mu - 0.8 * sd)):
        m = mask.astype(np.uint8)
        m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((5, 5), np.uint8))
        n, _, stats, _ = cv2.connectedComponentsWithStats(m)
        comps = sorted(range(1, n), key=lambda i: -stats[i, cv2.CC_STAT_AREA])[:2]
        for i in comps:
            x, y, w, h, area = (int(v) for v in stats[i])
            if area < 0.002 * grey.size:
                continue
            region = arr[y : y + h, x : x + w].reshape(-1, 3).mean(axis=0)
            score = round(min(0.99, 0.5 + area / grey.size), 3)
            box = {"xmin": x, "ymin": y, "xmax": x + w - 1, "ymax": y + h - 1}
            found.append({"score": score, "label": f"{colour_name(region)} {which} object", "box": box})
    found.sort(key=lambda o: -o["score"])
    return found[:4]


def segments(im: Image.Image) -> list[dict[str, Any]]:
    """Image-segmentation output: the three largest colour regions as
    ``[{"score": share 0..1, "label": colour name, "mask": base64 PNG, white = inside}]``."""
    out = []
    for name, share, mask in colour_shares(im)[:3]:
        m = Image.fromarray((mask * 255).astype(np.uint8), mode="L")
        out.append({"score": round(share, 4), "label": name, "mask": base64.b64encode(png(m)).decode()})
    return out


def transform(im: Image.Image, prompt: str | None) -> Image.Image:
    """Image-to-image stand-in: grayscale for "black and white"-like prompts, a 40 % tint for a
    prompt naming a colour, else the colour channels rotated (so the output always differs)."""
    p = (prompt or "").lower()
    if any(k in p for k in ("black and white", "grayscale", "greyscale", "monochrome")):
        return im.convert("L").convert("RGB")
    if prompt and prompt_colour(prompt, default=(-1, -1, -1)) != (-1, -1, -1):
        tint = Image.new("RGB", im.size, prompt_colour(prompt))
        return Image.blend(im, tint, 0.4)
    r, g, b = im.split()
    return Image.merge("RGB", (b, r, g))  # colour-shifted: channels rotated


def condition(im: Image.Image, cond: str) -> Image.Image:
    """ControlNet condition image: depth map for ``depth``, colour map for ``seg``, else edges."""
    if cond == "depth":
        return depth_map(im).convert("RGB")
    if cond == "seg":
        arr = np.zeros((im.height, im.width, 3), dtype=np.uint8)
        for name, _, mask in colour_shares(im):
            arr[mask] = COLOURS[name]
        return Image.fromarray(arr)
    return edges(im)


def controlnet_draw(cond: Image.Image, prompt: str) -> Image.Image:
    """ControlNet stand-in: the prompt colour with the condition's bright lines drawn in the
    complementary colour and a ``[sandbox]`` label with the prompt."""
    colour = prompt_colour(prompt)
    base = Image.new("RGB", cond.size, colour)
    lines = np.asarray(cond.convert("L")) > 127
    arr = np.asarray(base).copy()
    arr[lines] = 255 - np.asarray(colour, dtype=np.uint8)
    im = Image.fromarray(arr)
    ImageDraw.Draw(im).text((8, 8), f"[sandbox] {prompt[:40]}", fill=(255, 255, 255), font=load_font(14))
    return im
