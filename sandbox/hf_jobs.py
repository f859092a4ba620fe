"""A stand-in of the Hugging Face Jobs API on 127.0.0.1, in the format huggingface_hub 2.4's
``HfApi`` sends and parses (``hf_api.py``: ``whoami``, ``list_jobs_hardware``, ``run_job``,
``inspect_job``, ``cancel_job``; ``_jobs_api.py``: ``JobInfo``, ``JobHardwareInfo``), for tests of
``hugginggpt experts launch``::

    GET  /api/whoami-v2                   the token's owner
    GET  /api/jobs/hardware               the flavours, with unitCostUSD per unitLabel (minute)
    POST /api/jobs/{namespace}            a job from a job spec (dockerImage, command, flavor,
                                          secrets, timeoutSeconds, expose {ports, portsPublic})
    GET  /api/jobs/{namespace}/{id}       the job: SCHEDULING on the first look, then RUNNING with
                                          status.exposeUrls, durations counted from then
    POST /api/jobs/{namespace}/{id}/cancel

The "container" of a running job is played by the stand-in itself: each exposed port's URL
serves the expert server's ``GET /models`` (with the ``HUGGINGGPT_EXPERTS_API_KEY`` the job was
given as a secret; 401 otherwise), whose ``idle_seconds`` count from the job's start unless the
stand-in is told the server is ``busy``, and ``GET /readyz``. Given a ``container`` (a function
that starts a real server from the job's secrets), the stand-in starts it when the job begins
running, forwards every request under the exposed URL to it as the Jobs proxy does (502 while it
does not answer), and stops it when the job is cancelled. Every request to the API needs
``Authorization: Bearer TOKEN``. Imports nothing of ``bot/`` or ``adapters/``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from . import serve_loopback

OWNER = {"id": "5e9ecfc04957053f60648a3e", "name": "alice", "type": "user"}
HARDWARE = [
    {"name": "cpu-basic", "prettyName": "CPU Basic", "cpu": "2 vCPU", "ram": "16 GB", "ephemeralStorage": "50 GB",
     "accelerator": None, "unitCostMicroUSD": 167, "unitCostUSD": 0.000167, "unitLabel": "minute"},
    {"name": "a10g-small", "prettyName": "Nvidia A10G - small", "cpu": "4 vCPU", "ram": "15 GB",
     "ephemeralStorage": "110 GB", "accelerator": {"type": "gpu", "model": "A10G", "quantity": "1", "vram": "24 GB",
                                                   "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 16667, "unitCostUSD": 0.016667, "unitLabel": "minute"},
]
"""Two flavours as ``GET /api/jobs/hardware`` lists them."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class Job:
    """One job the stand-in holds."""

    id: str
    spec: dict[str, Any]
    created: str
    looks: int = 0
    started: float | None = None
    stage: str = "SCHEDULING"
    finished: float | None = None
    message: str | None = None

    def running_secs(self) -> int | None:
        if self.started is None:
            return None
        return int((self.finished or time.monotonic()) - self.started)


