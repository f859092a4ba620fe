"""What the MCP server's tools answer, and the progress they report while they run.

A run's answer is text content (the answer, then the conversation id to continue with), its
generated images and audio as image/audio content, other files (video, text) as embedded
resources ``hugginggpt://conversations/<id>/files/<resource id>``, and the plan, the model
selections and each task's result as structured content. Progress notifications follow the
run's stages (MCP specification, "Progress": ``progress`` grows with every notification,
``total`` is known once the plan is).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from mcp import types

from adapters.http.safe_markdown import Mode, sanitize
from adapters.progress import replan_sentence
from pipeline.types import (
    Event,
    ModelSelected,
    Notice,
    PlanReady,
    ReplanStarted,
    Resource,
    ResponseDelta,
    RunRecord,
    Selection,
    Task,
    TaskFailed,
    TaskFinished,
    TaskPlanned,
    TaskResult,
    TaskSkipped,
    TaskStarted,
)

log = logging.getLogger("adapters.mcp")
SCHEME = "hugginggpt"


def _file_block(f: Resource, data: bytes, conversation_id: str | None) -> Any:
    encoded = base64.b64encode(data).decode("ascii")
    if f.kind == "image":
        return types.ImageContent(type="image", data=encoded, mime_type=f.mime)
    if f.kind == "audio":
        return types.AudioContent(type="audio", data=encoded, mime_type=f.mime)
    uri = f"{SCHEME}://conversations/{conversation_id or 'none'}/files/{f.id}"
    return types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(uri=uri, mime_type=f.mime, blob=encoded))


async def file_blocks(files: list[Resource], conversation_id: str | None) -> list[Any]:
    """Content blocks of generated files (read off the event loop)."""
    out = []
    for f in files:
        try:
            data = await asyncio.to_thread(f.path.read_bytes)
        except OSError as e:  # a pruned file: said in the text, logged for the operator
            log.warning("generated file %s unreadable: %s", f.id, e)
            out.append(types.TextContent(type="text", text=f"(The file {f.id} is no longer available.)"))
            continue
        out.append(_file_block(f, data, conversation_id))
    return out


def _selection(s: Selection) -> dict[str, Any]:
    return {"model": s.model, "runner": s.runner, "reason": s.reason}


def _result(r: TaskResult) -> dict[str, Any]:
    out = r.output
    return {"status": r.status, "model": r.model, "error": r.error, "text": out.text if out else None,
            "files": [f.id for f in out.files] if out else [],
            "data": out.data.to_json() if out and out.data is not None else None}


def _files_json(files: list[Resource]) -> list[dict[str, Any]]:
    return [{"id": f.id, "kind": f.kind, "mime": f.mime, "size": f.size, "description": f.description} for f in files]


async def run_result(record: RunRecord, conversation_id: str | None, external_images: Mode = "link",
                     notice: str | None = None) -> types.CallToolResult:
    """The ``hugginggpt`` tool's answer to a finished run (``is_error`` when it has no answer).

    The answer's Markdown shows no image from elsewhere (``[server] external_images``,
    :func:`adapters.http.safe_markdown.sanitize`): an MCP client that renders it would load it,
    and the controller may have been led to write one that carries the user's data in its URL.
    Generated files come as content blocks, so no image link of the answer is ours. ``notice``
    (what the answer lacks, :func:`adapters.turn.notice_of`) is the last text block."""
    structured = {
        "conversation_id": conversation_id, "status": record.status, "stopped": record.stopped,
        "tasks": [t.to_json() for t in record.tasks],
        "selections": {str(k): _selection(s) for k, s in sorted(record.selections.items())},
        "results": {str(k): _result(r) for k, r in sorted(record.results.items())},
        "files": _files_json(record.files), "notes": list(record.notes), "rounds": [r.to_json() for r in record.rounds],
    }
    more = f"\n\n(Conversation id: {conversation_id}; pass it as conversation_id to continue.)" if conversation_id else ""
    if not record.answered:
        text = (record.error or "The request could not be answered.") + more
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured,
                                    is_error=True)
    answer = sanitize(record.response, f"{SCHEME}://", external_images)
    blocks = [types.TextContent(type="text", text=answer + more), *await file_blocks(record.files, conversation_id)]
    if notice:
        blocks.append(types.TextContent(type="text", text=f"⚠️ {notice}"))
    return types.CallToolResult(content=blocks, structured_content=structured)


def plan_result(tasks: list[Task]) -> types.CallToolResult:
    """The ``plan`` tool's answer: the task graph as text lines and as structured content."""
    lines = [f"{t.id}. {t.task}" + (f" after {', '.join(map(str, t.dep))}" if t.dep else "")
             + f" with {', '.join(f'{k}={v[:60]!r}' for k, v in t.args.items())}" for t in tasks]
    text = "\n".join(lines) if lines else "No expert task is needed: the controller would answer directly."
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content={"tasks": [t.to_json() for t in tasks]})


