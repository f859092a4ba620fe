"""The expert servers' ``GET /models`` as the bot reads it: untrusted input checked, one request per
server however many tasks ask at once, a server that goes away named in the task's sentence."""

from __future__ import annotations

import asyncio

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.catalog.servers import ExpertServers, parse_listing
from tests.conftest import media_file
from tests.standins.expert_server import ExpertServerStandIn, model


def test_entries_outside_the_contract_are_left_out():
    body = {"models": [
        model("Intel/dpt-large", "depth-estimation"),
        model("../../etc/passwd", "depth-estimation"),
        model("http://evil.example/x", "image-classification"),
        model("a/b/c", "image-classification"),
        model("acme/juggler", "juggling"),
        {"id": "acme/odd", "task": "image-classification", "state": "sleeping"},
        "not an object",
        model("hed-control", "hed-control", state="on_disk"),
    ], "device": "cuda:0"}
    listing = parse_listing("http://gpu1:8081", body)
    assert [(m.id, m.state) for m in listing.models] == [("Intel/dpt-large", "loaded"), ("hed-control", "on_disk")]
    assert listing.device == "cuda:0"


async def test_one_request_per_server_however_many_ask_at_once():
    with ExpertServerStandIn([model("Intel/dpt-large", "depth-estimation")]) as es:
        servers = ExpertServers([es.url, es.url + "/"], ttl=5, timeout=5)
        try:
            found = await asyncio.gather(*(servers.models_for("depth-estimation") for _ in range(20)))
        finally:
            await servers.aclose()
    assert es.listing_calls == 1  # the same server given twice is asked once, by one request
    assert all(list(f) == ["Intel/dpt-large"] and f["Intel/dpt-large"][1] == [es.url] for f in found)


async def test_a_broken_listing_counts_as_nothing_served_and_is_logged_once(caplog):
    with ExpertServerStandIn([]) as es:
        es.models = "not a list"  # type: ignore[assignment]
        servers = ExpertServers([es.url], ttl=0, timeout=5)
        try:
            assert await servers.models_for("depth-estimation") == {}
            assert await servers.models_for("depth-estimation") == {}
        finally:
            await servers.aclose()
    assert servers.unreachable() == [es.url]
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and es.url in r.getMessage()]
    assert len(warnings) == 1


async def test_local_mode_names_the_server_that_went_away_in_the_tasks_sentence(sandbox, tmp_path):
    es = ExpertServerStandIn([model("Intel/dpt-large", "depth-estimation")]).start()
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update(experts_url=[es.url], mode="local", experts_ttl=0.2)
    service = await Service.create(load_settings(env={}, overrides=overrides))
    key = ConversationKey("test", "w", "c", "t")

    async def turn() -> dict:
        events = [e async for e in service.handle(Message("Estimate the depth of this photo", [media_file("chelsea.png")], key=key, who=Requester("terminal", "u1")))]
        return events[-1].record.to_json()

    try:
        first = await turn()
        es.close()  # the server goes away between two requests
        await asyncio.sleep(0.3)
        second = await turn()
    finally:
        await service.close()
        es.close()
    assert first["status"] == "ok"
    [res] = second["results"].values()
    assert res["status"] == "failed"
    assert res["error"] == (f"No model that can run depth-estimation is available right now: the expert server "
                            f"{es.url} could not be reached.")
    assert es.url in second["response"]
    assert sandbox.inference.records == []


async def test_hybrid_with_servers_and_no_token_uses_the_servers_only(caplog):
    from bot.backends import build_pipeline
    from bot.errors import ConfigError

    env = {"HUGGINGGPT_LLM__API_KEY": "sk-test", "HUGGINGGPT_INFERENCE__EXPERTS_URL": "http://127.0.0.1:9"}
    pipeline, closers = build_pipeline(load_settings(env=env))
    try:
        assert pipeline.selector.placement.mode == "local"
        assert any("only the expert servers" in r.getMessage() for r in caplog.records)
    finally:
        for close in closers:
            await close()
    try:  # without expert servers, a missing token is still the one-sentence settings error
        build_pipeline(load_settings(env={"HUGGINGGPT_LLM__API_KEY": "sk-test"}))
    except ConfigError as e:
        assert "No Hugging Face token" in e.user_message
    else:
        raise AssertionError("a missing token was accepted")
