"""ControlNet annotators (``<cond>-control``): the condition image ControlNet generation takes.

Addressed by the task name used as the model id (``POST /models/hed-control``), as the reference
implementation's local server does. Backing: OpenCV for canny; a cached depth-estimation model for
depth; a cached semantic segmentation model for seg (colour per class); ``controlnet_aux``
networks loaded from the cached ``lllyasviel/Annotators`` files for hed, scribble, mlsd,
openpose and normal. Outputs are RGB PNGs of the input's size.
"""

from __future__ import annotations

from typing import Any

from .. import payload as P
from . import Binary, Task
from .common import load_pipeline

# annotator → (controlnet_aux class, files it reads from the Annotators repository)
AUX_FILES = {
    "hed": ("HEDdetector", ("ControlNetHED.pth",)),
    "scribble": ("HEDdetector", ("ControlNetHED.pth",)),
    "mlsd": ("MLSDdetector", ("mlsd_large_512_fp32.pth",)),
    "openpose": ("OpenposeDetector", ("body_pose_model.pth", "hand_pose_model.pth", "facenet.pth")),
    "normal": ("NormalBaeDetector", ("scannet.pt",)),
}


def _prepare(p: P.Payload) -> tuple[Any, dict]:
    opts = {}
    for name in ("low_threshold", "high_threshold"):
        value = P.param(p, name, int)
        if value is not None:
            opts[name] = value
    return P.image(p), opts


def _png(img: Any, size: tuple[int, int]) -> Binary:
    img = img.convert("RGB")
    if img.size != size:
        img = img.resize(size)
    return Binary(P.png(img), "image/png")


def _load_canny(model: Any, device: str) -> str:
    import cv2

    return cv2.__version__


def _canny_run(_: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    import cv2
    import numpy as np
    from PIL import Image

    out = []
    for img, opts in items:
        edges = cv2.Canny(np.asarray(img), opts.get("low_threshold", 100), opts.get("high_threshold", 200))
        out.append(_png(Image.fromarray(np.stack([edges] * 3, axis=-1)), img.size))
    return out


def _depth_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    return [_png(pipe(img)["depth"], img.size) for img, _ in items]


def palette(n: int) -> Any:
    """``n`` distinct RGB colours (uint8, shape n × 3), the same on every run."""
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(max(n, 1), 3), dtype=np.uint8)


def _seg_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    import numpy as np
    from PIL import Image

    out = []
    labels = list(pipe.model.config.id2label.values())
    colours = palette(len(labels))
    for img, _ in items:
        canvas = np.zeros((img.height, img.width, 3), dtype=np.uint8)
        for seg in pipe(img, subtask="semantic"):
            mask = np.asarray(seg["mask"].resize(img.size)) > 127
            idx = labels.index(seg["label"]) if seg["label"] in labels else 0
            canvas[mask] = colours[idx]
        out.append(_png(Image.fromarray(canvas), img.size))
    return out


def _load_aux(cond: str) -> Any:
    def load(model: Any, device: str) -> Any:
        import controlnet_aux

        detector = getattr(controlnet_aux, AUX_FILES[cond][0]).from_pretrained(str(model.path))
        return detector.to(device) if hasattr(detector, "to") else detector
    return load


def _aux_run(cond: str) -> Any:
    def run(detector: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
        out = []
        for img, _ in items:
            side = min(512, max(img.size))
            kwargs = {"scribble": True} if cond == "scribble" else {}
            res = detector(img, detect_resolution=side, image_resolution=side, **kwargs)
            out.append(_png(res, img.size))
        return out
    return run


def _identity(result: Any) -> Any:
    return result


TASKS = [
    Task("canny-control", _load_canny, _prepare, _canny_run, _identity),
    Task("depth-control", load_pipeline("depth-estimation"), _prepare, _depth_run, _identity),
    Task("seg-control", load_pipeline("image-segmentation"), _prepare, _seg_run, _identity),
    *(Task(f"{cond}-control", _load_aux(cond), _prepare, _aux_run(cond), _identity) for cond in AUX_FILES),
]
