"""``POST /v1/responses``: OpenAI's Responses API in front of the same run as
``/v1/chat/completions`` (:mod:`adapters.http.openai_api`): the same front door
(``Service.handle`` with one :class:`bot.incoming.Message`), keys, limits, conversations and
OpenAI error objects.

Wire format: the OpenAI API reference, "Create a model response" and "Streaming events".

* Request: ``input`` is a string (the request) or message items; the last ``user`` item is the
  request, earlier ``user``/``assistant`` pairs the chat log. Content parts: ``input_text``
  (``output_text`` in earlier assistant items) and ``input_image`` with ``image_url`` (a
  ``data:`` URL, or an https URL from ``[server] allowed_url_hosts``, as ``image_url`` parts of
  a chat request). ``instructions`` and ``system``/``developer`` items are ignored (the
  controller's prompts are this server's own).
* Answer: a ``response`` object whose ``output`` is a ``reasoning`` item (the progress lines of
  ``[server] progress = "reasoning"``, as ``summary_text``) and one assistant ``message`` with one
  ``output_text`` part. Generated files are what the chat endpoint gives: links to
  ``/v1/files/{id}`` after the answer in that text (images as Markdown images), so any client
  shows them.
* ``stream: true``: Server-Sent Events ``event: <type>`` / ``data: <json>`` with a
  ``sequence_number``: ``response.created``, ``response.in_progress``, the reasoning item's
  ``response.output_item.added`` / ``response.reasoning_summary_text.delta`` … ``.done``, the
  message's ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` …, ``response.output_text.done``, ``response.content_part.done``,
  ``response.output_item.done``, then ``response.completed``. A run that fails, or a request the
  service refuses after the stream began, ends with ``response.failed`` whose ``response.error``
  is ``{"code", "message"}`` (the one sentence). Progress after the answer began is not streamed
  (output items follow one another).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from adapters.progress import Progress
from adapters.turn import Outcome

from .auth import Caller
from .common import CONVERSATION_HEADER, caller_of, conversation_of, read_json, state_of
from .content import text_of
from .errors import ApiError
from .models import ContentPart, ImageURL, InputItem, Message, ResponsesRequest, schema_of
from .openai_api import CompletionView, start_run, turn_error, unknown_model, whole_answer
from .render import MODEL_ID, usage
from .runs import Run

log = logging.getLogger("adapters.http")
router = APIRouter()


def chat_messages(body: ResponsesRequest) -> list[Message]:
    """``body.input`` as the chat messages :func:`adapters.http.openai_api.start_run` reads.

    Raises:
        ApiError: 400 for an item that is not a message, a part of another type, or an
            ``input_image`` without ``image_url``.
    """
    if isinstance(body.input, str):
        return [Message(role="user", content=body.input)]
    return [_message(item, i) for i, item in enumerate(body.input)]


def _message(item: InputItem, i: int) -> Message:
    if item.type != "message" or item.role is None:
        raise ApiError(400, f"The input item type {item.type!r} is not supported; send message items with a role.",
                       "invalid_input_item", f"input[{i}].type")
    if item.content is None or isinstance(item.content, str):
        return Message(role=item.role, content=item.content)
    parts = []
    for j, part in enumerate(item.content):
        param = f"input[{i}].content[{j}]"
        if part.type in ("input_text", "output_text"):
            parts.append(ContentPart(type="text", text=part.text))
        elif part.type == "input_image" and part.image_url:
            parts.append(ContentPart(type="image_url", image_url=ImageURL(url=part.image_url, detail=part.detail)))
        elif part.type == "input_image":
            raise ApiError(400, "An input_image part needs an image_url (a data: URL or an https URL); file_id is "
                                "not supported.", "invalid_content_part", param)
        else:
            raise ApiError(400, f"The content part type {part.type!r} is not supported; use input_text or "
                                "input_image.", "invalid_content_part", param + ".type")
    return Message(role=item.role, content=parts)


class ResponseDoc:
    """Builds the ``response`` object and the stream events of one reply (one ``id``)."""

    def __init__(self) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.seq = 0

    def reasoning(self, lines: list[str], status: str = "completed") -> dict[str, Any]:
        """The ``reasoning`` output item holding the progress lines."""
        return {"id": f"rs_{self.id[5:]}", "type": "reasoning", "status": status,
                "summary": [{"type": "summary_text", "text": "".join(lines)}] if lines else []}

    def message(self, text: str | None, status: str = "completed") -> dict[str, Any]:
        """The assistant ``message`` output item (no part yet when ``text`` is ``None``)."""
        parts = [] if text is None else [self.part(text)]
        return {"id": f"msg_{self.id[5:]}", "type": "message", "status": status, "role": "assistant", "content": parts}

    @staticmethod
    def part(text: str) -> dict[str, Any]:
        """An ``output_text`` content part."""
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def response(self, status: str, output: list[dict[str, Any]], usage_: dict[str, int] | None = None,
                 error: ApiError | None = None) -> dict[str, Any]:
        """The ``response`` object (``usage`` in the Responses API's names, from chat-style counts)."""
        counted = None if usage_ is None else {
            "input_tokens": usage_["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage_["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage_["total_tokens"]}
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None if error is None else {"code": error.code or "server_error", "message": error.message},
                "incomplete_details": None, "instructions": None, "max_output_tokens": None, "metadata": {},
                "model": MODEL_ID, "output": output, "parallel_tool_calls": False, "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": None,
                "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": None,
                "truncation": "disabled", "usage": counted, "user": None}

    def event(self, kind: str, **fields: Any) -> str:
        """One Server-Sent Event: ``event: kind`` and its JSON ``data`` (numbered)."""
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


class ResponsesView(CompletionView):
    """:class:`adapters.http.openai_api.CompletionView` speaking the Responses API's stream
    events: the reasoning lines as a ``reasoning`` item while the answer has not begun, the answer
    as ``output_text`` deltas of one message item (see the module docstring)."""

    def __init__(self, request: Request, caller: Caller, run: Run, mode: str, emit: Callable[[str], None],
                 doc: ResponseDoc, prompt: str) -> None:
        super().__init__(request, caller, run, mode, emit, prompt=prompt)
        self.doc = doc
        self.items: list[dict[str, Any]] = []
        self.open: str | None = None  # "reasoning" or "message" while that item is open

    def _send(self, kind: str, **fields: Any) -> None:
        if self.emit is not None:
            self.emit(self.doc.event(kind, **fields))

    def _say(self, delta: dict[str, Any]) -> None:
        if "reasoning_content" in delta:
            if self.open == "message" or (self.open is None and self.items):
                return  # output items follow one another: no progress once the answer began
            if self.open is None:
                self.open = "reasoning"
                self._send("response.output_item.added", output_index=0, item=self.doc.reasoning([], "in_progress"))
                self._send("response.reasoning_summary_part.added", item_id=self.doc.reasoning([])["id"],
                           output_index=0, summary_index=0, part={"type": "summary_text", "text": ""})
            self._send("response.reasoning_summary_text.delta", item_id=self.doc.reasoning([])["id"], output_index=0,
                       summary_index=0, delta=delta["reasoning_content"])
            return
        text = delta.get("content", "")
        self._open_message()
        self.sent += text
        if text:
            self._send("response.output_text.delta", **self._at(), delta=text, logprobs=[])

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.doc.message(None)["id"], "output_index": len(self.items), "content_index": 0}

    def _open_message(self) -> None:
        if self.open == "message":
            return
        if self.open == "reasoning":
            self._close_reasoning()
        self.open = "message"
        self._send("response.output_item.added", output_index=len(self.items), item=self.doc.message(None, "in_progress"))
        self._send("response.content_part.added", **self._at(), part=self.doc.part(""))

    def _close_reasoning(self) -> None:
        text = "".join(line + "\n" for line in self.reasoning)
        item = self.doc.reasoning([text])
        at = {"item_id": item["id"], "output_index": 0, "summary_index": 0}
        self._send("response.reasoning_summary_text.done", **at, text=text)
        self._send("response.reasoning_summary_part.done", **at, part={"type": "summary_text", "text": text})
        self._send("response.output_item.done", output_index=0, item=item)
        self.items.append(item)
        self.open = None

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """``response.completed`` with the whole response, or ``response.failed`` with the error."""
        self.outcome = outcome
        if outcome.moment == "restarted":
            return
        if not outcome.answered:
            if self.open == "reasoning":
                self._close_reasoning()
            self._send("response.failed", response=self.doc.response("failed", self.items, error=turn_error(outcome)))
            return
        self._open_message()
        at = self._at()
        item = self.doc.message(self.sent)
        self._send("response.output_text.done", **at, text=self.sent, logprobs=[])
        self._send("response.content_part.done", **at, part=self.doc.part(self.sent))
        self._send("response.output_item.done", output_index=at["output_index"], item=item)
        self.items.append(item)
        self._send("response.completed", response=self.doc.response("completed", self.items,
                                                                      usage(self.prompt, self.sent)))


