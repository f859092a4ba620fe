"""The OpenAI-compatible routes: ``POST /v1/chat/completions`` (streaming and not), ``GET
/v1/models``, ``GET /v1/models/{id}``; the files routes (:mod:`adapters.http.files`) are part of
this router.

Wire format: the OpenAI API reference (Chat Completions, the chat completion and chunk objects,
Server-Sent Events ``data: {json}\\n\\n`` ending with ``data: [DONE]\\n\\n``, error objects). A
run that fails after the stream began ends with ``data: {"error": {...}}`` (as OpenAI does; the
SDK raises ``APIError`` on it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from adapters.progress import Progress
from adapters.turn import CRASHED, Outcome
from bot.incoming import Message, Requester
from bot.errors import InputError, StorageError
from pipeline.errors import ControllerError, DeadlineError, PlanError
from pipeline.types import Event, PlanReady, ResponseDelta, RunRecord

from .auth import Caller
from . import files
from .common import (
    CONVERSATION_HEADER, answer_guard, caller_of, conversation_of, file_url, read_json, safe_answer, state_of,
)
from .content import parse_messages, text_of
from .errors import ApiError, storage_error
from .models import ChatCompletionRequest, schema_of
from .render import MODEL_ID, Completion, file_links, preamble, progress_line, usage
from .runs import Run

log = logging.getLogger("adapters.http")
router = APIRouter()
router.include_router(files.router)
_STARTED = int(time.time())


APPROVAL_OVER_V1 = ("This request's plan needs approval before anything runs ([planning] approve), which this "
                    "endpoint cannot ask for: send it to POST /hugginggpt, which answers with the plan's id, then "
                    "POST /plans/{id}/run.")


def run_error(record: RunRecord) -> ApiError:
    """The error object of a run that ended without an answer: 504 when its deadline passed, 502
    when the controller failed, 500 for an unusable plan or anything else (the user's sentence)."""
    if record.status == "awaiting approval":  # kept; runs only through POST /plans/{id}/run (adapters.http.reference)
        return ApiError(409, APPROVAL_OVER_V1, "approval_required")
    failure = record.failure
    sentence = record.error or "The request could not be answered."
    if record.deadline_passed or isinstance(failure, DeadlineError):
        return ApiError(504, sentence, "deadline_exceeded")
    if isinstance(failure, InputError):
        return ApiError(400, sentence, "invalid_request")
    if isinstance(failure, StorageError):
        return storage_error(failure)
    if isinstance(failure, ControllerError):
        return ApiError(502, sentence, "controller_error")
    if isinstance(failure, PlanError):
        return ApiError(500, sentence, "plan_error")
    return ApiError(500, sentence, "run_failed")


def turn_error(outcome: Outcome) -> ApiError:
    """The error object of a turn with no answer: :func:`run_error` of its record, or of the error
    the service refused it with; a crash is a 500 with the shared sentence (:data:`CRASHED`)."""
    if outcome.record is not None:
        return run_error(outcome.record)
    if outcome.moment == "refused" and isinstance(outcome.error, Exception):
        return run_error(RunRecord(request="", status="error", error=outcome.sentence, failure=outcome.error))
    return ApiError(500, outcome.sentence or CRASHED, "internal_error")


class CompletionView:
    """The HTTP API's :class:`adapters.turn.TurnView`: progress as ``reasoning_content`` lines or a
    preamble (``[server] progress``), the answer's deltas through the stream guard, then the file
    links and the notice; streamed, each becomes a chunk (``emit``), else it is gathered.

    Args:
        request, caller, run: the HTTP request, its caller and the turn's :class:`Run`.
        mode: ``[server] progress``.
        emit: takes each Server-Sent Events ``data:`` line (``None``: a whole answer).
        completion: builds the chunks (a stream).
        include_usage, prompt: end a stream with a usage chunk counted from ``prompt``.

    Attributes:
        content, reasoning: what was gathered (a whole answer: everything but the file links).
        said: the notice of an answer that lacks something, else ``None``.
        outcome: how the turn ended, once it did.
    """

    def __init__(self, request: Request, caller: Caller, run: Run, mode: str, emit: Callable[[str], None] | None = None,
                 completion: Completion | None = None, include_usage: bool = False, prompt: str = "") -> None:
        self.request, self.caller, self.run, self.mode, self.emit = request, caller, run, mode, emit
        self.completion = completion or Completion("")
        self.include_usage, self.prompt = include_usage, prompt
        self.guard = answer_guard(request)  # only our own file links stay images
        self.content, self.sent = "", ""
        self.reasoning: list[str] = []
        self.said: str | None = None
        self.outcome: Outcome | None = None

    def _say(self, delta: dict[str, Any]) -> None:
        if self.emit is not None:
            self.sent += delta.get("content", "")
            self.emit(_data(self.completion.chunk(delta)))

    async def progress(self, progress: Progress, event: Event) -> None:
        """An answer delta, the preamble or a reasoning line."""
        if isinstance(event, ResponseDelta):
            self.content += event.text
            if self.emit is not None and (text := self.guard.feed(event.text)):
                self._say({"content": text})
        elif isinstance(event, PlanReady) and self.mode == "preamble":
            text = preamble(event)
            self.content = text + self.content
            if text:
                self._say({"content": text})
        elif self.mode == "reasoning" and (line := progress_line(event)) is not None:
            self.reasoning.append(line)
            self._say({"reasoning_content": line + "\n"})

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        """Nothing more: the deltas carried it (a whole answer takes the record's)."""

    def links(self, record: RunRecord) -> str:
        """Markdown links to the run's generated files."""
        return file_links(record.files, lambda f: file_url(self.request, self.caller, self.run.conversation_id or "", f))

    async def files(self, record: RunRecord) -> None:
        """The end of the guarded answer and the file links (streamed)."""
        if self.emit is not None and (text := self.guard.end() + self.links(record)):
            self._say({"content": text})

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """A last paragraph saying what the answer lacks."""
        self.said = sentence
        self._say({"content": notice_paragraph(sentence)})

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """Streamed: the finish chunk (an error object for a turn with no answer) and ``[DONE]``."""
        self.outcome = outcome
        if self.emit is None or outcome.moment == "restarted":
            return
        if not outcome.answered:
            self.emit(_data(turn_error(outcome).body()))
        else:
            self.emit(_data(self.completion.chunk({}, finish_reason="stop")))
            if self.include_usage:
                self.emit(_data(self.completion.chunk(usage_=usage(self.prompt, self.sent), choices=False)))
        self.emit("data: [DONE]\n\n")



def notice_paragraph(sentence: str) -> str:
    """The notice as the answer's last Markdown paragraph."""
    return f"\n\n> ⚠️ {sentence}"


async def start_run(request: Request, caller: Caller, messages: list[Any], conversation: tuple[str, Any] | None,
                    user: str | None, *, wait: bool = True) -> Run:
    """Parse the messages, check the files, reserve a run slot and start the turn (``wait``: until
    the service accepted it, see :meth:`Run.started`).

    Raises:
        ApiError: 400 for a malformed part, a refused URL, an unusable file or a request the
            service refuses; 429 over the caller's limits; 503 when storage fails.
    """
    st = state_of(request)
    s = st.settings
    await st.keys.count_request(caller)
    turn = await parse_messages(messages, allowed_hosts=s.server.allowed_url_hosts, max_file_bytes=s.storage.max_file_bytes,
                                url_timeout=s.server.url_timeout, budget_tokens=s.storage.context_tokens)
    if not turn.text.strip() and not turn.files:
        raise ApiError(400, "The last user message is empty: write a request (and attach files if it needs them).",
                       "invalid_request", "messages")
    files, release = await _checked_and_reserved(st, caller, turn.files)
    who = Requester("http", user) if user is not None else None
    message = Message(turn.text, files, who=who, key=conversation[1] if conversation else None, chat_log=turn.chat_log)
    run = Run(st.service, message, on_end=release)
    if not wait:
        return run
    try:
        await run.started()
    except BaseException:
        await run.cancel()
        raise
    return run


async def _checked_and_reserved(st: Any, caller: Caller, incoming: list[Any]) -> tuple[list[Any], Callable[[], None]]:
    """The request's files checked (``Service.check_files``) while one of the caller's run slots
    is reserved (``Keys.reserve``): each is a hop to a thread that then waits for a busy event
    loop, and the first streamed byte waits for both. A refused file wins over a full slot count;
    a slot reserved for a request that fails or goes away is given back once reserved.

    Raises:
        ApiError: 400 for an unusable file, 429 when the caller's runs are all in flight.
        StorageError: the shared store fails.
    """
    reserving = asyncio.ensure_future(st.keys.reserve(caller))
    try:
        files = await st.service.check_files(incoming)
        return files, await asyncio.shield(reserving)
    except BaseException as e:
        reserving.add_done_callback(_give_back)
        if isinstance(e, InputError):
            raise ApiError(400, e.user_message, "invalid_file", "messages") from None
        raise


def _give_back(reserving: asyncio.Future[Callable[[], None]]) -> None:
    """Give back the slot a reservation took, if it took one (its error, if any, is not the
    request's answer any more)."""
    if not reserving.cancelled() and reserving.exception() is None:
        reserving.result()()


def model_object() -> dict[str, Any]:
    """The OpenAI model object of ``hugginggpt``, the one model a client can choose."""
    return {"id": MODEL_ID, "object": "model", "created": _STARTED, "owned_by": "hugginggpt-bot"}


def unknown_model(model_id: str) -> ApiError:
    """The 404 for a model a client cannot choose (the controller's name included: the controller
    is the server's own, not a model to chat with directly)."""
    return ApiError(404, f"The model '{model_id}' does not exist or you do not have access to it; "
                         f"the one model here is '{MODEL_ID}'.", "model_not_found", "model")


@router.get("/v1/models", summary="List models")
async def list_models(request: Request) -> dict[str, Any]:
    """The models a client can choose: only ``hugginggpt``."""
    await caller_of(request)
    return {"object": "list", "data": [model_object()]}


@router.get("/v1/models/{model_id:path}", summary="Retrieve a model")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    """The model object of ``hugginggpt``; 404 (``model_not_found``) for any other id."""
    await caller_of(request)
    if model_id != MODEL_ID:
        raise unknown_model(model_id)
    return model_object()


@router.post("/v1/chat/completions", summary="Create a chat completion", openapi_extra=schema_of(ChatCompletionRequest))
async def chat_completions(request: Request) -> Response:
    """Run the last user message through HuggingGPT's four stages (see the module docstring)."""
    st = state_of(request)
    caller = await caller_of(request)
    body: ChatCompletionRequest = await read_json(request, ChatCompletionRequest)
    if body.model != MODEL_ID:
        raise unknown_model(body.model)
    name, key = conversation_of(request, caller, body.user)
    # A stream starts as soon as the request and its files passed their checks (its first byte
    # must not wait for the conversation store); a refusal after that ends the stream with an
    # error object. A whole answer waits until the service accepted the request (a 400 then).
    run = await start_run(request, caller, body.messages, (name, key), body.user, wait=not body.stream)
    headers = {CONVERSATION_HEADER: name}
    completion = Completion(uuid.uuid4().hex[:24])
    prompt = "\n".join(text_of(m.content) for m in body.messages)
    mode = st.settings.server.progress

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_sse(request, caller, run, completion, mode, include_usage, prompt),
                                 media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache",
                                                                           "X-Accel-Buffering": "no"})
    answer = await whole_answer(request, caller, run, mode)
    if answer is None:
        return Response(status_code=499)
    content, reasoning = answer
    doc = completion.whole(content, "\n".join(reasoning) or None, usage(prompt, content))
    return JSONResponse(doc, headers=headers)


