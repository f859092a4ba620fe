"""MCP tools as experts: the configured Model Context Protocol servers, their tools as tasks.

Each configured server (a command spoken to over stdio, or a streamable HTTP URL) is connected
with the official ``mcp`` SDK's ``Client`` (the protocol era as ``[mcp.servers.NAME] protocol``
says: by default it asks ``server/discover`` and speaks the stateless 2026-07-28 revision to a
server that answers, the ``initialize`` handshake to one that does not); each of its tools becomes a task of
the registry (:data:`pipeline.tasks.TASKS`) named ``mcp.<server>.<tool>`` (lower case,
``_`` written ``-``, as every task name): the namespace keeps them apart from the pipeline tags
of the registry's own tasks (which never contain a dot). The planner sees them with their
description and input schema, plans them like any task (dependencies, ``<resource>-N``), the
selection gives them to the ``mcp`` runner (:mod:`pipeline.experts.mcp`), and their text, image
and audio results become resources.

Trust: only the configured servers are contacted. What a server says (tool descriptions,
results) is untrusted like the controller's output: no URL is fetched and no path is read
because of it; media are taken only from the bytes in the result, sniffed and size-checked.

Argument kinds from an input schema (the registry's argument kinds, HuggingGPT §3.1): a property
whose ``contentMediaType`` is ``image/*``, ``audio/*`` or ``video/*`` (JSON Schema 2020-12,
"contentMediaType"), or that is named ``image``, ``audio`` or ``video``, takes a file of that
kind, sent as a ``data:`` URI (plain base64 when the property says ``contentEncoding: base64``);
every other property takes text, converted to the property's JSON type (integer, number,
boolean, array, object) when called.

A stdio server's stderr, capped (:func:`capped_stderr`): what the program writes there reaches
its log (the file ``[mcp]`` names, else this process's stderr) only up to ``max_log_bytes`` per start of the
program; the rest is read and discarded, with one line in the log file and one warning in the
application's log saying so. A program that writes without end therefore neither fills the disk
nor blocks on a full pipe.

The SDK's ``stdio_client`` hands its ``errlog`` to the subprocess as its stderr, so it must be a
real file: it gets the write end of a pipe whose read end a thread of this process copies.
A log file larger than the cap when the program starts is first moved to ``<file>.1`` (one
older file is kept), so the files of one server hold at most about four times the cap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, IO

import json_repair

from .config import McpServerConfig, ToolOffer
from .llm import Usage
from .mcp_offer import offered_tools
from .selection import Selector
from .tasks import TASKS, TaskSpec
from .types import Modality, Selection, Task

log = logging.getLogger(__name__)

PREFIX = "mcp."
"""Every MCP task name starts with this (registry tasks never contain a dot)."""
TOOL_OUTPUTS: tuple[Modality, ...] = ("text", "image", "audio")
"""What an MCP tool may return (MCP text, image and audio content); a later task needing a kind
the tool did not return fails with a sentence."""
RETRY_AFTER = 30.0
"""Seconds before a server that could not be reached is tried again."""
_MEDIA = ("image", "audio", "video")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class ToolArg:
    """One argument of a tool: the schema property ``name``, its ``kind`` and JSON ``type``."""

    name: str
    kind: Modality
    type: str = "string"
    base64: bool = False


@dataclass(frozen=True)
class McpTool:
    """A tool of a connected server, as a task.

    Attributes:
        task: its task name, ``mcp.<server>.<tool>``.
        server: the server's configured name.
        name: the tool's own name (what ``tools/call`` takes).
        args: plan argument key (lower case) → :class:`ToolArg`.
        spec: its registry entry.
    """

    task: str
    server: str
    name: str
    args: Mapping[str, ToolArg]
    spec: TaskSpec

    @property
    def label(self) -> str:
        """How selections and results name it: ``mcp:<server>/<tool>``."""
        return f"mcp:{self.server}/{self.name}"


def task_name(server: str, tool: str) -> str:
    """The task name of ``tool`` of ``server`` (canonical: lower case, ``-`` for ``_`` and spaces)."""
    return PREFIX + server + "." + "-".join(tool.strip().lower().replace("_", " ").split())


def _arg_of(name: str, schema: Any) -> ToolArg:
    prop = schema if isinstance(schema, dict) else {}
    media = str(prop.get("contentMediaType") or "").split("/")[0].lower()
    kind: Modality = media if media in _MEDIA else (name.lower() if name.lower() in _MEDIA else "text")  # type: ignore[assignment]
    typ = prop.get("type")
    typ = typ if isinstance(typ, str) else "string"
    return ToolArg(name, kind, typ, str(prop.get("contentEncoding") or "").lower() == "base64")


def _one_line(text: Any, limit: int) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def tool_from_listing(server: str, tool: Any) -> McpTool | None:
    """The task of one listed tool (``mcp.types.Tool``); ``None`` when its name or schema cannot
    be used, or when it can only run as a task of the 2025-11-25 revision (``execution.taskSupport:
    "required"``: a call that does not ask for a task with its ``task`` parameter is refused, and
    this client speaks only the 2026-07-28 Tasks extension, :mod:`pipeline.mcp_tasks`, where the
    server decides and no tool is marked); logged."""
    name = str(getattr(tool, "name", "") or "")
    task = task_name(server, name)
    schema = getattr(tool, "input_schema", None) or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not _NAME.match(task[len(PREFIX):]) or (props is not None and not isinstance(props, dict)):
        log.warning("MCP server %s: tool %r skipped (unusable name or input schema)", server, name[:80])
        return None
    if getattr(getattr(tool, "execution", None), "task_support", None) == "required":
        log.warning("MCP server %s: tool %r skipped: it runs only as a 2025-11-25 MCP task (execution.taskSupport "
                    "'required'); tasks are followed in the 2026-07-28 revision only (protocol = \"auto\")",
                    server, name[:80])
        return None
    args: dict[str, ToolArg] = {}
    for key, prop in (props or {}).items():
        low = str(key).lower()
        if low in args:
            log.warning("MCP server %s: tool %s has two arguments named %r; the second is left out", server, name, low)
            continue
        args[low] = _arg_of(str(key), prop)
    needed = {str(k).lower() for k in (schema.get("required") or []) if isinstance(k, str)}
    required = {k: a.kind for k, a in args.items() if k in needed}
    optional = {k: a.kind for k, a in args.items() if k not in needed}
    shown = "; ".join(
        f"{k}: {a.kind if a.kind != 'text' else a.type}"
        + (f" ({_one_line((props or {}).get(a.name, {}).get('description'), 80)})"
           if isinstance((props or {}).get(a.name), dict) and (props or {})[a.name].get("description") else "")
        for k, a in args.items()
    )
    description = (f"{_one_line(getattr(tool, 'description', '') or name, 300)} [tool {name} of the MCP server "
                   f"{server}; returns text, an image or audio; arguments: {shown or 'none'}]")
    spec = TaskSpec(task, "mcp", required, TOOL_OUTPUTS, description, None, None, optional=optional)
    return McpTool(task, server, name, args, spec)


def call_arguments(tool: McpTool, text: Mapping[str, str], media: Mapping[str, tuple[bytes, str]]) -> dict[str, Any]:
    """The ``tools/call`` arguments: text converted to each property's JSON type, files as
    ``data:`` URIs (or plain base64).

    Args:
        text: plan key → text.
        media: plan key → (bytes, MIME type).

    Raises:
        ValueError: a text cannot be converted to the property's type (one sentence).
    """
    out: dict[str, Any] = {}
    for key, value in text.items():
        arg = tool.args[key]
        v = value.strip()
        try:
            if arg.type == "integer":
                out[arg.name] = int(float(v))
            elif arg.type == "number":
                out[arg.name] = float(v)
            elif arg.type == "boolean":
                if v.lower() not in ("true", "false", "yes", "no", "1", "0"):
                    raise ValueError(v)
                out[arg.name] = v.lower() in ("true", "yes", "1")
            elif arg.type in ("array", "object"):
                out[arg.name] = json_repair.loads(v)
            else:
                out[arg.name] = value
        except ValueError:
            raise ValueError(f"The argument '{arg.name}' of {tool.label} must be {arg.type}, not {v[:40]!r}.") from None
    for key, (data, mime) in media.items():
        arg = tool.args[key]
        encoded = base64.b64encode(data).decode("ascii")
        out[arg.name] = encoded if arg.base64 else f"data:{mime};base64,{encoded}"
    return out


class ToolServer:
    """One configured server, connected in a task of its own (the SDK's transports are context
    managers that must be left in the task that entered them).

    Args:
        config: the server's settings.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.session: Any = None
        self.tools: dict[str, McpTool] = {}
        self.failed_at = float("-inf")
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None

    @property
    def connected(self) -> bool:
        """Whether a session is open."""
        return self.session is not None and self._holder is not None and not self._holder.done()

    def _transport(self) -> Any:
        c = self.config
        if c.command:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(command=c.command, args=list(c.args), env=dict(c.env) or None)
            return capped_stderr(c.name, c.errlog, c.max_log_bytes, lambda errlog: stdio_client(params, errlog=errlog))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=dict(c.headers), timeout=httpx2.Timeout(c.connect_timeout, read=None))
        return _owning(client, streamable_http_client(str(c.url), http_client=client))

    async def _hold(self, ready: asyncio.Future[list[Any]]) -> None:
        from mcp import Client

        from .mcp_tasks import TasksClient  # imports mcp: only when a tool server is configured

        closing = self._closing
        assert closing is not None
        try:
            # the SDK's Client settles the protocol era (McpServerConfig.protocol); no response
            # cache: the tool list is read once per connection;
            # and the Tasks extension: a tool answering with a task is polled to its end (pipeline.mcp_tasks)
            async with Client(self._transport(), mode=self.config.protocol, cache=None,
                              extensions=[TasksClient()]) as session:
                listed: list[Any] = []
                cursor = None
                while True:
                    page = await session.list_tools(cursor=cursor)
                    listed += page.tools
                    cursor = page.next_cursor
                    if not cursor or len(listed) > 500:
                        break
                log.info("MCP server %s speaks protocol %s", self.config.name, session.protocol_version)
                self.session = session
                ready.set_result(listed)
                await closing.wait()
        except BaseException as e:  # noqa: BLE001 - any failure of a server is that server's, logged
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else ConnectionError("cancelled"))
            elif not isinstance(e, asyncio.CancelledError):
                log.warning("MCP server %s: connection lost: %s: %s", self.config.name, e.__class__.__name__, e)
        finally:
            self.session = None

    async def connect(self) -> bool:
        """Start (or restart) the connection and read the tool list; ``False`` when the server
        could not be reached within ``connect_timeout`` (logged; tried again after
        :data:`RETRY_AFTER` seconds)."""
        await self.aclose()
        self._closing = asyncio.Event()
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready), name=f"mcp-{self.config.name}")
        try:
            listed = await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout)
        except (Exception, asyncio.TimeoutError) as e:  # noqa: BLE001 - reported, the server is left out
            log.warning("MCP server %s could not be used: %s: %s", self.config.name, e.__class__.__name__, e)
            self.failed_at = time.monotonic()
            await self.aclose()
            return False
        wanted = set(self.config.tools)
        tools = [t for t in (tool_from_listing(self.config.name, x) for x in listed) if t is not None]
        self.tools = {t.task: t for t in tools if not wanted or t.name in wanted}
        shown = ", ".join(list(self.tools)[:20]) + (f" and {len(self.tools) - 20} more" if len(self.tools) > 20 else "")
        log.info("MCP server %s: %d tool(s): %s", self.config.name, len(self.tools), shown)
        return True

    async def aclose(self) -> None:
        """Close the session (and stop the program of a stdio server)."""
        holder, self._holder = self._holder, None
        if self._closing is not None:
            self._closing.set()
        if holder is not None and not holder.done():
            try:
                await asyncio.wait_for(asyncio.shield(holder), 5.0)
            except (Exception, asyncio.TimeoutError):  # noqa: BLE001 - a stuck server is cancelled
                holder.cancel()
                await asyncio.gather(holder, return_exceptions=True)
        self.session = None


