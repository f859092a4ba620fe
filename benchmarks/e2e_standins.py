"""Stand-in servers for the end-to-end benchmark, in a process of their own:
``python -m benchmarks.e2e_standins`` prints one JSON line ``{"controller": URL, "inference": URL}``.

- The controller (OpenAI chat completions wire format, JSON or server-sent events) answers task
  planning with the plan set by ``POST /_reset`` ``{"plan": [...], "plan_seconds": S,
  "answer_seconds": A}``, written evenly over ``S`` seconds when streamed (after ``S`` seconds
  otherwise), and records when the first plan byte and the end of each task's record were sent
  (for a plan asked without streaming: when they would have been, so that the eager critical path
  is the same yardstick for both).
  Response generation is recorded on arrival and answered after ``A`` seconds.
- The experts are the sandbox's inference stand-in (real outputs) with a fixed latency per task;
  it records each call's start and end.

``GET /_records`` returns ``{"plan_start", "first_byte", "record_end": {id: t}, "plan_end",
"answers": [t...], "experts": [{"model", "task", "start", "end"}]}``; every time is
``time.monotonic()`` seconds, which on Linux is one clock for every process of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from aiohttp import web

from sandbox import Sandbox

CHUNKS = 60
"""Pieces a streamed plan is written in."""


class ControllerStandIn:
    def __init__(self) -> None:
        self.plan: list[dict[str, Any]] = []
        self.plan_seconds = 1.0
        self.answer_seconds = 0.0
        self.reset()

    def reset(self) -> None:
        self.rec: dict[str, Any] = {"plan_start": None, "first_byte": None, "record_end": {}, "plan_end": None, "answers": []}

    def plan_text(self) -> tuple[str, dict[int, int]]:
        """The plan as JSON and, per task id, the offset just after its record."""
        parts = ['{"tasks": [']
        ends: dict[int, int] = {}
        for i, task in enumerate(self.plan):
            if i:
                parts.append(", ")
            parts.append(json.dumps(task))
            ends[task["id"]] = sum(len(p) for p in parts)
        parts.append("]}")
        return "".join(parts), ends

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        stage = request.headers.get("X-HuggingGPT-Stage", "")
        now = time.monotonic()
        if stage == "task-planning":
            self.rec["plan_start"] = self.rec["plan_start"] or now
            text, ends = self.plan_text()
            return await self._write(request, body, text, self.plan_seconds, ends)
        if stage == "response-generation":
            self.rec["answers"].append(now)
            return await self._write(request, body, "All tasks are done.", self.answer_seconds, {})
        if stage == "model-selection":
            return await self._write(request, body, json.dumps({"id": "", "reason": "first"}), 0.0, {})
        return await self._write(request, body, "Controller result.", 0.0, {})

    async def _write(self, request: web.Request, body: dict, text: str, seconds: float, ends: dict[int, int]) -> web.StreamResponse:
        planning = bool(ends) or text.startswith('{"tasks"')
        if not body.get("stream"):
            start = time.monotonic()
            await asyncio.sleep(seconds)
            if planning:  # when each record would have been written, had it been asked as a stream
                self.rec["first_byte"] = self.rec["first_byte"] or start + seconds / CHUNKS
                self.rec["record_end"] = {str(k): start + seconds * end / len(text) for k, end in ends.items()}
                self.rec["plan_end"] = time.monotonic()
            return web.json_response(_completion(text))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = CHUNKS if planning else 1
        size = max(1, -(-len(text) // n))
        start = time.monotonic()
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        sent = 0
        for k, piece in enumerate(pieces):
            target = start + seconds * (k + 1) / len(pieces)
            await asyncio.sleep(max(0.0, target - time.monotonic()))
            chunk = {**_chunk(), "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            sent += len(piece)
            now = time.monotonic()
            if planning:
                self.rec["first_byte"] = self.rec["first_byte"] or now
                for tid, end in ends.items():
                    if end <= sent and str(tid) not in self.rec["record_end"]:
                        self.rec["record_end"][str(tid)] = now
        if planning:
            self.rec["plan_end"] = time.monotonic()
        tail = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
        await resp.write(f"data: {json.dumps({**_chunk(), 'choices': tail})}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):  # OpenAI: one last chunk, no choices
            await resp.write(f"data: {json.dumps({**_chunk(), 'choices': [], 'usage': _USAGE})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


_USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def _chunk() -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "bench"}


def _completion(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": _USAGE}


async def main(latency: dict[str, float]) -> None:
    sandbox = Sandbox(latency=latency)
    inference_url = await sandbox.inference.start()
    controller = ControllerStandIn()

    async def reset(request: web.Request) -> web.Response:
        cfg = await request.json()
        controller.plan = cfg.get("plan", [])
        controller.plan_seconds = float(cfg.get("plan_seconds", 1.0))
        controller.answer_seconds = float(cfg.get("answer_seconds", 0.0))
        controller.reset()
        sandbox.inference.records.clear()
        return web.json_response({"ok": True})

    async def records(request: web.Request) -> web.Response:
        experts = [{"model": r.model, "task": r.task, "start": r.start, "end": r.end} for r in sandbox.inference.records]
        return web.json_response({**controller.rec, "experts": experts})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", controller.chat)
    app.router.add_post("/_reset", reset)
    app.router.add_get("/_records", records)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    print(json.dumps({"controller": f"http://127.0.0.1:{port}/v1", "base": f"http://127.0.0.1:{port}",
                      "inference": inference_url}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", default="{}", help="JSON: task or model -> seconds")
    args = parser.parse_args()
    try:
        asyncio.run(main(json.loads(args.latency)))
    except KeyboardInterrupt:
        sys.exit(0)
