"""The bot's side of expert server access (issue 39): the API key it sends each server
(``[inference] experts_api_keys``) to the real expert server with ``api_key`` set, and redirects
of expert calls: one to another origin is not followed with the user's input, one within the same
origin is."""

from __future__ import annotations

import json
import os

import pytest
from aiohttp import web

from pipeline.catalog.servers import ExpertServers
from pipeline.errors import ExpertError
from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from benchmarks.harness.realparts import free_port


class Recorder:
    """Two real HTTP servers on 127.0.0.1: ``redirector`` answers ``POST /models/away`` with a 307
    to ``elsewhere`` (another origin) and ``POST /models/here`` with a 307 to its own
    ``/models/answer``; ``elsewhere`` records every request it gets."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.runners: list[web.AppRunner] = []
        self.port, self.other = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    async def start(self) -> "Recorder":
        async def away(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{self.other}/models/away")

        async def here(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect("/models/answer")

        async def answer(request: web.Request) -> web.Response:
            await request.read()
            return web.json_response([[{"label": "positive", "score": 0.9}, {"label": "negative", "score": 0.1}]])

        async def record(request: web.Request) -> web.Response:
            self.seen.append(await request.read())
            return web.json_response([[{"label": "stolen", "score": 1.0}]])

        a, b = web.Application(), web.Application()
        a.router.add_post("/models/away", away)
        a.router.add_post("/models/here", here)
        a.router.add_post("/models/answer", answer)
        b.router.add_post("/models/away", record)
        for app, port in ((a, self.port), (b, self.other)):
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)
        return self

    async def stop(self) -> None:
        for r in self.runners:
            await r.cleanup()


@pytest.fixture
async def recorder():
    rec = await Recorder().start()
    yield rec
    await rec.stop()


async def test_a_redirect_to_another_host_is_not_followed_with_the_input(recorder, sink):
    hub = HubRunner(pipeline_config(Settings(inference=dict(provider=None, task_timeout=10, max_attempts=1))))
    try:
        with pytest.raises(ExpertError) as e:
            await hub.run("text-classification", "away", {"text": "my private text"}, sink, task_id=1,
                          url=f"{recorder.url}/models/away", expert_server=True)
        assert e.value.user_message == (f"The model away answered with a redirect to another host "
                                        f"(http://127.0.0.1:{recorder.other}); the bot does not send your input there.")
        assert recorder.seen == []  # the text never reached the other host
        out = await hub.run("text-classification", "here", {"text": "the cat"}, sink, task_id=2,
                            url=f"{recorder.url}/models/here", expert_server=True)
        assert out.data.items[0].label == "positive"  # same origin: followed
    finally:
        await hub.aclose()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    pytest.importorskip("torch")
    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path_factory.mktemp("hf-cache-keyed")
    tinymodels.build_cache(cache, {"tiny/bert-sentiment": tinymodels.REPOS["tiny/bert-sentiment"]})
    srv = Server(cache, 'api_key = "server-key-1"\n', tmp_path_factory.mktemp("keyed") / "server.log")
    yield srv
    srv.stop()


async def test_the_bot_sends_each_expert_server_its_key(keyed_server, sink):
    url = keyed_server.url
    servers = ExpertServers([url], ttl=0, timeout=5, keys={url: "server-key-1"})
    keyless = ExpertServers([url], ttl=0, timeout=5)
    try:
        [listing] = await servers.listings()
        assert listing.reachable and "tiny/bert-sentiment" in {m.id for m in listing.models}
        [refused] = await keyless.listings()
        assert not refused.reachable and keyless.unreachable() == [url]
    finally:
        await servers.aclose()
        await keyless.aclose()
    hub = HubRunner(pipeline_config(Settings(inference=dict(provider=None, token="hf_secret_token", task_timeout=60, max_attempts=1,
                                   experts_url=[url], experts_api_keys={url: "server-key-1"}))))
    other = HubRunner(pipeline_config(Settings(inference=dict(provider=None, token="hf_secret_token", task_timeout=60, max_attempts=1))))
    try:
        out = await hub.run("text-classification", "tiny/bert-sentiment", {"text": "the cat is happy"}, sink,
                            task_id=1, url=f"{url}/models/tiny/bert-sentiment", expert_server=True)
        assert {x.label for x in out.data.items} == {"negative", "positive"}
        with pytest.raises(ExpertError):  # the Hugging Face token is no key to it
            await other.run("text-classification", "tiny/bert-sentiment", {"text": "the cat"}, sink, task_id=2,
                            url=f"{url}/models/tiny/bert-sentiment", expert_server=True)
    finally:
        await hub.aclose()
        await other.aclose()
    assert "hf_secret_token" not in keyed_server.log.read_text()


def test_experts_api_keys_must_name_a_configured_server():
    from pydantic import ValidationError

    from bot.settings import InferenceSettings, load_settings

    ok = InferenceSettings(experts_url=["http://experts:8081/"], experts_api_keys={"http://experts:8081/": "sekrit-key"})
    assert ok.experts_api_keys["http://experts:8081"].get_secret_value() == "sekrit-key"
    assert "sekrit-key" not in repr(ok)
    with pytest.raises(ValidationError, match="is not one of"):
        InferenceSettings(experts_url=["http://experts:8081"], experts_api_keys={"http://other:8081": "k"})
    env = {"HUGGINGGPT_INFERENCE__EXPERTS_URL": "http://experts:8081",
           "HUGGINGGPT_INFERENCE__EXPERTS_API_KEYS": json.dumps({"http://experts:8081": "from-env"})}
    settings = load_settings(path=os.devnull, env=env)
    assert settings.inference.experts_api_keys["http://experts:8081"].get_secret_value() == "from-env"


async def test_the_saved_token_is_read_once_at_start_not_per_expert_call(tmp_path, monkeypatch, sink):
    """With no ``[inference] token``, the token ``hf auth login`` saved is the one sent, read when
    the configuration is built: replacing the file afterwards changes nothing until the next start
    (the hub client, given no token, would read the file again on every call, on the event loop)."""
    from huggingface_hub import constants

    seen: list[str | None] = []

    async def classify(request: web.Request) -> web.Response:
        await request.read()
        seen.append(request.headers.get("Authorization"))
        return web.json_response([[{"label": "positive", "score": 0.9}]])

    app = web.Application()
    app.router.add_post("/models/{name}", classify)
    runner, port = web.AppRunner(app), free_port()
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    saved = tmp_path / "token"
    saved.write_text("hf_saved_first")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(saved))  # where HF_HOME puts it
    monkeypatch.delenv("HF_TOKEN", raising=False)
    gateway = dict(provider=None, base_url=f"http://127.0.0.1:{port}", max_attempts=1)
    hub = HubRunner(pipeline_config(Settings(inference=gateway)))
    configured = HubRunner(pipeline_config(Settings(inference={**gateway, "token": "hf_from_settings"})))
    try:
        await hub.run("text-classification", "m", {"text": "a"}, sink, task_id=1)
        saved.write_text("hf_saved_second")
        await hub.run("text-classification", "m", {"text": "b"}, sink, task_id=2)
        await configured.run("text-classification", "m", {"text": "c"}, sink, task_id=3)
    finally:
        await hub.aclose()
        await configured.aclose()
        await runner.cleanup()
    assert seen == ["Bearer hf_saved_first", "Bearer hf_saved_first", "Bearer hf_from_settings"]
