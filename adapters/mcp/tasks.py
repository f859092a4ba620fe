"""A HuggingGPT run as an MCP Task (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663,
schema 2026-07-28; its wire shapes in :mod:`pipeline.mcp_tasks`), on the ``mcp`` SDK's extension
API (SEP-2133): :class:`RunTasks` is an ``Extension`` whose ``intercept_tool_call`` answers a
``hugginggpt`` call with a task handle and whose ``methods`` serve ``tasks/get``,
``tasks/cancel`` and ``tasks/update``.

Only for a client that declares the extension on its request (``_meta`` client capabilities of
the 2026-07-28 revision; the ``initialize`` era has no extensions): every other client, and every
other tool, gets the synchronous answer as before. The run is the same turn
(:meth:`adapters.mcp.server.Tools.turn`, followed by :func:`adapters.turn.follow`), in a task of
this process: ``tasks/get`` says ``working`` with the run's last progress line as
``statusMessage`` (the stage, the task), then ``completed`` with the very ``CallToolResult`` a
synchronous call answers, or ``failed`` with the JSON-RPC error a synchronous call would have
raised; ``tasks/cancel`` stops the run as a Stop button does (the answer covers what finished and
the turn is stored as stopped) and the task ends ``cancelled``. A plan that waits for approval
cannot be asked about from a task: the task fails with :data:`NO_APPROVAL`.

Bounds (:class:`TaskTable`): a caller (an API key over HTTP, the local user over stdio) holds at
most :data:`MAX_TASKS` tasks, running or finished; a new one drops that caller's oldest finished
task, and is refused with a sentence when all are running. A finished task is kept
:data:`KEEP` seconds, then forgotten. Task ids are random (128 bits); a task is found only by its
caller: another caller's id, an unknown one and a forgotten one get the same error sentence
(``-32602``), never the run. The caller's rate and concurrency limits (:class:`Access`) count a
task as a call and a run, released when the run ends.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from mcp import types
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.types import CLIENT_CAPABILITIES_META_KEY, CallToolRequestParams
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from pipeline.mcp_tasks import IDENTIFIER, TaskId

from .results import Progress

log = logging.getLogger("adapters.mcp")

MAX_TASKS = 8
"""Tasks one caller holds at most, running or finished (each finished one keeps its answer,
files included, in memory until it is dropped)."""
KEEP = 600.0
"""Seconds a finished task's answer is kept for ``tasks/get``."""
POLL_MS = 500
"""Milliseconds between two ``tasks/get`` suggested to clients (``pollIntervalMs``)."""
NO_TASK = "There is no task {!r} of yours; a finished task is kept for {:g} minutes."
TOO_MANY = ("You have {} HuggingGPT tasks running, the most one client may have; wait for one to end "
            "or cancel one (tasks/cancel).")
NO_INPUT = "The task {!r} waits for no input."
STOPPED = "Stopped at the client's request (tasks/cancel); the turn is kept as stopped."
STOPPING = "Stopping at the client's request (tasks/cancel)."
SHUT_DOWN = "Stopped: the server is shutting down; the turn is kept as stopped."


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RunTask:
    """One ``hugginggpt`` call run as a task.

    Attributes:
        task_id: its id (random, URL-safe).
        caller: whose it is (:meth:`Access.caller`).
        status: ``working``, ``completed``, ``failed`` or ``cancelled``.
        message: the run's last progress line (``statusMessage``).
        result: the ``CallToolResult`` on the wire, once completed.
        error: the JSON-RPC error (``code``, ``message``), once failed.
        finished: ``time.monotonic()`` when it ended, else ``None``.
    """

    task_id: str
    caller: str
    created: float
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    status: str = "working"
    message: str = "Task planning: reading the request"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    finished: float | None = None
    work: asyncio.Task[None] | None = None
    stop_asked: bool = False

    async def report_progress(self, progress: float, total: float | None, message: str | None) -> None:
        """What :class:`adapters.mcp.results.Progress` sends: kept as the status message (one line)."""
        if message and self.finished is None:
            self.message = " ".join(message.split())[:300]
            self.updated_at = _now()

    def end(self, status: str, now: float, *, result: dict[str, Any] | None = None,
            error: dict[str, Any] | None = None, message: str | None = None) -> None:
        """Mark it ended with ``status`` (once: a later end is ignored)."""
        if self.finished is not None:
            return
        self.status, self.result, self.error, self.finished = status, result, error, now
        self.message = message if message is not None else self.message
        self.updated_at = _now()

    def wire(self, keep: float, deadline: float) -> dict[str, Any]:
        """The task as ``CreateTaskResult``/``GetTaskResult`` fields (``ttlMs`` from creation:
        the run's deadline while it works, then ``keep`` seconds after its end)."""
        ends = (self.finished if self.finished is not None else self.created + deadline) - self.created + keep
        out: dict[str, Any] = {"taskId": self.task_id, "status": self.status, "statusMessage": self.message,
                               "createdAt": self.created_at, "lastUpdatedAt": self.updated_at,
                               "ttlMs": int(ends * 1000), "pollIntervalMs": POLL_MS}
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


