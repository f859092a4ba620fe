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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.tasks import TASKS
from pipeline.types import Resource, Task

from ..errors import InputError

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

TOOL_OUTPUT: dict[str, str] = {
    "Token Classification": "text", "Translation": "text", "Summarization": "text",
    "Question Answering": "text", "Conversational": "text", "Text Generation": "text",
    "Sentence Similarity": "text", "Tabular Classification": "text", "Object Detection": "image",
    "Image Classification": "text", "Image-to-Image": "image", "Image-to-Text": "text",
    "Text-to-Image": "image", "Text-to-Video": "video", "Visual Question Answering": "text",
    "Document Question Answering": "text", "Image Segmentation": "image", "Depth Estimation": "image",
    "Text-to-Speech": "audio", "Automatic Speech Recognition": "text", "Audio-to-Audio": "audio",
    "Audio Classification": "text", "Image Editing": "image",
}
"""Output type of each Hugging Face-domain tool (``output-type`` in ``tool_desc.json``), used when no
``tool_desc.json`` lies next to the data file."""

FILE_KINDS: dict[str, tuple[str, ...]] = {  # evaluate.py's get_content_type, by extension
    "image": ("jpg", "png", "jpeg", "gif", "bmp", "tiff", "svg", "ico"),
    "audio": ("mp3", "wav", "wma", "ogg", "aac", "flac", "aiff", "au"),
    "video": ("mp4", "avi", "mov", "flv", "wmv", "mkv", "webm", "m4v", "mpg", "mpeg"),
}
_MIME = {"image": "image/jpeg", "audio": "audio/wav", "video": "video/mp4", "text": "text/plain"}
_FILE_NAME = re.compile(r"\b[\w.-]+\.(" + "|".join(e for exts in FILE_KINDS.values() for e in exts) + r"|txt)\b", re.I)
_NODE_REF = re.compile(r"<node-(\d+)>")


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
        nodes: tool names, in node order (duplicates kept; metrics compare them as sets).
        links: ``(source tool, target tool)`` pairs (resource dependencies).
        arguments: ``"<tool>-<argument kind>"`` strings (TaskBench's task-argument-name pairs).
    """

    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()
    arguments: tuple[str, ...] = ()


@dataclass
class GoldRecord:
    """One TaskBench record.

    Attributes:
        id: TaskBench's id (a string).
        request: ``user_request``.
        shape: ``"single" | "chain" | "dag"`` (TaskBench's ``type``; ``"unknown"`` when absent).
        graph: the gold graph.
        unknown_tools: gold tool names that are not tools of the domain (wrong gold records).
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


def gold_graph(nodes: list[dict[str, Any]], outputs: dict[str, str]) -> Graph:
    """The gold graph of ``tool_nodes``: links and argument kinds come from ``<node-j>`` arguments,
    as ``evaluate.py`` does for resource dependencies (its ``tool_links`` are not read).

    Args:
        nodes: ``[{"task", "arguments"}]``.
        outputs: tool name → output type.
    """
    names = [str(n.get("task", "")).replace("_", " ") for n in nodes]
    links: list[tuple[str, str]] = []
    arguments: list[str] = []
    for i, node in enumerate(nodes):
        for raw in node.get("arguments") or []:
            text = _argument_text(raw)
            ref = _NODE_REF.search(text)
            if ref:
                j = int(ref.group(1))
                if j == i or j >= len(names):
                    continue
                links.append((names[j], names[i]))
                arguments.append(f"{names[i]}-{outputs.get(names[j], 'other')}")
            else:
                arguments.append(f"{names[i]}-{content_type(text)}")
    return Graph(tuple(names), tuple(links), tuple(arguments))


def tool_of(task: Task) -> str:
    """The TaskBench tool name of one of our tasks (our pipeline tag when it has none).
    ``image-to-image`` with a text argument is TaskBench's "Image Editing"."""
    if task.task == "image-to-image":
        return "Image Editing" if task.args.get("text") else "Image-to-Image"
    for tool, name in TOOL_TASKS.items():
        if name == task.task and tool != "Image Editing":
            return tool
    return task.task


def plan_graph(tasks: list[Task]) -> Graph:
    """Our validated plan as a TaskBench graph: a link for each ``<resource>-N`` argument."""
    names = {t.id: tool_of(t) for t in tasks}
    links: list[tuple[str, str]] = []
    arguments: list[str] = []
    for t in tasks:
        spec = TASKS[t.task]
        for key, value in t.args.items():
            kind = spec.allowed.get(key, "text")
            if key in ("src_lang", "tgt_lang"):  # settings of the call, not inputs (TaskBench has none)
                continue
            arguments.append(f"{names[t.id]}-{kind}")
            for ref in re.finditer(r"<resource>-(\d+)", value):
                n = int(ref.group(1))
                if n in names:
                    links.append((names[n], names[t.id]))
    return Graph(tuple(names[t.id] for t in tasks), tuple(links), tuple(arguments))


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


def tool_types(data: Path) -> tuple[frozenset[str], dict[str, str]]:
    """The domain's tools and their output types: from ``tool_desc.json`` next to ``data`` (or its
    parent) when there is one, else the Hugging Face domain's 23 tools (:data:`TOOL_OUTPUT`).

    Raises:
        InputError: a ``tool_desc.json`` exists but is not TaskBench's format.
    """
    for folder in (data.parent, data.parent.parent):
        desc = folder / "tool_desc.json"
        if desc.is_file():
            try:
                tools = json.loads(desc.read_text(encoding="utf-8"))["nodes"]
                return frozenset(t["id"] for t in tools), {
                    t["id"]: (t.get("output-type") or ["none"])[0] for t in tools
                }
            except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
                raise InputError(f"{desc} is not TaskBench's tool_desc.json ({e.__class__.__name__}).") from None
    return frozenset(TOOL_OUTPUT), dict(TOOL_OUTPUT)


def load_records(path: Path, tools: frozenset[str], outputs: dict[str, str]) -> list[GoldRecord]:
    """Read TaskBench's ``data.json`` (JSON lines, whatever the file is named).

    Accepts ``tool_nodes``/``tool_links`` and the renamed ``task_nodes``/``task_links``; a record
    naming a tool that is not in ``tools`` is kept (that node is counted in ``unknown_tools``).

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
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            raise InputError(f"Line {number} of {path} is not JSON; TaskBench's data.json has one record per line.") from None
        nodes = raw.get("tool_nodes", raw.get("task_nodes", raw.get("nodes"))) if isinstance(raw, dict) else None
        request = raw.get("user_request") if isinstance(raw, dict) else None
        if not isinstance(request, str) or not isinstance(nodes, list):
            raise InputError(
                f"Line {number} of {path} is not a TaskBench record (it needs user_request and tool_nodes)."
            )
        nodes = [n if isinstance(n, dict) else {"task": str(n), "arguments": []} for n in nodes]
        graph = gold_graph(nodes, outputs)
        records.append(GoldRecord(
            id=str(raw.get("id", number)), request=request, shape=str(raw.get("type") or "unknown"),
            graph=graph, unknown_tools=tuple(n for n in graph.nodes if n not in tools),
        ))
    if not records:
        raise InputError(f"{path} holds no TaskBench records.")
    return records
