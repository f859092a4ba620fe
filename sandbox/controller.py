"""An OpenAI-compatible stand-in server that plays the controller LLM (sandbox and tests).

It speaks the Chat Completions wire format (https://platform.openai.com/docs/api-reference/chat)
closely enough for the real ``openai`` SDK: ``POST /v1/chat/completions`` (JSON
``chat.completion`` or SSE ``chat.completion.chunk`` lines ending with ``data: [DONE]``) and
``GET /v1/models``; and the Responses API (https://platform.openai.com/docs/api-reference/responses):
``POST /v1/responses`` with ``input`` a string or message items (``input_text`` parts),
``instructions``, ``text.format`` (``json_schema`` / ``json_object``), answered with a ``response``
object, or with ``stream: true`` the semantic events (``event: response.created`` …
``response.output_text.delta`` … ``response.completed``, no ``[DONE]``); see
:mod:`sandbox.responses_api`. Answers come from the deterministic rules in :mod:`sandbox.heuristics`,
chosen by :mod:`sandbox.routing`.

Routing (set by :func:`pipeline.llm.stage_headers`): every request carries the HTTP header
``X-HuggingGPT-Stage: NAME`` with NAME one of :data:`STAGES`, and a ``controller-task`` request also
``X-HuggingGPT-Task: <pipeline tag>`` (one of :data:`CONTROLLER_TASKS`). The last (user) message
carries tagged blocks ``<tag>...</tag>``. A request with a missing or unknown header, or without
the blocks its stage needs, gets HTTP 400 with an OpenAI error body saying why, so a pipeline bug is
visible instead of silently answered. The prompt text itself is never used for routing.

Example::

    async with ControllerStandIn() as ctl:
        client = openai.AsyncOpenAI(base_url=ctl.base_url, api_key="sandbox")
        ...
        assert [r.stage for r in ctl.requests] == ["task-planning", "response-generation"]
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pipeline.llm import TASK_HEADER

from .routing import CONTROLLER_TASKS, STAGES, ProtocolError, answer_for, content_text, header, stage_of, tag

__all__ = [
    "CONTROLLER_TASKS", "STAGES", "ControllerStandIn", "ProtocolError", "Recorded", "answer_for", "stage_of", "tag",
]

log = logging.getLogger(__name__)


@dataclass
class Recorded:
    """One request the stand-in received.

    Attributes:
        stage: the ``X-HuggingGPT-Stage`` header of the request as sent (even an unknown name),
            or ``None`` when it had none.
        body: the JSON body as sent by the client.
        start: ``time.monotonic()`` when the request arrived, seconds.
        end: ``time.monotonic()`` when the answer (or error) was fully sent, seconds; ``None``
            while still running or when the connection was dropped before the end.
        task: the ``X-HuggingGPT-Task`` header as sent, or ``None`` when it had none.
        api: ``"chat"`` (``/v1/chat/completions``) or ``"responses"`` (``/v1/responses``).
    """

    stage: str | None
    body: dict[str, Any]
    start: float
    end: float | None = None
    task: str | None = None
    api: str = "chat"


def _error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


def _tokens(s: str) -> int:
    """A rough token count (about four characters per token), never zero for non-empty text."""
    return (len(s) + 3) // 4


def _chunks(content: str, pieces: int = 4) -> list[str]:
    """Split ``content`` into up to ``pieces`` chunks on word boundaries (several deltas to stream)."""
    if not content:
        return [""]
    words = re.findall(r"\S+\s*|\s+", content)
    size = max(1, -(-len(words) // pieces))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


class ControllerStandIn:
    """An OpenAI-compatible chat completions server on 127.0.0.1 that plays the controller.

    Args:
        script: actions consumed one per chat completions request, before the normal behaviour:
            ``{"status": 401|429|500|503|..., "message": str, "retry_after"?: seconds}`` (an
            OpenAI error body; ``retry_after`` becomes the ``retry-after`` header),
            ``{"content": str}`` (returned verbatim, streaming or not), ``{"delay": seconds}``
            (sleep, then answer normally), ``{"drop": True}`` (close the connection without an
            answer), ``{"truncate": True}`` (the normal content cut in half, ``finish_reason``
            ``"length"``). The list is consumed in place (``script`` shows what is left).
        latency: seconds added to every chat completions request (default 0).
        accept_json_schema: when ``False``, a request with ``response_format.type ==
            "json_schema"`` gets HTTP 400 (as llama.cpp and older vLLM do).
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` get HTTP 401.
        model: the model id listed by ``GET /v1/models`` (the answer echoes the request's model).

    Attributes:
        requests: every chat completions request received, in arrival order (:class:`Recorded`).
        base_url: ``http://127.0.0.1:PORT/v1`` once started (the SDK's ``base_url``).
    """

    def __init__(
        self,
        *,
        script: list[dict[str, Any]] | None = None,
        latency: float = 0.0,
        accept_json_schema: bool = True,
        api_key: str | None = None,
        model: str = "sandbox-controller",
    ) -> None:
        self.script: list[dict[str, Any]] = script if script is not None else []
        self.latency = latency
        self.accept_json_schema = accept_json_schema
        self.api_key = api_key
        self.model = model
        self.requests: list[Recorded] = []
        self.base_url: str | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        """Listen on 127.0.0.1 (a free port) and return the base URL ``http://127.0.0.1:PORT/v1``."""
        if self.base_url:
            return self.base_url
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def close(self) -> None:
        """Stop listening and close open connections. Safe to call twice."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.base_url = None

    async def __aenter__(self) -> "ControllerStandIn":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def calls(self, stage: str | None = None) -> list[Recorded]:
        """Recorded requests, all or only those of ``stage``."""
        return [r for r in self.requests if stage is None or r.stage == stage]

    # -- handlers --------------------------------------------------------------------------
    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _error(self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> web.Response:
        return web.json_response(
            _error_body(message, _ERROR_TYPES.get(status, "api_error"), code), status=status, headers=headers
        )

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Incorrect API key provided.", "invalid_api_key")
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "sandbox"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "responses")

    async def _handle(self, request: web.Request, api: str) -> web.StreamResponse:
        start = time.monotonic()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self.requests.append(
                Recorded(stage_of(request.headers), {}, start, time.monotonic(), header(request.headers, TASK_HEADER))
            )
            return self._error(400, "The request body is not a JSON object.")
        rec = Recorded(stage_of(request.headers), body, start, task=header(request.headers, TASK_HEADER), api=api)
        self.requests.append(rec)
        try:
            response = await self._respond(request, body if api == "chat" else as_chat(body), api)
        except ConnectionResetError:
            return web.Response(status=499)
        if response is not None and rec.end is None and not isinstance(response, _Dropped):
            rec.end = time.monotonic()
        return response

    async def _respond(self, request: web.Request, body: dict[str, Any], api: str = "chat") -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        if not self._authorized(request):
            return self._error(401, "Incorrect API key provided.", "invalid_api_key")
        action = self.script.pop(0) if self.script else {}
        if "delay" in action:
            await asyncio.sleep(float(action["delay"]))
        if "status" in action:
            status = int(action["status"])
            headers = {"retry-after": str(action["retry_after"])} if "retry_after" in action else None
            return self._error(status, str(action.get("message") or f"scripted error {status}"), None, headers)
        if action.get("drop"):
            return await self._drop(request)

        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and not self.accept_json_schema:
            return self._error(
                400,
                "response_format type 'json_schema' is not supported by this server; use 'json_object' or none.",
                "unsupported_response_format",
            )
        if isinstance(fmt, dict) and fmt.get("type") not in (None, "text", "json_object", "json_schema"):
            return self._error(400, f"Unknown response_format type {fmt.get('type')!r}.")

        finish = "stop"
        if "content" in action:
            content = str(action["content"])
        else:
            try:
                _, content = answer_for(body, request.headers)
            except ProtocolError as exc:
                log.warning("sandbox controller refused a request: %s", exc)
                return self._error(400, f"[sandbox] bad request: {exc}", "sandbox_protocol")
            if action.get("truncate"):
                content = content[: len(content) // 2]
                finish = "length"
        if api == "responses":
            reply = Reply(str(body.get("model") or self.model), content, finish == "length", self._usage(body, content))
            return await (reply.stream(request) if body.get("stream") else reply.whole())
        if body.get("stream"):
            return await self._stream(request, body, content, finish)
        return web.json_response(self._completion(body, content, finish))

    async def _drop(self, request: web.Request) -> web.StreamResponse:
        """Close the connection without writing a status line (the client sees a broken connection)."""
        transport = request.transport
        if transport is not None:
            transport.abort()
        return _Dropped()

    def _usage(self, body: dict[str, Any], content: str) -> dict[str, int]:
        prompt = sum(_tokens(content_text(m)) for m in body.get("messages", []) if isinstance(m, dict))
        completion = _tokens(content)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion(self, body: dict[str, Any], content: str, finish: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-sandbox-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": self._usage(body, content),
            "system_fingerprint": "sandbox",
        }

    async def _stream(self, request: web.Request, body: dict[str, Any], content: str, finish: str) -> web.StreamResponse:
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        cid = f"chatcmpl-sandbox-{uuid.uuid4().hex[:12]}"
        created = int(time.time())
        model = str(body.get("model") or self.model)
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))

        def chunk(delta: dict[str, Any], finish_reason: str | None = None, choices: bool = True) -> bytes:
            data: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "sandbox",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
                if choices
                else [],
            }
            if include_usage:
                data["usage"] = None
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

        await resp.write(chunk({"role": "assistant", "content": ""}))
        for piece in _chunks(content):
            await resp.write(chunk({"content": piece}))
            await asyncio.sleep(0)
        await resp.write(chunk({}, finish))
        if include_usage:
            final = json.loads(chunk({}, choices=False)[6:])
            final["usage"] = self._usage(body, content)
            await resp.write(f"data: {json.dumps(final)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request body as the chat completions body it asks the same as:
    ``instructions`` → a system message, ``input`` (a string, or message items whose content is a
    string or ``input_text`` / ``output_text`` / ``input_image`` parts) → ``messages``,
    ``text.format`` → ``response_format``; ``model`` and ``stream`` kept."""
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items if isinstance(items, list) else []
    messages = [{"role": "system", "content": body["instructions"]}] if isinstance(body.get("instructions"), str) else []
    for item in items:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": p.get("text", "")} if p.get("type") in ("input_text", "output_text")
                       else {"type": "image_url", "image_url": {"url": p.get("image_url")}}
                       for p in content if isinstance(p, dict)]
        messages.append({"role": item.get("role"), "content": content})
    out = {"model": body.get("model"), "messages": messages, "stream": bool(body.get("stream"))}
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict):
        out["response_format"] = fmt
    return out


@dataclass
class Reply:
    """One answer in the Responses API's shapes (the ``response`` object and its stream events).

    Attributes:
        model: the request's model; content: the answer's text; cut: it was cut short
            (``status: "incomplete"``); usage: chat-style token counts.
    """

    model: str
    content: str
    cut: bool
    usage: dict[str, int]

    def __post_init__(self) -> None:
        self.id, self.item = f"resp_sandbox{uuid.uuid4().hex[:16]}", f"msg_sandbox{uuid.uuid4().hex[:16]}"
        self.created = int(time.time())

    def part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def message(self, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.item, "type": "message", "status": status, "role": "assistant", "content": parts}

    def response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``response`` object (OpenAI's fields; ``usage`` once done)."""
        done = status != "in_progress"
        usage = {"input_tokens": self.usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": self.usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": self.usage["total_tokens"]}
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "background": False, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": None, "max_output_tokens": None, "metadata": {}, "model": self.model, "output": output,
                "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
                "store": False, "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
                "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage if done else None, "user": None}

    async def whole(self) -> web.Response:
        status = "incomplete" if self.cut else "completed"
        return web.json_response(self.response(status, [self.message(status, [self.part(self.content)])]))

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """The semantic events, as ``event: <type>`` / ``data: <json>`` pairs."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        seq = 0

        async def send(kind: str, **fields: Any) -> None:
            nonlocal seq
            data = {"type": kind, "sequence_number": seq, **fields}
            seq += 1
            await resp.write(f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode())

        at = {"item_id": self.item, "output_index": 0, "content_index": 0}
        await send("response.created", response=self.response("in_progress", []))
        await send("response.in_progress", response=self.response("in_progress", []))
        await send("response.output_item.added", output_index=0, item=self.message("in_progress", []))
        await send("response.content_part.added", **at, part=self.part(""))
        for piece in _chunks(self.content):
            await send("response.output_text.delta", **at, delta=piece, logprobs=[])
            await asyncio.sleep(0)
        status = "incomplete" if self.cut else "completed"
        await send("response.output_text.done", **at, text=self.content, logprobs=[])
        await send("response.content_part.done", **at, part=self.part(self.content))
        item = self.message(status, [self.part(self.content)])
        await send("response.output_item.done", output_index=0, item=item)
        await send(f"response.{status}", response=self.response(status, [item]))
        await resp.write_eof()
        return resp


class _Dropped(web.StreamResponse):
    """Marker response for a dropped connection: nothing is written."""

    async def prepare(self, request: web.BaseRequest):  # type: ignore[override]
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None