class TaskTable:
    """The tasks of every caller, bounded (see the module docstring).

    Args:
        per_caller: tasks one caller holds at most (:data:`MAX_TASKS`).
        keep: seconds a finished task is kept (:data:`KEEP`).
        clock: monotonic seconds (``time.monotonic``).
    """

    def __init__(self, per_caller: int = MAX_TASKS, keep: float = KEEP,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_caller, self.keep, self.clock = per_caller, keep, clock
        self.tasks: dict[str, RunTask] = {}

    def _sweep(self) -> None:
        now = self.clock()
        for task_id in [i for i, t in self.tasks.items() if t.finished is not None and now - t.finished > self.keep]:
            del self.tasks[task_id]

    def add(self, caller: str) -> RunTask:
        """A new task of ``caller``, dropping its oldest finished one when it holds the most.

        Raises:
            MCPError: all of the caller's tasks are running (:data:`TOO_MANY`).
        """
        self._sweep()
        mine = [t for t in self.tasks.values() if t.caller == caller]
        if len(mine) >= self.per_caller:
            done = sorted((t for t in mine if t.finished is not None), key=lambda t: t.finished or 0.0)
            if not done:
                raise MCPError(types.INVALID_REQUEST, TOO_MANY.format(len(mine)))
            del self.tasks[done[0].task_id]
        task = RunTask(secrets.token_urlsafe(16), caller, self.clock())
        self.tasks[task.task_id] = task
        return task

    def get(self, caller: str, task_id: str) -> RunTask:
        """``caller``'s task ``task_id``.

        Raises:
            MCPError: no such task of this caller (``-32602``, :data:`NO_TASK`: the same sentence
                for another caller's, an unknown and a forgotten id).
        """
        self._sweep()
        task = self.tasks.get(task_id)
        if task is None or task.caller != caller:
            raise MCPError(types.INVALID_PARAMS, NO_TASK.format(task_id[:64], self.keep / 60))
        return task

    def drop(self, task_id: str) -> None:
        """Forget ``task_id`` (a task that could not start)."""
        self.tasks.pop(task_id, None)

    async def close(self) -> None:
        """Cancel the runs still working (each stops as a Stop does) and wait for them."""
        running = [t.work for t in self.tasks.values() if t.work is not None and not t.work.done()]
        for work in running:
            work.cancel()
        if running:
            await asyncio.wait(running, timeout=60)


def declares_tasks(ctx: Any) -> bool:
    """Whether the request of ``ctx`` declares the Tasks extension (its own ``_meta`` client
    capabilities, 2026-07-28; ext-tasks: "MUST NOT return CreateTaskResult to a client that did
    not include the extension capability on its request")."""
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = (getattr(ctx, "meta", None) or {}).get(CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and IDENTIFIER in extensions


class RunTasks(Extension):
    """The Tasks extension of our server (see the module docstring).

    Args:
        tools: the server's tool handlers (:class:`adapters.mcp.server.Tools`: ``admitted``,
            ``answer_run``, ``access``, ``deadline``).
        table: the tasks (a :class:`TaskTable` with the defaults unless given).
    """

    identifier = IDENTIFIER

    def __init__(self, tools: Any, table: TaskTable | None = None) -> None:
        self.tools = tools
        self.table = table or TaskTable()

    def methods(self) -> list[MethodBinding]:
        """``tasks/get``, ``tasks/cancel`` and ``tasks/update`` (no ``tasks/list``: ext-tasks has none)."""
        return [MethodBinding("tasks/get", TaskId, self.get), MethodBinding("tasks/cancel", TaskId, self.cancel),
                MethodBinding("tasks/update", TaskId, self.update)]

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: Any, call_next: Any) -> Any:
        """A ``hugginggpt`` call of a client that declares the extension becomes a task; every
        other call goes on unchanged."""
        if params.name != "hugginggpt" or not declares_tasks(ctx):
            return await call_next(ctx)
        return await self.start(ctx, params.arguments)

    async def start(self, ctx: Any, arguments: Any) -> dict[str, Any]:
        """Check the call as a synchronous one is checked, then start its run; returns the handle.

        Raises:
            MCPError: bad arguments, no or a wrong key, over a limit, too many tasks.
        """
        caller, a, release = await self.tools.admitted(ctx, arguments)
        try:
            task = self.table.add(caller)
        except MCPError:
            release()
            raise
        task.work = asyncio.create_task(self._work(task, a, release), name=f"mcp-task-{task.task_id[:8]}")
        log.info("MCP task %s started for %s", task.task_id[:8], caller)
        return {"resultType": "task", **task.wire(self.table.keep, self.tools.deadline)}

    async def _work(self, task: RunTask, a: Any, release: Callable[[], None]) -> None:
        try:
            result = await self.tools.answer_run(task.caller, a, Progress(task))
            task.end("completed", self.table.clock(), result=result.model_dump(by_alias=True, mode="json",
                                                                                exclude_none=True),
                     message="Done." if not result.is_error else "Done, with an error result.")
        except MCPError as e:
            task.end("failed", self.table.clock(), error={"code": e.code, "message": e.message}, message=e.message)
        except asyncio.CancelledError:  # tasks/cancel, or the server stops (TaskTable.close)
            task.end("cancelled", self.table.clock(), message=STOPPED if task.stop_asked else SHUT_DOWN)
        finally:
            release()
            log.info("MCP task %s ended: %s", task.task_id[:8], task.status)

    async def get(self, ctx: Any, params: TaskId) -> dict[str, Any]:
        """``tasks/get``: the caller's task as it stands.

        Raises:
            MCPError: not a task of this caller (:data:`NO_TASK`), no or a wrong key.
        """
        task = self.table.get(await self.tools.access.caller(ctx), params.task_id)
        return {"resultType": "complete", **task.wire(self.table.keep, self.tools.deadline)}

    async def cancel(self, ctx: Any, params: TaskId) -> dict[str, Any]:
        """``tasks/cancel``: stop the run (acknowledged at once; the task ends ``cancelled`` once
        the stopped turn is stored). An ended task stays as it ended.

        Raises:
            MCPError: not a task of this caller (:data:`NO_TASK`), no or a wrong key.
        """
        task = self.table.get(await self.tools.access.caller(ctx), params.task_id)
        if task.work is not None and not task.work.done() and task.finished is None:
            await task.report_progress(0, None, STOPPING)
            task.stop_asked = True
            task.work.cancel()
        return {"resultType": "complete"}

    async def update(self, ctx: Any, params: TaskId) -> dict[str, Any]:
        """``tasks/update``: our tasks never wait for input.

        Raises:
            MCPError: always (``-32602``): :data:`NO_INPUT`, or :data:`NO_TASK`.
        """
        self.table.get(await self.tools.access.caller(ctx), params.task_id)
        raise MCPError(types.INVALID_PARAMS, NO_INPUT.format(params.task_id[:64]))
