"""Helpers the task modules share: reading a payload's input and options, loading a transformers
pipeline, and running a pipeline on a batch of ``(input, options)`` items."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import payload as P


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