@router.post("/v1/responses", summary="Create a model response", openapi_extra=schema_of(ResponsesRequest))
async def create_response(request: Request) -> Response:
    """Run the request of ``input`` through HuggingGPT's four stages (see the module docstring)."""
    caller = await caller_of(request)
    body: ResponsesRequest = await read_json(request, ResponsesRequest)
    if body.model != MODEL_ID:
        raise unknown_model(body.model)
    messages = chat_messages(body)
    name, key = conversation_of(request, caller, body.user)
    run = await start_run(request, caller, messages, (name, key), body.user, wait=not body.stream)
    headers = {CONVERSATION_HEADER: name}
    prompt = "\n".join(text_of(m.content) for m in messages)
    mode = state_of(request).settings.server.progress
    doc = ResponseDoc()
    if body.stream:
        return StreamingResponse(_events(request, caller, run, doc, mode, prompt), media_type="text/event-stream",
                                 headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    answer = await whole_answer(request, caller, run, mode)
    if answer is None:
        return Response(status_code=499)
    text, reasoning = answer
    output = ([doc.reasoning([line + "\n" for line in reasoning])] if reasoning else []) + [doc.message(text)]
    return JSONResponse(doc.response("completed", output, usage(prompt, text)), headers=headers)


async def _events(request: Request, caller: Caller, run: Run, doc: ResponseDoc, mode: str,
                  prompt: str) -> AsyncIterator[str]:
    """The stream: ``response.created`` at once, then the events :class:`ResponsesView` emits; a
    refusal before the run began is ``response.failed``."""
    try:
        yield doc.event("response.created", response=doc.response("in_progress", []))
        try:
            await run.started()
        except ApiError as refused:
            yield doc.event("response.failed", response=doc.response("failed", [], error=refused))
            return
        yield doc.event("response.in_progress", response=doc.response("in_progress", []))
        async for event in run.streamed(lambda emit: ResponsesView(request, caller, run, mode, emit, doc, prompt)):
            yield event  # type: ignore[misc]
    finally:
        if not run.done:
            log.info("client went away; run %s/%d cancelled", run.conversation_id, run.turn)
            await run.cancel()
