"""Prompt templates and demonstrations, loaded from the ``prompts`` package (data files).

Templates are Jinja2 (``*.j2``); demonstrations are JSON. Wording is ours; the structure follows
the paper's prompt design (HuggingGPT §3.1 specification + demonstrations + chat log, §3.2
candidate list, §3.4 request/plan/selections/results).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("prompts", "."),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=False,
    trim_blocks=False,
    auto_reload=False,  # package data: no stat() of the file on every render
)


def render(name: str, **values: Any) -> str:
    """Render template ``prompts/<name>.j2`` with ``values``.

    Raises:
        jinja2.UndefinedError: a placeholder of the template was not given (a programming error).
    """
    return _env.get_template(f"{name}.j2").render(**values).strip()


def warm() -> None:
    """Compile every template and load the demonstrations now (at start-up; about 30 ms of CPU)
    rather than inside the first run that needs each of them."""
    for name in _env.list_templates(extensions=["j2"]):
        _env.get_template(name)
    demonstrations()
    controller_instructions()


@lru_cache(maxsize=1)
def demonstrations() -> list[dict[str, Any]]:
    """The few-shot planning demonstrations: ``[{"request", "resources", "tasks"}]``."""
    text = resources.files("prompts").joinpath("demonstrations.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def controller_instructions() -> dict[str, str]:
    """Task name → the instruction for a text task the controller serves itself
    (``prompts/controller_tasks.json``)."""
    text = resources.files("prompts").joinpath("controller_tasks.json").read_text(encoding="utf-8")
    return json.loads(text)
