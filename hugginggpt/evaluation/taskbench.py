"""TaskBench's data as it ships, and its tool graphs next to our plans.

TaskBench (Shen et al. 2023, "TaskBench: Benchmarking Large Language Models for Task Automation",
microsoft/JARVIS ``taskbench/``) gives, per user request, a gold graph of tools: ``tool_nodes``
``[{"task": tool name, "arguments": [...]}]`` (an argument ``"<node-j>"`` is the output of node
``j``) and ``tool_links`` ``[{"source", "target"}]``. Its ``evaluate.py`` compares graphs by tool
*names*; this module turns both the gold record and our validated plan into that form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.types import Resource, Task

from bot.errors import InputError
from .toollist import ToolList

TOOL_TASKS: dict[str, str] = {
    "Token Classification": "token-classification",
    "Translation": "translation",
    "Summarization": "summarization",
    "Question Answering": "question-answering",
    "Conversational": "conversational",
    "Text Generation": "text-generation",
    "Sentence Similarity": "sentence-similarity",
    "Tabular Classification": "tabular-classification",
    "Object Detection": "object-detection",
    "Image Classification": "image-classification",
    "Image-to-Image": "image-to-image",
    "Image-to-Text": "image-to-text",
    "Text-to-Image": "text-to-image",
    "Text-to-Video": "text-to-video",
    "Visual Question Answering": "visual-question-answering",
    "Document Question Answering": "document-question-answering",
    "Image Segmentation": "image-segmentation",
    "Depth Estimation": "depth-estimation",
    "Text-to-Speech": "text-to-speech",
    "Automatic Speech Recognition": "automatic-speech-recognition",
    "Audio-to-Audio": "audio-to-audio",
    "Audio Classification": "audio-classification",
    "Image Editing": "image-to-image",  # TaskBench's name for text-guided image-to-image
}
"""TaskBench's Hugging Face-domain tool (``data_huggingface/tool_desc.json``) → our task (pipeline tag)."""

FILE_KINDS: dict[str, tuple[str, ...]] = {  # evaluate.py's get_content_type, by extension
    "image": ("jpg", "png", "jpeg", "gif", "bmp", "tiff", "svg", "ico"),
    "audio": ("mp3", "wav", "wma", "ogg", "aac", "flac", "aiff", "au"),
    "video": ("mp4", "avi", "mov", "flv", "wmv", "mkv", "webm", "m4v", "mpg", "mpeg"),
}
_MIME = {"image": "image/jpeg", "audio": "audio/wav", "video": "video/mp4", "text": "text/plain"}
_FILE_NAME = re.compile(r"\b[\w.-]+\.(" + "|".join(e for exts in FILE_KINDS.values() for e in exts) + r"|txt)\b", re.I)
_NODE_REF = re.compile(r"<node-(\d+)>")
_RESOURCE_REF = re.compile(r"<resource>-(\d+)")


