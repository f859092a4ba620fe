"""MCP Tasks (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663, schema 2026-07-28): its
wire shapes, and the client side that follows a tool server's task to its end.

The extension (repository modelcontextprotocol/ext-tasks, ``schema.ts``): a client declares it in
its capabilities; a server may then answer ``tools/call`` with a task handle (``resultType:
"task"``, ``taskId``, ``status``, ``pollIntervalMs``) in lieu of the result; the client polls
``tasks/get`` (``working``, ``input_required``, ``completed`` with ``result``, ``failed`` with
``error``, ``cancelled``; ``statusMessage`` says how it goes) and may send ``tasks/cancel``.
``tasks/*`` requests carry the task id in the ``Mcp-Name`` header over HTTP
(``Request.name_param``). Only the 2026-07-28 revision carries it: the SDK neither advertises
the extension nor accepts a task handle on a connection in the ``initialize`` era.

Built on the ``mcp`` SDK's extension API (SEP-2133): :class:`TasksClient` is a
``ClientExtension`` whose one ``ResultClaim`` (``resultType: "task"``) the SDK's
``Client.call_tool`` hands every task handle to; :meth:`TasksClient.follow` polls it and
returns the ``CallToolResult``, so a caller of ``call_tool`` sees a result as from any tool.

Bounds (a tool server's answers are untrusted): the poll interval the server suggests is kept
within :data:`POLL_MIN`..:data:`POLL_MAX` seconds; each ``tasks/get`` waits at most
:data:`GET_TIMEOUT` seconds; there is no end of the polling of its own: the caller's deadline
(the per-task timeout, the run's deadline, a Stop) cancels it, and then ``tasks/cancel`` is sent
(waited for at most :data:`CANCEL_WAIT` seconds) so the server stops working for nobody.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

log = logging.getLogger(__name__)

IDENTIFIER = "io.modelcontextprotocol/tasks"
"""The extension's identifier (SEP-2663), under ``capabilities.extensions`` on both sides."""
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
ENDED: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""The terminal statuses (ext-tasks, "Task Status")."""
POLL_MIN = 0.25
"""Seconds between two ``tasks/get`` at least, whatever ``pollIntervalMs`` says (a server
saying 0 would have us spin)."""
POLL_MAX = 5.0
"""Seconds between two ``tasks/get`` at most (a server saying an hour would have us miss the
end of a task by as much)."""
POLL_DEFAULT = 1.0
"""Seconds between two ``tasks/get`` when the server suggests no interval."""
GET_TIMEOUT = 30.0
"""Seconds one ``tasks/get`` may take."""
CANCEL_WAIT = 5.0
"""Seconds a ``tasks/cancel`` sent on the way out (deadline, Stop) is waited for."""


class TaskHandle(Result):
    """``CreateTaskResult``: what a server answers ``tools/call`` with when it runs it as a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: TaskStatus = "working"
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TaskState(Result):
    """``GetTaskResult``: a task as ``tasks/get`` tells it (``result`` once ``completed``,
    ``error`` once ``failed``)."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: TaskStatus
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskId(RequestParams):
    """The params of ``tasks/get`` and ``tasks/cancel``: ``{"taskId": ...}``."""

    task_id: str


class GetTask(Request[TaskId, Literal["tasks/get"]]):
    """``tasks/get``."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskId
    name_param = "taskId"


