"""The tool list a TaskBench evaluation scores against, chosen by the user, never guessed.

TaskBench has one tool list per domain, its ``tool_desc.json`` (``{"nodes": [{"id", "desc",
"input-type", "output-type"}]}``). Its ``evaluate.py`` reads three things from it: the tools, in
file order, as the labels of node F1 (``types``) and as the ids of the edit distance
(``tool_map``: 1-based, unknown names 0), and each tool's ``output-type[0]`` (``"none"`` when
empty) as the argument name of a ``<node-j>`` argument. Both domains' lists ship with this package
(``hugginggpt/evaluation/tools/``); ``--tools FILE`` reads another one.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from bot.errors import InputError

BUILTIN: tuple[str, ...] = ("huggingface", "multimedia")
"""The tool lists shipped with the package: TaskBench's ``data_huggingface`` and ``data_multimedia``."""

DEFAULT = "huggingface"


@dataclass(frozen=True)
class ToolList:
    """One TaskBench tool list.

    Attributes:
        name: ``"huggingface"``, ``"multimedia"``, or the file's path as given.
        source: ``"built-in"`` or ``"file"``.
        ids: tool names in ``tool_desc.json`` order.
        outputs: tool name → its first output type (``"none"`` when it lists none).
    """

    name: str
    source: str
    ids: tuple[str, ...]
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of tools."""
        return len(self.ids)

    def __contains__(self, tool: object) -> bool:
        return tool in self.outputs

    def index(self, tool: str) -> int:
        """``evaluate.py``'s ``tool_map``: the tool's 1-based position, 0 for a name not in the list."""
        try:
            return self.ids.index(tool) + 1
        except ValueError:
            return 0

    def output_of(self, tool: str) -> str:
        """The argument name of a reference to ``tool``'s output: its first output type, ``"other"``
        for a tool not in the list (``evaluate.py``'s ``tool_output_type_map.get(name, "other")``)."""
        return self.outputs.get(tool, "other")

    def outside(self, names: Iterable[str]) -> int:
        """How many of ``names`` are not tools of this list."""
        return sum(n not in self.outputs for n in names)

    def describe(self) -> dict[str, Any]:
        """``{"name", "source", "size"}`` for the report."""
        return {"name": self.name, "source": self.source, "size": self.size}


def parse(raw: Any, name: str, source: str) -> ToolList:
    """A tool list from the parsed content of a ``tool_desc.json``.

    Raises:
        ValueError: ``raw`` is not ``{"nodes": [{"id": str, "output-type": [str, ...]}, ...]}``
            with at least one node.
    """
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    if not isinstance(nodes, list) or not nodes:
        raise ValueError("no list of tools under 'nodes'")
    ids: list[str] = []
    outputs: dict[str, str] = {}
    for number, node in enumerate(nodes, 1):
        tool = node.get("id") if isinstance(node, dict) else None
        types = node.get("output-type") if isinstance(node, dict) else None
        if not isinstance(tool, str) or not tool or not isinstance(types, list):
            raise ValueError(f"tool {number} has no 'id' or no 'output-type' list")
        if tool not in outputs:
            ids.append(tool)
            outputs[tool] = str(types[0]) if types else "none"
    return ToolList(name, source, tuple(ids), outputs)


def builtin(name: str) -> ToolList:
    """One of :data:`BUILTIN` (``KeyError`` for any other name)."""
    if name not in BUILTIN:
        raise KeyError(name)
    text = resources.files("hugginggpt.evaluation.tools").joinpath(f"{name}.json").read_text(encoding="utf-8")
    return parse(json.loads(text), name, "built-in")


def from_file(path: Path) -> ToolList:
    """A ``tool_desc.json`` the user names.

    Raises:
        InputError: the file is missing, unreadable, not JSON or not TaskBench's format (one
            sentence naming the file; the exit status of input errors).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"The tool list {path} does not exist; give TaskBench's tool_desc.json, "
                         f"or --tools {' or --tools '.join(BUILTIN)}.") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; give TaskBench's tool_desc.json file.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"The tool list {path} cannot be read ({getattr(e, 'strerror', None) or 'not UTF-8'}).") from None
    try:
        return parse(json.loads(text), str(path), "file")
    except ValueError as e:
        raise InputError(
            f"{path} is not TaskBench's tool_desc.json ({e}); it needs {{\"nodes\": [{{\"id\", \"output-type\"}}]}}.",
            f"bad tool list {path}: {e}",
        ) from None


def resolve(value: str) -> ToolList:
    """``--tools``: a built-in name or a file path.

    Raises:
        InputError: as :func:`from_file`.
    """
    return builtin(value) if value in BUILTIN else from_file(Path(value))


def argument(value: str) -> str:
    """The ``--tools`` argument type: a built-in name, or something that names a file (an existing
    path, or a name with a folder or a ``.json`` ending; a missing file is then an input error).

    Raises:
        argparse.ArgumentTypeError: anything else (a misspelt built-in name): a usage error.
    """
    if value in BUILTIN or Path(value).exists() or "/" in value or "\\" in value or value.endswith(".json"):
        return value
    raise argparse.ArgumentTypeError(
        f"{value!r} is neither {' nor '.join(BUILTIN)} nor an existing tool_desc.json file"
    )


def suggestion(chosen: ToolList, gold_nodes: list[str]) -> str | None:
    """The warning to print when most ``gold_nodes`` are not tools of ``chosen`` (``None`` when
    most are): names the built-in list that covers the most of them, if that is another one."""
    if not gold_nodes or chosen.outside(gold_nodes) * 2 <= len(gold_nodes):
        return None
    best = max(BUILTIN, key=lambda n: len(gold_nodes) - builtin(n).outside(gold_nodes))
    hint = f" Did you mean --tools {best}?" if best != chosen.name and builtin(best).outside(gold_nodes) < chosen.outside(gold_nodes) else ""
    return (f"Warning: {chosen.outside(gold_nodes)} of {len(gold_nodes)} gold nodes name tools outside the "
            f"{chosen.name} tool list ({chosen.size} tools), so they cannot count as hits.{hint}")