@contextlib.asynccontextmanager
async def _owning(client: Any, transport: Any) -> Any:
    """``transport``'s streams, closing the HTTP ``client`` it uses afterwards."""
    async with client:
        async with transport as streams:
            yield streams


class Toolbox:
    """Every configured MCP server and its tools (see the module docstring).

    Args:
        servers: the servers' settings.
    """

    def __init__(self, servers: Iterable[McpServerConfig]) -> None:
        self.servers = {s.name: ToolServer(s) for s in servers}
        self._lock = asyncio.Lock()

    async def task_names(self) -> frozenset[str]:
        """Task names of the tools of the connected servers; connects those not connected yet (or
        lost, at most every :data:`RETRY_AFTER` seconds), concurrently. Registers their tasks in
        :data:`pipeline.tasks.TASKS`."""
        async with self._lock:
            due = [s for s in self.servers.values()
                   if not s.connected and time.monotonic() - s.failed_at >= RETRY_AFTER]
            await asyncio.gather(*(s.connect() for s in due))
            names: set[str] = set()
            for server in self.servers.values():
                if not server.connected:
                    continue
                for tool in server.tools.values():
                    existing = TASKS.get(tool.task)
                    if existing is not None and existing.domain != "mcp":
                        continue  # never shadows a registry task (cannot happen: no dot in their names)
                    TASKS[tool.task] = tool.spec
                    names.add(tool.task)
            return frozenset(names)

    def tool(self, task: str) -> McpTool | None:
        """The tool behind ``task``, if it belongs to a configured server."""
        if not task.startswith(PREFIX):
            return None
        server = self.servers.get(task[len(PREFIX):].split(".", 1)[0])
        return server.tools.get(task) if server is not None else None

    async def session_for(self, tool: McpTool) -> Any:
        """The open session of ``tool``'s server, reconnecting a lost one.

        Raises:
            ConnectionError: the server cannot be reached now.
        """
        server = self.servers[tool.server]
        if not server.connected:
            async with self._lock:
                if not server.connected and not await server.connect():
                    raise ConnectionError(f"the MCP server {tool.server} cannot be reached")
        return server.session

    async def aclose(self) -> None:
        """Close every connection and take the tools out of the registry."""
        for server in self.servers.values():
            for task in server.tools:
                if TASKS.get(task) is not None and TASKS[task].domain == "mcp":
                    TASKS.pop(task, None)
            await server.aclose()

    async def drop(self, tool: McpTool) -> None:
        """Close the connection of ``tool``'s server after it failed (the next call reconnects)."""
        await self.servers[tool.server].aclose()


