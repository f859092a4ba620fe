"""Helpers the task modules share: reading a payload's input and options, loading a transformers
pipeline, and running a pipeline on a batch of ``(input, options)`` items."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import payload as P

MAX_NEW_TOKENS = 512  # tokens a generating model may add to one answer: text generation, audio and video LMs


def with_options(read: Callable[[P.Payload], Any], *names: tuple[str, Any]) -> Callable[[P.Payload], tuple[Any, dict]]:
    """A task's payload reader: the input ``read`` takes from the payload (``payload.text``,
    ``payload.image``) and the named ``parameters`` that are set, each checked against its type
    (``(name, type or tuple of types)``).

    Raises (from the reader):
        BadPayload: the input or a parameter does not fit.
    """
    def prepare(p: P.Payload) -> tuple[Any, dict]:
        opts = {n: P.param(p, n, k) for n, k in names}
        return read(p), {k: v for k, v in opts.items() if v is not None}
    return prepare


def torch_device(device: str) -> Any:
    import torch

    return torch.device(device)


def load_pipeline(hf_task: str) -> Any:
    """A loader for a transformers ``pipeline(hf_task)`` from the model's snapshot folder."""

    def load(model: Any, device: str) -> Any:
        from transformers import pipeline

        return pipeline(hf_task, model=str(model.path), device=torch_device(device))

    return load


def run_grouped(pipe: Any, items: list[tuple[Any, dict]]) -> list[Any]:
    """Run ``pipe`` on ``items`` (input, keyword options), one call per distinct options (a batch
    when several items share them); results in the order of ``items``."""
    groups: dict[str, list[int]] = {}
    for i, (_, opts) in enumerate(items):
        groups.setdefault(repr(sorted(opts.items())), []).append(i)
    out: list[Any] = [None] * len(items)
    for indices in groups.values():
        opts = items[indices[0]][1]
        inputs = [items[i][0] for i in indices]
        results = pipe(inputs, batch_size=len(inputs), **opts) if len(inputs) > 1 else [pipe(inputs[0], **opts)]
        for i, r in zip(indices, results, strict=True):
            out[i] = r
    return out


def first_device(net: Any) -> Any:
    return next(net.parameters()).device


def load_multimodal(model: Any, device: str) -> Any:
    """``(processor, model, model id)`` of a multimodal chat model (``AutoModelForMultimodalLM``: audio and
    video language models) from the model's snapshot folder, in eval mode on ``device``."""
    from transformers import AutoModelForMultimodalLM, AutoProcessor

    processor = AutoProcessor.from_pretrained(str(model.path))
    net = AutoModelForMultimodalLM.from_pretrained(str(model.path)).to(torch_device(device)).eval()
    return processor, net, model.id


def chat_request(p: P.Payload, kind: str, decode: Callable[[str, str], Any]) -> tuple[Any, str, int]:
    """``(media, question, max new tokens)`` of a chat-completions body holding one ``kind`` part
    (:func:`expert_server.payload.chat_parts`); ``decode(field name, inline data)`` reads the media;
    the answer's length is the request's ``max_tokens``, at most :data:`MAX_NEW_TOKENS`.

    Raises:
        BadPayload, TooLarge: from :func:`~expert_server.payload.chat_parts` and ``decode``.
    """
    question, data = P.chat_parts(p, kind)
    asked = p.extra.get("max_tokens")
    tokens = asked if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0 else MAX_NEW_TOKENS
    part_type, key = P.CHAT_MEDIA[kind]
    return decode(f"messages.{part_type}.{key}", data), question, min(tokens, MAX_NEW_TOKENS)


PROCESSOR_KEYWORD = {"audio": "audio", "video": "videos"}  # a transformers processor's keyword for each kind


def chat_answer(runner: Any, kind: str, media: Any, question: str, max_tokens: int, **media_kw: Any) -> str:
    """The model's answer to ``question`` about ``media`` (``kind``: ``audio`` or ``video``), at
    most ``max_tokens`` new tokens, greedy; ``media_kw`` go to the processor; ``runner`` is
    :func:`load_multimodal`'s triple."""
    import torch

    processor, net, _ = runner
    conversation = [{"role": "user", "content": [{"type": kind}, {"type": "text", "text": question}]}]
    prompt = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    enc = processor(text=prompt, **{PROCESSOR_KEYWORD[kind]: [media]}, return_tensors="pt", **media_kw).to(first_device(net))
    with torch.inference_mode():
        ids = net.generate(**enc, max_new_tokens=max_tokens, do_sample=False)
    return processor.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)[0].strip()


def chat_reply(model_id: str, answer: str) -> dict:
    """A chat-completions response (OpenAI's format, which ``huggingface_hub`` parses) holding
    ``answer`` from ``model_id``."""
    import time
    import uuid

    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_id, "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": answer}}]}
