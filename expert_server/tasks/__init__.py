"""The tasks the server runs: one :class:`Task` per pipeline tag, split by domain.

A task says how a model of it loads (``load(model, device) -> runner``, blocking), how one request
body becomes an input (``prepare(payload) -> item``, raising ``BadPayload``), how a list of inputs
runs (``run(runner, items) -> results``; more than one item only when ``batch``) and how a result
becomes the response the Hugging Face client parses (``encode(result) -> Reply``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..cache import CONDITIONS


@dataclass(frozen=True)
class Binary:
    """A response that is a file: ``data`` with its ``media_type``."""

    data: bytes
    media_type: str


@dataclass(frozen=True)
class Task:
    """How the server runs one task (see the module docstring)."""

    name: str
    load: Callable[[Any, str], Any]
    prepare: Callable[[Any], Any]
    run: Callable[[Any, list[Any]], list[Any]]
    encode: Callable[[Any], Any]
    batch: bool = False
    text_only: bool = False  # its body is JSON holding texts only (no file): bounded by max_text_chars


TEXT_BODY_BYTES = 6  # bytes of JSON one character of text may take ("\\u00e9": 6 bytes)
TEXT_BODY_SLACK = 2**20  # bytes of a text task's body besides its texts: parameters, field names


def body_limit(task: Task, max_body_bytes: int, max_text_chars: int) -> tuple[int, str]:
    """``(bytes, the setting that says so)``: how long the body of a request for ``task`` may be.
    ``max_body_bytes``; for a task whose body holds texts only, also what ``max_text_chars``
    characters can take in JSON, so that a text over it is refused by its ``Content-Length``,
    before it is read."""
    text = TEXT_BODY_BYTES * max_text_chars + TEXT_BODY_SLACK
    if task.text_only and text < max_body_bytes:
        return text, f"{text} bytes for the texts of max_text_chars = {max_text_chars}"
    return max_body_bytes, f"max_body_bytes = {max_body_bytes}"


def registry() -> dict[str, Task]:
    """Task name → :class:`Task`, for every task with a local path."""
    from . import annotators, audio, diffusion, text, vision

    tasks: dict[str, Task] = {}
    for module in (text, vision, audio, diffusion, annotators):
        for task in module.TASKS:
            tasks[task.name] = task
    for cond in CONDITIONS:
        tasks[f"{cond}-text-to-image"] = diffusion.controlnet_task(f"{cond}-text-to-image")
    return tasks


def task_for(name: str) -> Task | None:
    """The :class:`Task` called ``name`` (a pipeline tag or ControlNet task), or ``None``."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = registry()
    return _REGISTRY.get(name)


_REGISTRY: dict[str, Task] | None = None

_IMPORTS = {"transformers": ("torch", "transformers.pipelines"), "diffusers": ("torch", "diffusers.pipelines"),
            "controlnet_aux": ("torch", "controlnet_aux")}


def import_libraries(libraries: set[str]) -> None:
    """Import the machine-learning libraries that models of ``libraries`` (``"transformers"``,
    ``"diffusers"``, ``"controlnet_aux"``; others are ignored) load with (blocking; about 10 s for
    torch and transformers on a CPU), so a server's first request pays for its model, not for them."""
    import importlib

    for module in dict.fromkeys(m for lib in sorted(libraries) for m in _IMPORTS.get(lib, ())):
        importlib.import_module(module)