@dataclass
class JobsApi:
    """The stand-in (see the module docstring).

    Args:
        token: the one token it accepts.
        busy: whether the played expert server says it is never idle.
        fails: whether a job ends in ERROR (out of memory) soon after it starts running.
        ready: whether the played server's ``GET /readyz`` says ready (200; else 503, its cache
            still being scanned).
        container: ``await container(secrets)`` starts a job's server with the job's secrets and
            returns ``(its base URL, an async function that stops it)``; ``None``: the stand-in
            plays the server.

    Attributes:
        jobs: the jobs made, by id; ``cancelled``: the ids cancelled, in order.
    """

    token: str = "hf_standin_jobs_token"
    busy: bool = False
    fails: bool = False
    ready: bool = True
    jobs: dict[str, Job] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    container: Callable[[dict[str, str]], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]] | None = None
    url: str = ""
    _runner: Any = None
    _running: dict[str, tuple[str, Callable[[], Awaitable[None]]]] = field(default_factory=dict)
    _client: Any = None

    async def __aenter__(self) -> "JobsApi":
        app = web.Application()
        app.router.add_get("/api/whoami-v2", self._whoami)
        app.router.add_get("/api/jobs/hardware", self._hardware)
        app.router.add_post("/api/jobs/{ns}", self._run)
        app.router.add_get("/api/jobs/{ns}/{id}", self._inspect)
        app.router.add_post("/api/jobs/{ns}/{id}/cancel", self._cancel)
        app.router.add_route("*", "/proxy/{id}/{port}/{tail:.*}", self._proxy)
        app.middlewares.append(self._auth)
        self._runner, port = await serve_loopback(app)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for job_id in list(self._running):
            await self._stop(job_id)
        if self._client is not None:
            await self._client.close()
        await self._runner.cleanup()

    async def _stop(self, job_id: str) -> None:
        running = self._running.pop(job_id, None)
        if running is not None:
            await running[1]()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/proxy/"):
            return await handler(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"error": "Invalid credentials in Authorization header"}, status=401)
        return await handler(request)

    async def _whoami(self, request: web.Request) -> web.Response:
        return web.json_response({"type": "user", "name": OWNER["name"], "id": OWNER["id"], "orgs": []})

    async def _hardware(self, request: web.Request) -> web.Response:
        return web.json_response(HARDWARE)

    async def _run(self, request: web.Request) -> web.Response:
        spec = await request.json()
        if request.match_info["ns"] != OWNER["name"]:
            return web.json_response({"error": "You are not allowed to run jobs in this namespace"}, status=403)
        if spec.get("flavor") not in {h["name"] for h in HARDWARE} or not spec.get("dockerImage"):
            return web.json_response({"error": "Invalid job spec"}, status=400)
        job = Job(uuid.uuid4().hex[:24], spec, _now())
        self.jobs[job.id] = job
        return web.json_response(self._info(job, request))

    async def _inspect(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["id"])
        if job is None:
            return web.json_response({"error": "Job not found"}, status=404)
        job.looks += 1
        if job.stage == "SCHEDULING" and job.looks > 1:
            job.stage, job.started = "RUNNING", time.monotonic()
            if self.container is not None:
                self._running[job.id] = await self.container(dict(job.spec.get("secrets") or {}))
        elif job.stage == "RUNNING" and self.fails and job.looks > 3:
            job.stage, job.finished, job.message = "ERROR", time.monotonic(), "CUDA out of memory"
        return web.json_response(self._info(job, request))

    async def _cancel(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["id"])
        if job is None:
            return web.json_response({"error": "Job not found"}, status=404)
        if job.stage in ("SCHEDULING", "RUNNING"):
            job.stage, job.finished = "CANCELED", time.monotonic()
            self.cancelled.append(job.id)
            await self._stop(job.id)
        return web.Response(status=200)

    async def _proxy(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["id"])
        tail = request.match_info["tail"]
        if job is None or job.stage != "RUNNING":
            return web.json_response({"error": "no such job running"}, status=502)
        if job.id in self._running:
            return await self._forward(request, self._running[job.id][0], tail)
        if tail == "readyz":
            return web.json_response({"ready": self.ready}, status=200 if self.ready else 503)
        return await self._models(request) if tail == "models" else web.json_response({}, status=404)

    async def _forward(self, request: web.Request, upstream: str, tail: str) -> web.Response:
        """Send the request on to the job's server, as the Jobs proxy does (502 when it does not answer)."""
        import aiohttp

        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
        try:
            async with self._client.request(request.method, f"{upstream}/{tail}", headers=headers,
                                            data=await request.read()) as r:
                body = await r.read()
                return web.Response(status=r.status, body=body, content_type=r.content_type)
        except aiohttp.ClientConnectionError:
            return web.json_response({"error": "the job's server does not answer"}, status=502)

    async def _models(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["id"])
        key = (job.spec.get("secrets") or {}).get("HUGGINGGPT_EXPERTS_API_KEY") if job else None
        if job is None or job.stage != "RUNNING":
            return web.json_response({"error": "no such job running"}, status=502)
        if not key or request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Missing or invalid API key."}, status=401)
        idle = 0.0 if self.busy else time.monotonic() - (job.started or time.monotonic())
        return web.json_response({"models": [], "device": "cuda:0", "idle_seconds": round(idle, 1)})

    def _info(self, job: Job, request: web.Request) -> dict[str, Any]:
        spec = job.spec
        ports = (spec.get("expose") or {}).get("ports") or []
        running = job.stage == "RUNNING"
        status: dict[str, Any] = {"stage": job.stage, "message": job.message}
        if running and ports and not self.fails:
            status["exposeUrls"] = [f"{self.url}/proxy/{job.id}/{p}" for p in ports]
        secs = job.running_secs()
        return {"id": job.id, "createdAt": job.created, "dockerImage": spec["dockerImage"], "spaceId": None,
                "command": spec.get("command"), "arguments": spec.get("arguments", []),
                "environment": spec.get("environment", {}), "secrets": dict.fromkeys(spec.get("secrets") or {}, "***"),
                "flavor": spec["flavor"], "labels": spec.get("labels"), "status": status, "owner": OWNER,
                "expose": spec.get("expose"),
                "durations": {"schedulingSecs": 1 if job.started else None, "runningSecs": secs,
                              "totalSecs": (secs or 0) + 1}}
