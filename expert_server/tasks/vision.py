"""Vision tasks: image classification, object detection, image segmentation (masks as base64 PNG),
depth estimation (a PNG depth map), image-to-text, visual question answering and document question
answering, and video-text-to-text (a question about a video, asked and answered in the
chat-completions format; the video decoded bounded, :func:`expert_server.payload.video_frames`).
transformers 5 has no pipeline for captioning or visual question answering, so those
run the model directly (generative models decode text; ViLT-like classifiers pick a label)."""

from __future__ import annotations

import base64
from typing import Any

from .. import payload as P
from ..errors import BadPayload
from . import Binary, Task
from .common import (chat_answer, chat_reply, chat_request, first_device, load_multimodal, load_pipeline,
                     run_grouped, with_options)

MAX_NEW_TOKENS = 64


def _plain_run(runner: Any, items: list[Any]) -> list[Any]:
    return [P.plain(r) for r in run_grouped(runner, items)]


def _detection_run(runner: Any, items: list[Any]) -> list[Any]:
    out = []
    for r in run_grouped(runner, items):
        out.append([{"label": d["label"], "score": float(d["score"]), "box": {k: int(v) for k, v in d["box"].items()}}
                    for d in r])
    return out


def _segmentation_run(runner: Any, items: list[Any]) -> list[Any]:
    out = []
    for r in run_grouped(runner, items):
        out.append([{"label": s["label"], "score": None if s.get("score") is None else float(s["score"]),
                     "mask": base64.b64encode(P.png(s["mask"])).decode("ascii")} for s in r])
    return out


def _depth_run(runner: Any, items: list[Any]) -> list[Any]:
    return [Binary(P.png(r["depth"]), "image/png") for r in run_grouped(runner, items)]


def _question_prepare(p: P.Payload) -> tuple[Any, str, dict]:
    """Visual QA: ``{"inputs": b64 image, "question": ..., "image": b64}`` (the client's extra
    fields) or ``{"inputs": {"image": b64, "question": ...}}`` (document QA and older clients)."""
    inputs = p.inputs if isinstance(p.inputs, dict) else {}
    question = p.extra.get("question", inputs.get("question"))
    if question is None:
        raise BadPayload("question", "is missing")
    question = P.text(p, "question", question)
    img_field, img_value = ("image", p.extra["image"]) if "image" in p.extra else \
        ("inputs.image", inputs.get("image")) if inputs else ("inputs", None)
    img = P.image(p, img_field, img_value)
    top_k = P.param(p, "top_k", int, 1)
    return img, question, {"top_k": top_k}


def _load_vision_text(model: Any, device: str) -> tuple[Any, Any, Any]:
    """``(model, image processor, tokenizer)`` for captioning and visual question answering: the
    class named by ``config.json`` ``architectures``, with the repository's image processor and
    tokenizer loaded separately (composite processors differ from one family to the next)."""
    import transformers

    net = getattr(transformers, model.architectures[0]).from_pretrained(str(model.path)).to(device).eval()
    images = transformers.AutoImageProcessor.from_pretrained(str(model.path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model.path))
    return net, images, tokenizer


def _caption_run(runner: Any, items: list[Any]) -> list[Any]:
    import torch

    net, images, tok = runner
    out = []
    for img, opts in items:
        enc = images(images=img, return_tensors="pt").to(first_device(net))
        with torch.inference_mode():
            ids = net.generate(**enc, max_new_tokens=opts.get("max_new_tokens", MAX_NEW_TOKENS))
        out.append([{"generated_text": tok.decode(ids[0], skip_special_tokens=True).strip()}])
    return out


def _vqa_run(runner: Any, items: list[Any]) -> list[Any]:
    import torch

    net, images, tok = runner
    out = []
    for img, question, opts in items:
        enc = {**tok(question, return_tensors="pt"), **images(images=img, return_tensors="pt")}
        enc = {k: v.to(first_device(net)) for k, v in enc.items()}
        with torch.inference_mode():
            name = type(net).__name__
            if "ForQuestionAnswering" not in name or name.startswith("Blip"):  # a generator, not a classifier
                ids = net.generate(**enc, max_new_tokens=MAX_NEW_TOKENS)
                out.append([{"answer": tok.decode(ids[0], skip_special_tokens=True).strip(), "score": None}])
                continue
            probs = net(**enc).logits[0].sigmoid()
        top = probs.topk(min(opts["top_k"], probs.numel()))
        out.append([{"answer": net.config.id2label[int(i)], "score": float(s)} for s, i in zip(top.values, top.indices, strict=True)])
    return out


def _docqa_run(runner: Any, items: list[Any]) -> list[Any]:
    out = []
    for img, question, opts in items:
        res = runner(image=img, question=question, top_k=opts["top_k"])
        out.append(P.plain(res if isinstance(res, list) else [res]))
    return out


def _identity(result: Any) -> Any:
    return result


def _watch_prepare(p: P.Payload) -> tuple[Any, str, int]:
    return chat_request(p, "video", lambda name, data: P.video_frames(p, name, data))


def _watch_run(runner: Any, items: list[tuple[Any, str, int]]) -> list[Any]:
    """Chat-completions replies: the model watches each video's kept frames (one array, frames x
    height x width x RGB) and answers."""
    import numpy as np

    return [chat_reply(runner[2], chat_answer(runner, "video", np.stack([np.asarray(f) for f in frames]), question,
                                              tokens)) for frames, question, tokens in items]


TASKS = [
    Task("image-classification", load_pipeline("image-classification"), with_options(P.image, ("top_k", int)), _plain_run,
         _identity, batch=True),
    Task("object-detection", load_pipeline("object-detection"), with_options(P.image, ("threshold", (int, float))),
         _detection_run, _identity),
    Task("image-segmentation", load_pipeline("image-segmentation"),
         with_options(P.image, ("threshold", (int, float)), ("subtask", str)), _segmentation_run, _identity),
    Task("depth-estimation", load_pipeline("depth-estimation"), with_options(P.image), _depth_run, _identity),
    Task("image-to-text", _load_vision_text, with_options(P.image, ("max_new_tokens", int)), _caption_run, _identity),
    Task("visual-question-answering", _load_vision_text, _question_prepare, _vqa_run, _identity),
    Task("document-question-answering", load_pipeline("document-question-answering"), _question_prepare, _docqa_run,
         _identity),
    Task("video-text-to-text", load_multimodal, _watch_prepare, _watch_run, _identity),
]
