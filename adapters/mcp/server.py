"""HuggingGPT as an MCP server (the official ``mcp`` SDK's low-level ``Server``: our tools and
their input schemas are generated from the task registry, which the decorator-based
``MCPServer`` derives from Python signatures instead).

Tools:

- ``hugginggpt(request, files?, conversation_id?)``: one turn of the four stages; the answer as
  text, generated images/audio as image/audio content, the plan, selections and results as
  structured content, and the conversation id to continue with. Progress notifications follow
  the stages; a cancelled call stops the run as a Stop button does (the answer covers what
  finished and the turn is stored as stopped);
- ``plan(request, files?)``: task planning only;
- one tool per registry task (``object-detection``, ``image-to-text``, ...): model selection
  and execution of that task alone.

Protocol versions: the SDK's runner serves both eras on one server, the client's first request
deciding: the ``initialize`` handshake (2024-11-05 to 2025-11-25) and the stateless 2026-07-28
revision (``server/discover``, a ``_meta`` envelope on every request, no session); progress and
cancellation work alike in both. A client that declares the Tasks extension (2026-07-28) gets a
``hugginggpt`` call as an MCP Task: a handle at once, the run followed with ``tasks/get`` and
stopped with ``tasks/cancel`` (:mod:`adapters.mcp.tasks`).

Who may call and how often is the transport's :class:`Access`: over stdio the local user (no
limits, conversations of their own); over HTTP the API keys, rate and concurrency limits and
conversations of the OpenAI-compatible API (:mod:`adapters.mcp.http`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from dataclasses import replace
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import anyio
from mcp import types
from mcp.server.extension import compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from adapters.progress import Progress as TurnProgress
from adapters.turn import CRASHED, Outcome, follow
from bot.approval import CANCELLED, ApprovalNeeded
from bot.direct import plan_only, run_task
from bot.errors import InputError, StorageError, unknown_conversation
from bot.incoming import Approve, ConversationKey, IncomingFile, Message, Requester
from bot.service import Service
from pipeline.errors import HuggingGPTError
from pipeline.tasks import TASKS
from pipeline.types import Event, RunRecord

from .arguments import REQUEST_SCHEMA, RUN_SCHEMA, BadArguments, RunArguments, run_arguments, task_arguments, task_schema
from .results import Progress, plan_result, run_result, task_result
from .tasks import RunTasks, TaskTable

log = logging.getLogger("adapters.mcp")

STOP_GRACE = 30.0
"""Seconds a cancelled run may take to write its stopped answer and store the turn."""
INSTRUCTIONS = (
    "HuggingGPT plans a request as AI tasks, runs Hugging Face models for them and answers. Call `hugginggpt` "
    "with the request and any files (data: URIs); pass the returned conversation_id to continue. `plan` only "
    "plans; the other tools run one task (a Hugging Face pipeline tag) on its own."
)
_END = object()


class Access(Protocol):
    """Who calls, within which limits (one per transport)."""

    platform: str
    """``ConversationKey.platform`` of the conversations made through it."""
    names_conversations: bool
    """Whether a ``conversation_id`` is the caller's own name, its conversation made on first use
    (the HTTP API's names); else it must be a stored conversation's id, as ``hugginggpt chat
    --conversation`` takes it, and an unknown one is refused."""

    async def caller(self, ctx: Any) -> str:
        """The caller's id (an API key id) for the request of ``ctx``.

        Raises:
            MCPError: the caller may not call (no or a wrong key).
        """
        ...

    async def admit(self, caller: str) -> Callable[[], None]:
        """Count one call against the caller's limits and reserve a run; returns the release.

        Raises:
            MCPError: over the rate or concurrency limit (one sentence).
        """
        ...


class LocalAccess:
    """Over stdio: the local user who started the process; no keys, no limits."""

    platform = "mcp"
    names_conversations = False

    async def caller(self, ctx: Any) -> str:
        """``"stdio"``."""
        return "stdio"

    async def admit(self, caller: str) -> Callable[[], None]:
        """Nothing to count."""
        return lambda: None


def invalid(sentence: str) -> MCPError:
    """The MCP error of bad arguments (-32602, "Invalid params") with ``sentence``."""
    return MCPError(types.INVALID_PARAMS, sentence)


@contextlib.contextmanager
def as_mcp_errors(name: str) -> Iterator[None]:
    """Within it, what a call of tool ``name`` raises becomes the MCP error the client gets:
    bad arguments and input (``-32602``) and storage failures with their sentence, anything
    unexpected :data:`adapters.turn.CRASHED` (logged with its traceback); MCP errors and
    cancellation pass unchanged.

    Raises:
        MCPError: as said.
    """
    try:
        yield
    except BadArguments as e:
        raise invalid(str(e)) from None
    except InputError as e:
        raise invalid(e.user_message) from None
    except StorageError as e:
        raise MCPError(types.INTERNAL_ERROR, e.user_message) from None
    except (MCPError, asyncio.CancelledError):
        raise
    except Exception as e:  # one line for the operator, one sentence for the client
        log.error("MCP tool %s failed: %s: %s", name, e.__class__.__name__, e, exc_info=e)
        raise MCPError(types.INTERNAL_ERROR, CRASHED) from None


class Tools:
    """The tool handlers over one service.

    Args:
        service: the running service.
        access: the transport's :class:`Access`.
    """

    def __init__(self, service: Service, access: Access) -> None:
        self.service = service
        self.access = access

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        """``hugginggpt``, ``plan`` and one tool per registry task (MCP tools bridged in are left out)."""
        tools = [
            types.Tool(name="hugginggpt", description="Answer a request with HuggingGPT: plan it as AI tasks, run "
                       "Hugging Face models for them, and answer with text and generated images or audio.",
                       input_schema=RUN_SCHEMA),
            types.Tool(name="plan", description="Task planning only: the graph of AI tasks HuggingGPT would run "
                       "for a request (nothing is run).", input_schema=REQUEST_SCHEMA),
        ]
        tools += [types.Tool(name=name, description=f"{spec.description} (one HuggingGPT expert task: a model is "
                             "selected and run, no planning)", input_schema=task_schema(spec))
                  for name, spec in sorted(TASKS.items()) if spec.domain != "mcp"]
        return types.ListToolsResult(tools=tools)

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        """Dispatch a call; bad arguments and refusals are MCP errors with one sentence, a run
        that fails is a result with ``is_error``.

        Raises:
            MCPError: unknown tool, bad arguments, over a limit, storage unavailable.
        """
        name, args = params.name, params.arguments
        with as_mcp_errors(name):
            if name == "hugginggpt":
                caller, a, release = await self.admitted(ctx, args)
                try:
                    return await self.turn(caller, a, Progress(ctx.session), ctx.session)
                finally:
                    release()
            if name == "plan":
                return await self._plan(ctx, run_arguments(args, name, conversations=False))
            spec = TASKS.get(name)
            if spec is None or spec.domain == "mcp":
                raise invalid(f"There is no tool called {name!r}; list the tools to see them.")
            text, files = task_arguments(args, spec)
            return await self._task(ctx, name, text, files)

    @property
    def deadline(self) -> float:
        """Seconds a run may take (``[inference] deadline``)."""
        return self.service.settings.inference.deadline

    async def admitted(self, ctx: Any, args: Any) -> tuple[str, RunArguments, Callable[[], None]]:
        """The checked arguments of a ``hugginggpt`` call, its caller, and the release of the run
        it was admitted for (:meth:`Access.admit`).

        Raises:
            MCPError: bad arguments (``-32602``), no or a wrong key, over a limit.
        """
        with as_mcp_errors("hugginggpt"):
            a = run_arguments(args, "hugginggpt", conversations=True)
            caller = await self.access.caller(ctx)
            return caller, a, await self.access.admit(caller)

    async def answer_run(self, caller: str, a: RunArguments, progress: Progress) -> types.CallToolResult:
        """:meth:`turn` for a run of an MCP task (:mod:`adapters.mcp.tasks`): no one to ask about
        a plan that waits for approval; failures as :meth:`call_tool` raises them.

        Raises:
            MCPError: as :meth:`call_tool`.
        """
        with as_mcp_errors("hugginggpt"):
            return await self.turn(caller, a, progress, None)

    async def turn(self, caller: str, a: RunArguments, progress: Progress, asker: Any) -> types.CallToolResult:
        """One ``hugginggpt`` turn of ``caller``, reported to ``progress``; a plan that waits for
        approval is asked of the user through ``asker`` (the request's session; ``None`` in a task).

        Raises:
            InputError, StorageError, HuggingGPTError, MCPError: :meth:`call_tool` maps them.
        """
        files = await self.service.check_files(a.files)
        key, name = await self._conversation(caller, a.conversation_id)
        await progress.say("Task planning: reading the request")
        view = McpView(progress)
        record, notice = await self._drive(Message(a.text, files, who=Requester("mcp", caller), key=key), view)
        if view.waiting is not None:  # the plan waits for approval: asked of the user through the client
            approve = await ask_approval(asker, view.waiting, self.service)
            view = McpView(progress)
            record, notice = await self._drive(Message("", who=Requester("mcp", caller), approve=approve), view)
        return await run_result(record, name, self.service.settings.server.external_images, notice)

    async def _conversation(self, caller: str, given: str | None) -> tuple[ConversationKey, str]:
        """The conversation of a ``hugginggpt`` call and the id to give back with its answer
        (:attr:`Access.names_conversations`).

        Raises:
            InputError: over stdio, ``given`` is no stored conversation (the CLI's sentence).
            StorageError: the conversation store fails.
        """
        if self.access.names_conversations:
            name = given or uuid.uuid4().hex
            return ConversationKey(self.access.platform, caller, "chat", name), name
        if given is None:
            key = ConversationKey(self.access.platform, caller, "chat", uuid.uuid4().hex)
            return key, await self.service.conversation_id(key)
        found = await self.service.find_conversation(given)
        if found is None:
            raise unknown_conversation(given)
        return found, given

    async def _drive(self, message: Message, view: McpView) -> tuple[RunRecord, str | None]:
        """Run the turn in a task of its own, followed by :func:`adapters.turn.follow` (progress
        notifications on the way); cancelled, it stops the run (``stop``) and waits for the
        stopped answer to be stored. Returns the record and the notice to say with its answer.

        Raises:
            HuggingGPTError: the service refused the request (``call_tool`` maps it).
            MCPError: the turn crashed (:data:`adapters.turn.CRASHED`; the log has the traceback).
        """
        stop = asyncio.Event()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def drive() -> None:
            try:
                async for event in self.service.handle(replace(message, stop=stop)):
                    queue.put_nowait(event)
            except Exception as e:  # handed to the caller below
                queue.put_nowait(e)
            finally:
                queue.put_nowait(_END)

        async def events() -> AsyncIterator[Event]:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item

        where = message.key.thread if isinstance(message.key, ConversationKey) else "approved plan"
        driver = asyncio.create_task(drive(), name=f"mcp-run-{where}")
        try:
            outcome = await follow(events(), view, where=f"mcp {where}")
        except asyncio.CancelledError:
            stop.set()
            log.info("MCP call cancelled: stopping the run of %s", where)
            with anyio.CancelScope(shield=True):
                await asyncio.wait({driver}, timeout=STOP_GRACE)
            if not driver.done():
                driver.cancel()
            raise
        if outcome.moment == "refused" and outcome.error is not None:
            raise outcome.error
        if outcome.record is None:
            raise MCPError(types.INTERNAL_ERROR, outcome.sentence or CRASHED)
        return outcome.record, view.said

    async def _plan(self, ctx: Any, a: RunArguments) -> types.CallToolResult:
        release = await self.access.admit(await self.access.caller(ctx))
        try:
            await Progress(ctx.session).say("Task planning")
            tasks = await plan_only(self.service, a.text, a.files)
        except (InputError, StorageError):
            raise
        except HuggingGPTError as e:  # the plan could not be made: the tool's error, said
            return types.CallToolResult(content=[types.TextContent(type="text", text=e.user_message)], is_error=True)
        finally:
            release()
        return plan_result(tasks)

    async def _task(self, ctx: Any, task: str, text: dict[str, str], files: dict[str, IncomingFile]) -> types.CallToolResult:
        release = await self.access.admit(await self.access.caller(ctx))
        progress = Progress(ctx.session)
        events: asyncio.Queue[Any] = asyncio.Queue()

        async def report() -> None:
            while (event := await events.get()) is not None:
                await progress.event(event)

        reporter = asyncio.create_task(report())
        try:
            outcome = await run_task(self.service, task, text, files, emit=events.put_nowait)
        finally:
            release()
            events.put_nowait(None)
            await asyncio.wait({reporter}, timeout=5)
            reporter.cancel()
        return await task_result(task, outcome.selection, outcome.result, self.service.settings.server.external_images)


class McpView:
    """MCP's :class:`adapters.turn.TurnView`: each step becomes a progress notification; the
    answer, its files (content blocks) and the notice (the last text block) are the tool's
    result, built once the turn is over (:func:`adapters.mcp.results.run_result`).

    Args:
        progress: the call's progress notifications.

    Attributes:
        said: the notice of an answer that lacks something, else ``None``.
    """

    def __init__(self, progress: Progress) -> None:
        self.notifications = progress
        self.said: str | None = None
        self.waiting: ApprovalNeeded | None = None

    async def progress(self, progress: TurnProgress, event: Event) -> None:
        """Report ``event`` if it marks a step (a plan waiting for approval is kept for the call)."""
        if isinstance(event, ApprovalNeeded):
            self.waiting = event
            return
        await self.notifications.event(event)

    async def answer(self, record: RunRecord, progress: TurnProgress) -> None:
        """Nothing: the tool's result carries it."""

    async def files(self, record: RunRecord) -> None:
        """Nothing: the tool's result carries them as content blocks."""

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """Kept for the tool's result."""
        self.said = sentence

    async def end(self, outcome: Outcome, progress: TurnProgress) -> None:
        """Nothing: a failure is the tool's error (refused, crashed) or its ``is_error`` result."""


APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run": {"type": "boolean", "title": "Run this plan?", "default": False},
        "drop": {"type": "string", "title": "Steps to leave out", "default": "",
                 "description": "task ids, comma-separated; what needs them is left out too"},
    },
    "required": ["run"],
}
"""The form a client shows for a plan waiting for approval (MCP elicitation, form mode)."""
NO_ELICITATION = ("This plan needs approval and this MCP client cannot ask you (it declares no elicitation); "
                  "nothing was run. Ask again from a client that can, or set [planning] approve = \"never\".")
NO_APPROVAL = ("This plan needs approval, which cannot be asked while it runs as an MCP task; nothing was run. "
               "Ask again from a client without the Tasks extension, or set [planning] approve = \"never\".")


async def ask_approval(session: Any, waiting: ApprovalNeeded, service: Service) -> Approve:
    """Ask the user, through the client (``elicitation/create``, form mode), whether to run a plan
    that waits for approval (:mod:`bot.approval`); a plan not approved is discarded.

    Returns:
        What runs it (:class:`bot.incoming.Approve`, with the steps to leave out).

    Args:
        session: the request's session; ``None`` in an MCP task (:data:`NO_APPROVAL`).

    Raises:
        InputError: a task cannot ask (:data:`NO_APPROVAL`), the client declares no elicitation
            (:data:`NO_ELICITATION`), or the user declined or cancelled (:data:`bot.approval.CANCELLED`).
    """
    if session is None:
        await service.cancel_plan(waiting.plan_id, None)
        raise InputError(NO_APPROVAL)
    if not session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability())):
        await service.cancel_plan(waiting.plan_id, None)
        raise InputError(NO_ELICITATION)
    result = await session.elicit_form(waiting.text(), APPROVAL_FORM)
    content = result.content or {}
    if result.action != "accept" or content.get("run") is not True:
        await service.cancel_plan(waiting.plan_id, None)
        raise InputError(CANCELLED, f"plan {waiting.plan_id} {result.action}")
    drop = tuple(int(x) for x in re.findall(r"\d{1,4}", str(content.get("drop") or "")))[:len(waiting.tasks)]
    return Approve(waiting.plan_id, drop)


