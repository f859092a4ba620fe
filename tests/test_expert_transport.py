"""Expert calls go out over aiohttp (issue 35, "a light loop": httpx2's own transport cost about
twice the loop CPU per call): what a caller sees stays what httpx2's transport gave them. Each
test runs the real ``HubRunner`` against an aiohttp stand-in on 127.0.0.1 that records what it got."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx2
import pytest
from aiohttp import web

from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.errors import ExpertError
from pipeline.experts.hub import HubRunner, refused_connection
from pipeline.wire import AiohttpTransport

ANSWER = json.dumps([[{"label": "POSITIVE", "score": 0.9}, {"label": "NEGATIVE", "score": 0.1}]]).encode()


class Recorder:
    """``POST /models/{model}``: ``ok`` answers :data:`ANSWER`; ``big`` streams 4 MB of JSON;
    ``stall`` sends the head and a first piece of body, then nothing. Records each request's
    client port and headers."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.headers: list[list[tuple[str, str]]] = []
        self.url = ""

    async def __aenter__(self) -> "Recorder":
        app = web.Application()
        app.router.add_post(r"/models/{model:.+}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.ports.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        self.headers.append(list(request.headers.items()))
        await request.read()
        model = request.match_info["model"]
        if model == "ok/model":
            return web.Response(body=ANSWER, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b"[" + b" " * 1000)
        if model == "stall/model":
            await asyncio.sleep(3)
        for _ in range(4000):
            await resp.write(b" " * 1000)
        return resp


@pytest.fixture
async def server():
    async with Recorder() as r:
        yield r


def runner(url: str, **kw) -> HubRunner:
    inference = dict(base_url=url, token="hf_transportSECRET", task_timeout=5.0, max_attempts=1, max_json_bytes=1 << 20)
    return HubRunner(pipeline_config(Settings(inference={**inference, **kw})))


async def test_calls_reuse_one_connection_and_send_only_what_httpx_built(server, sink):
    hub = runner(server.url)
    try:
        for i in range(4):
            out = await hub.run("text-classification", "ok/model", {"text": "great"}, sink, task_id=i)
            assert "POSITIVE" in (out.text or "")
    finally:
        await hub.aclose()
    assert len(server.ports) == 4 and len(set(server.ports)) == 1  # one keep-alive connection
    for headers in server.headers:
        names = [k.lower() for k, _ in headers]
        assert len(names) == len(set(names)), headers  # no header twice (aiohttp adds none of its own)
        sent = dict((k.lower(), v) for k, v in headers)
        assert "aiohttp" not in sent["user-agent"] and "hf_hub" in sent["user-agent"]
        assert sent["accept-encoding"] == "gzip, deflate"
        assert sent["authorization"] == "Bearer hf_transportSECRET"


async def test_a_reply_cut_at_its_limit_closes_its_connection(server, sink):
    hub = runner(server.url)
    try:
        with pytest.raises(ExpertError) as ei:
            await hub.run("text-classification", "big/model", {"text": "great"}, sink, task_id=1)
        assert ei.value.reason == "too_large"
        out = await hub.run("text-classification", "ok/model", {"text": "great"}, sink, task_id=2)
    finally:
        await hub.aclose()
    assert "POSITIVE" in (out.text or "")  # the unread rest of the big reply was not taken for this one
    assert server.ports[0] != server.ports[1]


async def test_a_reply_that_stalls_mid_body_is_a_timeout(server, sink):
    hub = runner(server.url, task_timeout=0.5, max_json_bytes=1 << 30)
    try:
        with pytest.raises(ExpertError) as ei:
            await asyncio.wait_for(hub.run("text-classification", "stall/model", {"text": "x"}, sink, task_id=1), 10)
    finally:
        await hub.aclose()
    assert ei.value.reason == "timeout" and ei.value.user_message == "The model stall/model did not answer within 0.5 seconds."


async def test_nothing_listening_is_a_connect_error_and_an_expert_server_is_not_retried(sink):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    async with httpx2.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")
    hub = runner(f"http://127.0.0.1:{port}", max_attempts=3)
    try:
        with pytest.raises(ExpertError) as ei:
            await hub.run("text-classification", "ok/model", {"text": "x"}, sink, task_id=1,
                          url=f"http://127.0.0.1:{port}/models/ok/model", expert_server=True)
    finally:
        await hub.aclose()
    assert refused_connection(ei.value) and ei.value.user_message == "The model ok/model could not be reached."


async def test_the_environment_proxy_carries_calls_except_for_no_proxy_hosts(server, sink, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", server.url)  # the recorder answers as the proxy would
    monkeypatch.setenv("NO_PROXY", "bypassed.invalid")
    hub = runner("http://expert.invalid")  # a host that resolves nowhere: only the proxy reaches it
    try:
        out = await hub.run("text-classification", "ok/model", {"text": "great"}, sink, task_id=1)
        with pytest.raises(ExpertError) as ei:
            await hub.run("text-classification", "ok/model", {"text": "great"}, sink, task_id=2,
                          url="http://bypassed.invalid/models/ok/model")
    finally:
        await hub.aclose()
    assert "POSITIVE" in (out.text or "") and len(server.ports) == 1
    assert ei.value.reason == "server" and ei.value.user_message == "The model ok/model could not be reached."


async def test_no_netrc_credentials_are_added(server, sink, tmp_path, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-SECRET\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    hub = runner(server.url, token=None)
    try:
        await hub.run("text-classification", "ok/model", {"text": "great"}, sink, task_id=1,
                      url=f"{server.url}/models/ok/model", expert_server=True)
    finally:
        await hub.aclose()
    sent = dict((k.lower(), v) for k, v in server.headers[0])
    assert "authorization" not in sent, sent