class ToolSelector(Selector):
    """Model selection that gives MCP tasks to the ``mcp`` runner and offers the tools of the
    connected servers to the planner; every other task as :class:`pipeline.selection.Selector`.

    Args:
        toolbox: the configured MCP servers.
        *args, **kwargs: as :class:`pipeline.selection.Selector`.
        offer: the bounds on the tools offered to the planner for one request.
    """

    def __init__(self, toolbox: Toolbox, *args: Any, offer: ToolOffer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.toolbox = toolbox
        self.offer = offer

    def offered_tasks(self, available: frozenset[str], request_text: str) -> tuple[frozenset[str], list[str]]:
        """``available`` with only the MCP tools closest to ``request_text`` when the servers
        list more than ``offer`` allows, and the note saying so
        (:func:`pipeline.mcp_offer.offered_tools`)."""
        tools = {n for n in available if self.toolbox.tool(n) is not None}
        return offered_tools(self.offer, available, tools, request_text)

    def placement_notes(self) -> list[str]:
        """As the base class, and one sentence per MCP server that could not be started or
        reached (the user is told as for an expert server that is down)."""
        down = [name for name, s in self.toolbox.servers.items() if not s.connected and s.failed_at > float("-inf")]
        return [*super().placement_notes(),
                *(f"The MCP server {name} could not be started or reached, so its tools are not offered." for name in down)]

    async def served_tasks(self) -> set[str]:
        """The served registry tasks and the tools of the connected MCP servers."""
        served, tools = await asyncio.gather(super().served_tasks(), self.toolbox.task_names())
        return set(served) | set(tools)

    async def select(self, task: Task, request_text: str, usage: Usage) -> tuple[Selection, list[str]]:
        """The tool itself for an MCP task (no candidates, no controller call); else as the base class."""
        tool = self.toolbox.tool(task.task)
        if tool is None:
            return await super().select(task, request_text, usage)
        why = f"the tool {tool.name} of the MCP server {tool.server}"
        return Selection(task.id, tool.label, why, (), "mcp", runner="mcp", where=f"MCP server {tool.server}"), [tool.label]



CHUNK = 64 * 1024
"""Bytes read from the pipe at a time."""
STDERR = 2


def _open_log(path: Path | None, limit: int) -> int:
    """The descriptor to copy to: ``path`` opened for appending (moved to ``<path>.1`` first when
    larger than ``limit`` bytes), or this process's stderr.

    Raises:
        OSError: the file cannot be created or moved.
    """
    if path is None:
        return STDERR
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > limit:
            os.replace(path, path.with_name(path.name + ".1"))
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


class CappedErrlog:
    """The pipe a program's stderr goes into, and the thread that copies at most ``limit`` bytes
    of it to ``dest``.

    Args:
        server: the server's configured name (for the log).
        dest: a writable descriptor (closed by the thread at the end unless it is stderr).
        limit: bytes copied at most; the rest is discarded.
    """

    def __init__(self, server: str, dest: int, limit: int) -> None:
        self.server, self.dest, self.limit = server, dest, limit
        self.kept = self.dropped = 0
        read, write = os.pipe()
        self.writer: IO[str] = os.fdopen(write, "w")
        self._thread = threading.Thread(target=self._copy, args=(read,), name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _copy(self, read: int) -> None:
        try:
            with os.fdopen(read, "rb", buffering=0) as pipe:
                while chunk := pipe.read(CHUNK):
                    self._take(chunk)
        finally:
            if self.dest != STDERR:
                os.close(self.dest)

    def _take(self, chunk: bytes) -> None:
        room = max(0, self.limit - self.kept)
        if room:
            os.write(self.dest, chunk[:room])
            self.kept += min(room, len(chunk))
        if len(chunk) <= room:
            return
        if not self.dropped:
            os.write(self.dest, f"\n[hugginggpt: more than {self.limit:,} bytes since the program started; "
                                "the rest of its output is discarded]\n".encode())
            log.warning("MCP server %s wrote more than %d bytes to stderr since it started; the rest is "
                        "discarded ([mcp] max_log_bytes)", self.server, self.limit)
        self.dropped += len(chunk) - room

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the program's end of the pipe to close."""
        self._thread.join(timeout)


@contextlib.asynccontextmanager
async def capped_stderr(server: str, path: Path | None, limit: int,
                        transport: Callable[[IO[str]], Any]) -> AsyncIterator[Any]:
    """The streams of ``transport(errlog)``, the program's stderr capped at ``limit`` bytes and
    copied to ``path`` (``None``: this process's stderr); see the module docstring.

    Raises:
        OSError: the log file cannot be opened (the server is then left out, as unreachable).
    """
    capped = CappedErrlog(server, _open_log(path, limit), limit)
    try:
        async with transport(capped.writer) as streams:
            capped.writer.close()  # the program holds its own copy: its exit ends the thread
            yield streams
    finally:
        capped.writer.close()
