"""A chat completions server that misbehaves on purpose, for the fault tests.

It speaks the OpenAI chat completions wire format (JSON, or server-sent events with
``stream: true``) on 127.0.0.1 and runs in a thread of its own, so a test can start a real
``hugginggpt`` process against it with ``subprocess.run``. Every request is recorded
(:attr:`FaultyController.requests`), so tests can check what the product sent.

Faults (attributes, set before or between runs):
    plan: the JSON plan answered to ``task-planning`` calls (a ``str``).
    plans: request text (a substring of the last message) to the JSON plans answered to its
        ``task-planning`` calls in turn (the last one repeats); other requests get ``plan``.
    replans: the JSON plans answered to ``task-replanning`` calls in turn (the last one repeats).
    replan_delay: seconds a ``task-replanning`` call waits before answering.
    answer: the text answered to ``response-generation`` calls (streamed in ``chunks`` pieces).
    trickle: seconds between streamed pieces (and before a non-streamed body).
    plan_trickle: seconds between the streamed pieces of a plan (``None``: ``trickle``).
    status: an HTTP status answered to every call instead (with ``retry_after`` seconds if set).
    fail_first: answer the first N calls with HTTP 500 (to count retries).
    html: answer every call with an HTML page (HTTP 200, ``text/html``).
    huge: bytes of a body streamed in reply to every call (never buffered here).
    expert_delay: seconds every ``/models/...`` inference call sleeps before answering 404.
    expert_huge: bytes of a PNG-labelled body every ``/models/...`` call streams instead.
    no_stream: answer every ``stream: true`` call with HTTP 400 (a server without streaming).
    expert_garbage: answer every ``/models/...`` call with HTTP 200 and a body that is not JSON.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web

from . import serve_loopback


class FaultyController:
    def __init__(self) -> None:
        self.plan = '{"tasks": []}'
        self.plans: dict[str, list[str]] = {}
        self._asked: dict[str, int] = {}
        self.answer = "Here is the answer."
        self.replans: list[str] = ['{"tasks": []}']
        self.replan_delay = 0.0
        self.chunks = 1
        self.trickle = 0.0
        self.plan_trickle: float | None = None
        self.status: int | None = None
        self.retry_after: float | None = None
        self.fail_first = 0
        self.html = False
        self.huge = 0
        self.expert_delay = 0.0
        self.expert_huge = 0
        self.expert_garbage = False
        self.no_stream = False
        self.stream_error: tuple[str, int] | None = None  # (stage, chunks sent before an {"error": ...} event)
        self.stream_usage = False  # end streams with a usage chunk, as servers do for include_usage
        self.requests: list[dict[str, Any]] = []
        self.url = ""
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------------------------------
    def start(self) -> "FaultyController":
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            app = web.Application(client_max_size=64 << 20)
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_route("*", "/models/{model:.*}", self._expert)
            self._runner, self.port = self._loop.run_until_complete(serve_loopback(app, shutdown_timeout=0.5))
            self.url = f"http://127.0.0.1:{self.port}/v1"
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def start_experts(self, latency: dict[str, float] | None = None) -> str:
        """Start the sandbox's inference stand-in (every catalog model served) in this server's
        thread; returns its base URL."""
        from sandbox import Sandbox

        sandbox = Sandbox(latency=latency)
        self._experts = sandbox.inference
        fut = asyncio.run_coroutine_threadsafe(sandbox.inference.start(), self._loop)  # type: ignore[arg-type]
        return fut.result(10)

    def close(self) -> None:
        if self._loop is None:
            return
        if getattr(self, "_experts", None) is not None:
            asyncio.run_coroutine_threadsafe(self._experts.close(), self._loop).result(10)
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        fut.result(10)

        async def cancel_the_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_the_rest(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)  # type: ignore[union-attr]

    def stages(self) -> list[str]:
        return [r["stage"] for r in self.requests]

    # ------------------------------------------------------------------------------------------
    async def _expert(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(self.expert_delay)
        if self.expert_garbage:
            return web.Response(body=b"\x00\x01 this is not JSON {{{", content_type="application/json")
        if self.expert_huge:
            return await self._huge(request, self.expert_huge, "image/png")
        return web.json_response({"error": "Model does not exist"}, status=404)

    async def _huge(self, request: web.Request, size: int, content_type: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        await resp.prepare(request)
        block = b"\x89PNG\r\n\x1a\n" + b" " * ((1 << 20) - 8)
        sent = 0
        try:
            while sent < size:
                await resp.write(block)
                sent += len(block)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        stage = request.headers.get("X-HuggingGPT-Stage", "")
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append({"stage": stage, "body": body, "at": time.monotonic(), "peer": peer})
        n = len(self.requests)
        if self.fail_first and n <= self.fail_first:
            return web.json_response({"error": {"message": "try again"}}, status=500)
        if self.status is not None:
            headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
            return web.json_response({"error": {"message": "slow down"}}, status=self.status, headers=headers)
        if self.html:
            return web.Response(text="<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
        if self.huge:
            return await self._huge(request, self.huge, "application/json")
        if self.no_stream and body.get("stream"):
            return web.json_response({"error": {"message": "stream is not supported", "type": "invalid_request_error"}}, status=400)
        if stage == "task-planning":
            text = self._plan_for(str(body["messages"][-1].get("content", "")))
        elif stage == "task-replanning":
            await asyncio.sleep(self.replan_delay)
            asked = sum(1 for r in self.requests if r["stage"] == stage)
            text = self.replans[min(asked, len(self.replans)) - 1]
        elif stage == "model-selection":
            text = json.dumps({"id": "", "reason": "first candidate"})
        elif stage == "controller-task":
            text = "Controller result."
        else:
            text = self.answer
        if body.get("stream"):
            plan = stage == "task-planning" and self.plan_trickle is not None
            return await self._stream(request, text, self.plan_trickle if plan else self.trickle, stage)
        await asyncio.sleep(self.trickle)
        return web.json_response(_completion(text))

    def _plan_for(self, last: str) -> str:
        for key, answers in self.plans.items():
            if key in last:
                n = self._asked[key] = self._asked.get(key, 0) + 1
                return answers[min(n, len(answers)) - 1]
        return self.plan

    async def _stream(self, request: web.Request, text: str, trickle: float, stage: str = "") -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        size = max(1, -(-len(text) // max(1, self.chunks)))
        try:
            for k, i in enumerate(range(0, len(text), size)):
                await asyncio.sleep(trickle)
                if self.stream_error == (stage, k):
                    error = {"error": {"message": "The model is overloaded", "type": "server_error", "code": None}}
                    await resp.write(f"data: {json.dumps(error)}\n\n".encode())
                    return resp
                chunk = {
                    "id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "faulty",
                    "choices": [{"index": 0, "delta": {"content": text[i:i + size]}, "finish_reason": None}],
                }
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.stream_usage:
                usage = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "faulty", "choices": [],
                         "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}
                await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionError, RuntimeError):
            pass
        return resp


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "faulty",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