def build(service: Service, access: Access | None = None, *, version: str = "") -> tuple[Server, TaskTable]:
    """The MCP server over ``service`` (stdio access unless ``access`` is given) with the Tasks
    extension (:mod:`adapters.mcp.tasks`), and its tasks (close them when the server stops).

    The SDK's ``MCPServer(extensions=...)`` applies an extension to the decorator-based server;
    this is the same on the low-level ``Server``: its methods registered, its settings advertised
    under ``capabilities.extensions``, and ``tools/call`` wrapped by its interceptor
    (``compose_tool_call_handler``)."""
    tools = Tools(service, access or LocalAccess())
    server = Server("hugginggpt", version=version, title="HuggingGPT", instructions=INSTRUCTIONS,
                    on_list_tools=tools.list_tools)
    tasks = RunTasks(tools)
    for method in tasks.methods():
        server.add_request_handler(method.method, method.params_type, method.handler)
    server.extensions[tasks.identifier] = tasks.settings()
    server.add_request_handler("tools/call", types.CallToolRequestParams,
                               compose_tool_call_handler([tasks], tools.call_tool))
    return server, tasks.table


def build_server(service: Service, access: Access | None = None, *, version: str = "") -> Server:
    """The MCP server of :func:`build` (its tasks end with the process)."""
    return build(service, access, version=version)[0]


async def serve_stdio(server: Server) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes them, in the era
    the client's first request chooses (``Server.run``: the SDK's dual-era loop)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