class CancelTask(Request[TaskId, Literal["tasks/cancel"]]):
    """``tasks/cancel``."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskId
    name_param = "taskId"


class TaskEnded(Exception):
    """A tool server's task ended without a result.

    Attributes:
        status: ``"failed"``, ``"cancelled"`` (by the server), ``"input_required"`` (it asked
            for input this client cannot give; the task was cancelled) or ``"no_result"``
            (completed without a result).
        detail: what the server said (its error message or status message; untrusted text).
    """

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"task {status}: {detail}")
        self.status = status
        self.detail = detail


def poll_delay(interval_ms: int | None) -> float:
    """Seconds to wait before the next ``tasks/get``: the server's ``pollIntervalMs`` within
    :data:`POLL_MIN`..:data:`POLL_MAX` (:data:`POLL_DEFAULT` when it gave none)."""
    if interval_ms is None:
        return POLL_DEFAULT
    return min(POLL_MAX, max(POLL_MIN, interval_ms / 1000))


class TasksClient(ClientExtension):
    """The Tasks extension for the SDK's ``Client(extensions=[...])``: declares it, and follows
    each task handle a ``tools/call`` answers with (see the module docstring)."""

    identifier = IDENTIFIER

    def claims(self) -> list[ResultClaim[Any]]:
        """The one claim: ``resultType: "task"`` on ``tools/call``, followed by :meth:`follow`."""
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.follow)]

    async def follow(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        """Poll ``handle`` until it ends; cancelled (deadline, Stop), send ``tasks/cancel`` first.

        Returns:
            The task's ``CallToolResult`` (``isError`` results included: the caller judges them).

        Raises:
            TaskEnded: the task failed, was cancelled by the server, or asked for input.
            MCPError: a ``tasks/get`` was refused or timed out, or the connection was lost.
            pydantic.ValidationError: a ``tasks/get`` answer or the result is malformed.
        """
        session, task_id = ctx.session, handle.task_id
        state: TaskHandle | TaskState = handle
        log.info("MCP tool %s answered with task %s", ctx.tool_name, task_id[:80])
        try:
            while state.status not in ENDED:
                if state.status == "input_required":
                    await _cancel(session, task_id)
                    raise TaskEnded("input_required", state.status_message or "")
                await asyncio.sleep(poll_delay(state.poll_interval_ms))
                said = state.status_message
                state = await session.send_request(GetTask(params=TaskId(task_id=task_id)), TaskState,
                                                   request_read_timeout_seconds=GET_TIMEOUT)
                if state.status_message and state.status_message != said:
                    log.debug("MCP tool %s, task %s: %s", ctx.tool_name, task_id[:80], state.status_message[:200])
        except asyncio.CancelledError:
            log.info("MCP tool %s: task %s cut (deadline or stop): sending tasks/cancel", ctx.tool_name, task_id[:80])
            await _cancel(session, task_id)
            raise
        return _ended(state)


def _ended(state: TaskHandle | TaskState) -> CallToolResult:
    """The result of a task in a terminal status.

    Raises:
        TaskEnded: failed, cancelled, or completed without a result (``"no_result"``).
        pydantic.ValidationError: a completed task's result is malformed.
    """
    if state.status == "completed" and isinstance(state, TaskState) and state.result is not None:
        return CallToolResult.model_validate(state.result)
    if state.status == "failed":
        error = getattr(state, "error", None) or {}
        raise TaskEnded("failed", str(error.get("message") or state.status_message or ""))
    if state.status == "cancelled":
        raise TaskEnded("cancelled", state.status_message or "")
    raise TaskEnded("no_result", "")


async def _cancel(session: Any, task_id: str) -> None:
    """Send ``tasks/cancel`` in a task of its own (so that a cancelled caller can still send
    it), waiting for the acknowledgement at most :data:`CANCEL_WAIT` seconds; failures logged."""

    async def send() -> None:
        await session.send_request(CancelTask(params=TaskId(task_id=task_id)), Result,
                                   request_read_timeout_seconds=CANCEL_WAIT)

    sending = asyncio.ensure_future(send())
    done, _ = await asyncio.wait({sending}, timeout=CANCEL_WAIT)
    if not done:
        sending.cancel()
        log.warning("tasks/cancel of task %s: no acknowledgement within %g s", task_id[:80], CANCEL_WAIT)
    elif sending.exception() is not None:
        log.warning("tasks/cancel of task %s failed: %s", task_id[:80], sending.exception())