async def whole_answer(request: Request, caller: Caller, run: Run, mode: str) -> tuple[str, list[str]] | None:
    """A reply that is not streamed: the answer's text (with its file links and what was said
    about the request) and the progress lines, once the run ended; ``None`` when the client went
    away first (the run is cancelled).

    Raises:
        ApiError: the turn ended without an answer (:func:`turn_error`).
    """
    if not await run.wait_or_disconnect(request.receive):
        log.info("client went away; run %s/%d cancelled", run.conversation_id, run.turn)
        return None
    view = CompletionView(request, caller, run, mode)
    outcome = await run.follow(view)
    record = outcome.record
    if record is None or not record.answered:
        raise turn_error(outcome)
    content = safe_answer(request, (record.response or view.content) if mode != "preamble" else view.content)
    return content + view.links(record) + (notice_paragraph(view.said) if view.said else ""), view.reasoning


def _data(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def _sse(request: Request, caller: Caller, run: Run, completion: Completion, mode: str, include_usage: bool,
               prompt: str) -> AsyncIterator[str]:
    """The stream: the role chunk at once, then the turn's chunks as :class:`CompletionView` emits
    them (:func:`adapters.turn.follow`); a refusal before the first event is an error object."""
    try:
        yield _data(completion.chunk({"role": "assistant", "content": ""}))
        try:
            await run.started()
        except ApiError as refused:
            yield _data(refused.body())
            yield "data: [DONE]\n\n"
            return
        async for chunk in run.streamed(lambda emit: CompletionView(request, caller, run, mode, emit=emit,
                                                                   completion=completion,
                                                                   include_usage=include_usage, prompt=prompt)):
            yield chunk  # type: ignore[misc]
    finally:
        if not run.done:
            log.info("client went away; run %s/%d cancelled", run.conversation_id, run.turn)
            await run.cancel()
