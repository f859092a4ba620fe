"""The OpenAI-compatible routes: ``POST /v1/chat/completions`` (streaming and not), ``GET
/v1/models``, ``GET /v1/models/{id}``; the files routes (:mod:`adapters.http.files`) are part of
this router.

Wire format: the OpenAI API reference (Chat Completions, the chat completion and chunk objects,
Server-Sent Events ``data: {json}\\n\\n`` ending with ``data: [DONE]\\n\\n``, error objects). A
run that fails after the stream began ends with ``data: {"error": {...}}`` (as OpenAI does; the
SDK raises ``APIError`` on it).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from bot.errors import InputError, StorageError
from pipeline.errors import ControllerError, DeadlineError, PlanError
from pipeline.types import Done, PlanReady, ResponseDelta, RunRecord

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


def run_error(record: RunRecord) -> ApiError:
    """The error object of a run that ended without an answer: 504 when its deadline passed, 502
    when the controller failed, 500 for an unusable plan or anything else (the user's sentence)."""
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
    try:
        files = await st.service.check_files(turn.files)
    except InputError as e:
        raise ApiError(400, e.user_message, "invalid_file", "messages") from None
    release = await st.keys.reserve(caller)
    run = Run(st.service, turn.text, files, key=conversation[1] if conversation else None, user=user,
              chat_log=turn.chat_log, on_end=release)
    if not wait:
        return run
    try:
        await run.started()
    except BaseException:
        await run.cancel()
        raise
    return run


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
    if not await run.wait_or_disconnect(request.receive):
        log.info("client went away; run %s/%d cancelled", run.conversation_id, run.turn)
        return Response(status_code=499)
    reasoning: list[str] = []
    answer = ""
    async for event in run.events():
        if isinstance(event, ResponseDelta):
            answer += event.text
        elif isinstance(event, PlanReady) and mode == "preamble":
            answer = preamble(event) + answer
        elif mode == "reasoning" and (line := progress_line(event)) is not None:
            reasoning.append(line)
    record = run.record
    if record is None or not record.answered:
        raise run_error(record or RunRecord(request=""))
    content = safe_answer(request, (record.response or answer) if mode != "preamble" else answer)
    content += file_links(record.files, lambda f: file_url(request, caller, run.conversation_id or "", f))
    doc = completion.whole(content, "\n".join(reasoning) or None, usage(prompt, content))
    return JSONResponse(doc, headers=headers)


def _data(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def _sse(request: Request, caller: Caller, run: Run, completion: Completion, mode: str, include_usage: bool,
               prompt: str) -> AsyncIterator[str]:
    sent = ""
    guard = answer_guard(request)  # only our own file links stay images
    try:
        yield _data(completion.chunk({"role": "assistant", "content": ""}))
        try:
            await run.started()
        except ApiError as refused:
            yield _data(refused.body())
            yield "data: [DONE]\n\n"
            return
        record: RunRecord | None = None
        async for event in run.events():
            if isinstance(event, ResponseDelta):
                if text := guard.feed(event.text):
                    sent += text
                    yield _data(completion.chunk({"content": text}))
            elif isinstance(event, Done):
                record = event.record
            elif isinstance(event, PlanReady) and mode == "preamble":
                if text := preamble(event):
                    sent += text
                    yield _data(completion.chunk({"content": text}))
            elif mode == "reasoning" and (line := progress_line(event)) is not None:
                yield _data(completion.chunk({"reasoning_content": line + "\n"}))
        if record is None or not record.answered:
            yield _data(run_error(record or RunRecord(request="")).body())
            yield "data: [DONE]\n\n"
            return
        links = guard.end() + file_links(record.files, lambda f: file_url(request, caller, run.conversation_id or "", f))
        if links:
            sent += links
            yield _data(completion.chunk({"content": links}))
        yield _data(completion.chunk({}, finish_reason="stop"))
        if include_usage:
            yield _data(completion.chunk(usage_=usage(prompt, sent), choices=False))
        yield "data: [DONE]\n\n"
    except StorageError as e:  # one line, no traceback: the operator knows what a full disk is
        log.warning("stream of run %s/%d: storage failed: %s", run.conversation_id, run.turn, e)
        yield _data(storage_error(e).body())
        yield "data: [DONE]\n\n"
    except Exception as e:  # one line for the operator, one error object for the client
        log.error("stream of run %s/%d failed: %s: %s", run.conversation_id, run.turn, e.__class__.__name__, e, exc_info=e)
        yield _data(ApiError(500, "The server failed while answering; the operator's log has the details.",
                             "internal_error").body())
        yield "data: [DONE]\n\n"
    finally:
        if not run.done:
            log.info("client went away; run %s/%d cancelled", run.conversation_id, run.turn)
            await run.cancel()