def json_lines(text: str, not_json: Callable[[int], str]) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of a JSON-lines ``text`` (TaskBench's format; blank
    lines skipped; numbers from 1).

    Raises:
        InputError: a line is not JSON; its sentence is ``not_json(line number)``.
    """
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            raise InputError(not_json(number)) from None


def content_type(argument: str) -> str:
    """The kind of a literal argument as TaskBench's ``evaluate.py`` judges it: ``"image"``,
    ``"audio"`` or ``"video"`` when it contains a file extension of that kind, else ``"text"``."""
    low = argument.strip("'").lower()
    for kind, exts in FILE_KINDS.items():
        if any("." + e in low for e in exts):
            return kind
    return "text"


@dataclass(frozen=True)
class Graph:
    """A tool graph in TaskBench's terms.

    Attributes:
        nodes: tool names, in node order (duplicates kept; the F1 metrics compare them as sets,
            the edit distance as a sequence).
        links: ``(source tool, target tool)`` pairs, one per ``<node-j>`` argument.
        arguments: ``(tool, argument name, value)`` per argument: the name is the literal's
            kind (``image``/``audio``/``video``/``text``) or, for the output of another node,
            that tool's output type; the value is the literal, or that tool's name.
        steps: the request's steps in words (``None`` when the gold record has none).
    """

    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()
    arguments: tuple[tuple[str, str, str], ...] = ()
    steps: tuple[str, ...] | None = None

    @property
    def argument_names(self) -> tuple[str, ...]:
        """``"{tool}-{argument name}"`` items (TaskBench's t-F1)."""
        return tuple(f"{tool}-{name}" for tool, name, _ in self.arguments)

    @property
    def argument_values(self) -> tuple[str, ...]:
        """``"{tool}-{argument name}-{value}"`` items (TaskBench's v-F1)."""
        return tuple(f"{tool}-{name}-{value}" for tool, name, value in self.arguments)


@dataclass
class GoldRecord:
    """One TaskBench record.

    Attributes:
        id: TaskBench's id (a string).
        request: ``user_request``.
        shape: ``"single" | "chain" | "dag"`` (TaskBench's ``type``; ``"unknown"`` when absent).
        graph: the gold graph (with ``tool_steps`` as its steps when the record has them).
        unknown_tools: gold tool names that are not tools of the list (wrong gold records, or the
            wrong ``--tools``).
    """

    id: str
    request: str
    shape: str
    graph: Graph
    unknown_tools: tuple[str, ...] = field(default=())


def _argument_text(argument: Any) -> str:
    if isinstance(argument, dict):  # {"name": value} in some records
        argument = next(iter(argument.values()), "")
    if isinstance(argument, list):
        argument = " ".join(str(a) for a in argument)
    return str(argument)


def gold_graph(nodes: list[dict[str, Any]], tools: ToolList, steps: list[str] | None = None) -> Graph:
    """The gold graph of ``tool_nodes`` as ``evaluate.py`` reads it: an argument containing
    ``<node-j>`` is a link from node j's tool and an argument named by that tool's output type
    whose value is that tool's name (a node referring to itself is skipped; ``tool_links`` are not
    read); any other argument is named by :func:`content_type` and valued by its text. Where
    ``evaluate.py`` trips on a wrong record this counts what is there instead: a reference to a node
    that does not exist is skipped (``evaluate.py`` repeats the previous argument) and a node with
    no ``arguments`` has none (``evaluate.py`` drops the whole record).

    Args:
        nodes: ``[{"task", "arguments"}]``.
        tools: the tool list (output types).
        steps: ``tool_steps`` of the record, if any.
    """
    names = [str(n.get("task", "")).replace("_", " ") for n in nodes]
    links: list[tuple[str, str]] = []
    arguments: list[tuple[str, str, str]] = []
    for i, node in enumerate(nodes):
        for raw in node.get("arguments") or []:
            text = _argument_text(raw)
            ref = _NODE_REF.search(text)
            if ref:
                j = int(ref.group(1))
                if j == i or j >= len(names):
                    continue
                links.append((names[j], names[i]))
                arguments.append((names[i], tools.output_of(names[j]), names[j]))
            else:
                arguments.append((names[i], content_type(text), text))
    return Graph(tuple(names), tuple(links), tuple(arguments), None if steps is None else tuple(steps))


MULTIMEDIA_TASKS: dict[str, str] = {
    "Audio-to-Text": "automatic-speech-recognition",
    "Text-to-Audio": "text-to-speech",
    "Audio Noise Reduction": "audio-to-audio",
    "Text Summarizer": "summarization",
    "Text Translator": "translation",
    "Text Sentiment Analysis": "text-classification",
    "Image-to-Text": "image-to-text",
    "Text-to-Image": "text-to-image",
    "Text-to-Video": "text-to-video",
}
"""TaskBench's multimedia-domain tools (``data_multimedia/tool_desc.json``) that one of our tasks
does; the others (downloaders, web search, video editing…) have no task of ours."""


def tool_of(task: Task, tools: ToolList | None = None) -> str:
    """The TaskBench tool name of one of our tasks: its Hugging Face-domain name, or its
    multimedia-domain name when ``tools`` has that one and not the former; our pipeline tag when
    it has none. ``image-to-image`` with a text argument is TaskBench's "Image Editing"."""
    if task.task == "image-to-image":
        return "Image Editing" if task.args.get("text") else "Image-to-Image"
    name = next((tool for tool, tag in TOOL_TASKS.items() if tag == task.task and tool != "Image Editing"), task.task)
    if tools is not None and name not in tools:
        name = next((tool for tool, tag in MULTIMEDIA_TASKS.items() if tag == task.task and tool in tools), name)
    return name


def covered(tools: ToolList) -> frozenset[str]:
    """The tools of ``tools`` that some task of ours is scored as."""
    return frozenset(t for t in tools.ids if t in TOOL_TASKS or t in MULTIMEDIA_TASKS)


SETTINGS = frozenset({"src_lang", "tgt_lang"})
"""Arguments that are settings of the call, not inputs (TaskBench's tools have none)."""


def plan_graph(tasks: list[Task], tools: ToolList, files: dict[str, str] | None = None) -> Graph:
    """Our validated plan as a TaskBench graph whose values compare with the gold's.

    An argument holding ``<resource>-N`` (alone or inside text) is the output of task N: a link
    from its tool, named by that tool's output type, valued by its name (as ``<node-j>``); any
    other argument is a literal: a resource id of the conversation becomes the file name the
    request named (``files``), and is then named by :func:`content_type` like the gold's literals.
    The steps are one line per task, ``"{tool}: {value}, {value}"`` (our plans have no step texts;
    this is a deterministic stand-in for TaskBench's ``task_steps``).

    Args:
        tasks: the plan, in its order.
        tools: the tool list (output types).
        files: resource id → file name (``{r.id: r.name for r in resources_for(request)}``).
    """
    files = files or {}
    names = {t.id: tool_of(t, tools) for t in tasks}
    links: list[tuple[str, str]] = []
    arguments: list[tuple[str, str, str]] = []
    steps: list[str] = []
    for t in tasks:
        values: list[str] = []
        for key, value in t.args.items():
            if key in SETTINGS:
                continue
            ref = _RESOURCE_REF.search(value)
            if ref and int(ref.group(1)) in names:
                source = names[int(ref.group(1))]
                links.append((source, names[t.id]))
                arguments.append((names[t.id], tools.output_of(source), source))
                values.append(f"the output of {source}")
                continue
            literal = files.get(value, value)
            arguments.append((names[t.id], content_type(literal), literal))
            values.append(literal)
        steps.append(f"{names[t.id]}: {', '.join(values)}")
    return Graph(tuple(names[t.id] for t in tasks), tuple(links), tuple(arguments), tuple(steps))


def resources_for(request: str) -> list[Resource]:
    """The files a TaskBench request names (``example.jpg``, ``example.wav``…) as resources of the
    conversation, so the planner can refer to them by id. Nothing is read from disk: planning only
    sees ids, kinds and names."""
    out: list[Resource] = []
    seen: set[str] = set()
    for m in _FILE_NAME.finditer(request):
        name = m.group(0)
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        ext = m.group(1).lower()
        kind = next((k for k, exts in FILE_KINDS.items() if ext in exts), "text")
        n = sum(r.kind == kind for r in out) + 1
        out.append(Resource(
            id=f"{kind}-{n}", kind=kind, path=Path(name), mime=_MIME[kind], size=0,  # type: ignore[arg-type]
            origin="user", description=f"{kind} file {name}", turn=0, name=name,
        ))
    return out


def _steps(raw: dict[str, Any]) -> list[str] | None:
    steps = raw.get("tool_steps", raw.get("task_steps"))
    if not isinstance(steps, list) or not steps:
        return None
    return [s if isinstance(s, str) else json.dumps(s, ensure_ascii=False) for s in steps]


def load_records(path: Path, tools: ToolList) -> list[GoldRecord]:
    """Read TaskBench's ``data.json`` (JSON lines, whatever the file is named).

    Accepts ``tool_nodes``/``tool_links``/``tool_steps`` and the renamed
    ``task_nodes``/``task_links``/``task_steps``; a record naming a tool that is not in ``tools`` is
    kept (that node is counted in ``unknown_tools``). ``tool_links`` are not read: links come from
    the nodes' ``<node-j>`` arguments, as in ``evaluate.py``.

    Raises:
        InputError: the file cannot be read, a line is not JSON, or a record has no
            ``user_request`` or no nodes (names the line).
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"The data file {path} does not exist.") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; give TaskBench's data.json file.") from None
    except OSError as e:
        raise InputError(f"The data file {path} cannot be read ({e.strerror}).") from None
    records: list[GoldRecord] = []
    for number, raw in json_lines(text, lambda n: f"Line {n} of {path} is not JSON; TaskBench's data.json has one record per line."):
        nodes = raw.get("tool_nodes", raw.get("task_nodes", raw.get("nodes"))) if isinstance(raw, dict) else None
        request = raw.get("user_request") if isinstance(raw, dict) else None
        if not isinstance(request, str) or not isinstance(nodes, list):
            raise InputError(
                f"Line {number} of {path} is not a TaskBench record (it needs user_request and tool_nodes)."
            )
        nodes = [n if isinstance(n, dict) else {"task": str(n), "arguments": []} for n in nodes]
        graph = gold_graph(nodes, tools, _steps(raw))
        records.append(GoldRecord(
            id=str(raw.get("id", number)), request=request, shape=str(raw.get("type") or "unknown"),
            graph=graph, unknown_tools=tuple(n for n in graph.nodes if n not in tools),
        ))
    if not records:
        raise InputError(f"{path} holds no TaskBench records.")
    return records
