"""Replays recorded Hugging Face traffic (VCR cassettes, ``tests/fixtures/cassettes/``) on 127.0.0.1.

The cassettes were recorded by ``huggingface_hub``'s own test suite against the real Inference API
(``router.huggingface.co/hf-inference``), one provider (``fal-ai``) and the Hub
(``huggingface.co/api/models/...``); see ``tests/fixtures/cassettes/README.md``.

Every request is answered with the first not yet used recorded interaction of the same method and
path (host and query ignored; once all are used, the last one again), with the recorded status,
headers (content type, ``Location`` of a redirect, ...) and body bytes exactly as recorded. Headers
about the transfer itself (``Content-Length``, ``Transfer-Encoding``, ``Content-Encoding``,
``Connection``) are left to the server. A request no cassette recorded gets 404 with
``X-Error-Code: RepoNotFound``, so a test sees it fail rather than pass on something invented.

Every request received is kept in :attr:`CassetteServer.received` (method, path, query, headers,
body bytes) so tests can compare what the product sent with what the recording sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from aiohttp import web
from multidict import CIMultiDict

CASSETTES = Path(__file__).resolve().parents[1] / "fixtures" / "cassettes"

_HOP = {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive"}


@dataclass(frozen=True)
class Interaction:
    """One recorded request and its answer.

    Attributes:
        method: ``"GET"``, ``"POST"``.
        url: the recorded URL (with host and query).
        path: its path.
        request_body: the body the recording's client sent (bytes; ``b""`` if none).
        status: the recorded HTTP status.
        headers: recorded answer headers (name, value) pairs, transfer headers removed.
        body: the recorded answer body bytes.
    """

    method: str
    url: str
    path: str
    request_body: bytes
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def content_type(self) -> str:
        """The recorded ``Content-Type`` of the answer (``""`` if none)."""
        return next((v for k, v in self.headers if k.lower() == "content-type"), "")

    def json(self) -> Any:
        """The answer body parsed as JSON."""
        return json.loads(self.body)

    def request_json(self) -> Any:
        """The recorded request body parsed as JSON."""
        return json.loads(self.request_body)


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def load(name: str) -> list[Interaction]:
    """The interactions of cassette ``name`` (file name with or without ``.yaml``), in order."""
    path = CASSETTES / (name if name.endswith(".yaml") else name + ".yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for item in data["interactions"]:
        rq, rs = item["request"], item["response"]
        headers = tuple(
            (k, str(v)) for k, values in rs["headers"].items() if k.lower() not in _HOP
            for v in (values if isinstance(values, list) else [values])
        )
        body = rs["body"]["string"] if isinstance(rs["body"], dict) else rs["body"]
        out.append(
            Interaction(
                method=rq["method"].upper(), url=rq["uri"], path=urlsplit(rq["uri"]).path,
                request_body=_bytes(rq.get("body")), status=int(rs["status"]["code"]), headers=headers, body=_bytes(body),
            )
        )
    return out


def find(interactions: list[Interaction], method: str, path_part: str) -> Interaction:
    """The first interaction of ``method`` whose path contains ``path_part``."""
    return next(i for i in interactions if i.method == method and path_part in i.path)


@dataclass
class Received:
    """A request the server got."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class CassetteServer:
    """Serves the interactions of some cassettes. ``async with CassetteServer(names) as s: s.url``.

    Args:
        names: cassette file names (see :func:`load`); their interactions are served together.
    """

    def __init__(self, names: list[str]) -> None:
        self.interactions = [i for n in names for i in load(n)]
        self.received: list[Received] = []
        self._used: set[int] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> "CassetteServer":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def posts(self) -> list[Received]:
        """The POST requests received, in order."""
        return [r for r in self.received if r.method == "POST"]

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path = request.path
        matches = [n for n, i in enumerate(self.interactions) if i.method == request.method and i.path == path]
        fresh = [n for n in matches if n not in self._used]
        query = {k: request.query.getall(k) for k in request.query}
        if not matches:
            self.received.append(Received(request.method, request.path, query, dict(request.headers), body, 404))
            return web.json_response(
                {"error": f"no recorded interaction for {request.method} {request.path}"}, status=404,
                headers={"X-Error-Code": "RepoNotFound"},
            )
        n = fresh[0] if fresh else matches[-1]
        self._used.add(n)
        it = self.interactions[n]
        self.received.append(Received(request.method, request.path, query, dict(request.headers), body, it.status))
        return web.Response(status=it.status, body=it.body, headers=CIMultiDict(it.headers))