async def task_result(task: str, selection: Selection | None, result: TaskResult,
                      external_images: Mode = "link") -> types.CallToolResult:
    """A registry task tool's answer: its text (no image from elsewhere, as :func:`run_result`)
    and files, or ``is_error`` with the sentence."""
    structured = {"task": task, "selection": _selection(selection) if selection else None, "result": _result(result)}
    if result.status != "ok" or result.output is None:
        text = result.error or f"{task} failed."
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured,
                                    is_error=True)
    out = result.output
    text = sanitize(out.text, f"{SCHEME}://", external_images) if out.text else ""
    blocks: list[Any] = [types.TextContent(type="text", text=text)] if text else []
    blocks += await file_blocks(out.files, None)
    if not blocks:
        blocks = [types.TextContent(type="text", text=f"{task} finished on {result.model}.")]
    return types.CallToolResult(content=blocks, structured_content=structured)


def progress_message(event: Event, state: dict[str, Any]) -> str | None:
    """The progress message of one event (``None``: not worth a notification); ``state``
    remembers across events (how many tasks were planned, whether the answer started)."""
    if isinstance(event, Notice):
        return event.text
    if isinstance(event, ReplanStarted):
        return replan_sentence(event)
    if isinstance(event, TaskPlanned):
        return f"Task planning: task {event.task.id} ({event.task.task}) planned and starting"
    if isinstance(event, PlanReady):
        state["planned"] = len(event.tasks)
        if not event.tasks:
            return "Task planning done: no expert task needed"
        return f"Task planning done: {len(event.tasks)} task(s): " + ", ".join(t.task for t in event.tasks)
    if isinstance(event, ModelSelected):
        return f"Model selection: task {event.selection.task_id} → {event.selection.model}"
    if isinstance(event, TaskStarted):
        return f"Task execution: task {event.task_id} running on {event.model}"
    if isinstance(event, TaskFinished):
        return f"Task execution: task {event.result.task_id} done"
    if isinstance(event, (TaskFailed, TaskSkipped)):
        verb = "failed" if isinstance(event, TaskFailed) else "skipped"
        return f"Task execution: task {event.result.task_id} {verb}: {event.result.error}"
    if isinstance(event, ResponseDelta) and not state.get("answering"):
        state["answering"] = True
        return "Response generation: writing the answer"
    return None


class Progress:
    """Progress notifications for one tool call (nothing is sent when the client asked for none).

    Args:
        session: the request's ``ServerSession`` (``ctx.session``).
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self.count = 0
        self.state: dict[str, Any] = {}

    async def say(self, message: str) -> None:
        """Send one notification (failures are logged: the run goes on)."""
        self.count += 1
        total = self.state.get("total")
        try:
            await self.session.report_progress(self.count, max(total, self.count) if total else None, message)
        except Exception as e:  # noqa: BLE001 - a client that went away does not stop the run here
            log.debug("progress not sent: %s", e)

    async def event(self, event: Event) -> None:
        """Report ``event`` if it marks a step."""
        message = progress_message(event, self.state)
        if message is None:
            return
        if "planned" in self.state and "total" not in self.state:
            # the steps still to come: each task's selection, start and end, and the answer
            self.state["total"] = self.count + 1 + 3 * self.state["planned"] + 1
        await self.say(message)
