"""The provider policy, per-task overrides, pins and billing, through the real ``huggingface_hub``
client: its provider helpers build the router URLs and look the mapping up on the Hub; both are
stand-ins on 127.0.0.1 reached through the client's own session factories (tests/standins/loopback.py).
"""

from __future__ import annotations

import pytest

from bot.errors import ConfigError
from sandbox.inference import InferenceStandIn
from bot.settings import Settings, load_settings
from pipeline.catalog.availability import Availability
from pipeline.catalog.models import Catalog, ModelCard
from pipeline.catalog.placement import Placement
from pipeline.errors import ExpertError
from pipeline.execution import Executor
from bot.backends import pipeline_config
from pipeline.experts.hub import HubRunner
from pipeline.experts.providers import LatencyBook, ProviderPolicy, split_pin
from pipeline.experts.routing import RoutingRunner
from pipeline.selection import Selector
from pipeline.types import Selection, Task
from tests.standins.hub import HubStandIn
from tests.standins.loopback import redirect_hub

TOKEN = "hf_policySECRET"
ROUTER = "https://router.huggingface.co"


def model(mid: str, task: str, live: list[str], downloads: int = 100) -> dict:
    """A Hub model record as tests/standins/hub.py serves it (mapping in the Hub's order)."""
    hub_task = "conversational" if task == "image-text-to-text" else task
    return {"id": mid, "downloads": downloads, "likes": 1, "tags": [task], "cardData": {}, "pipeline_tag": task,
            "mappings": [{"provider": p, "providerId": mid, "status": "live", "task": hub_task} for p in live]}


HUB_MODELS = [
    model("acme/paint", "text-to-image", ["together", "hf-inference"], 900),
    model("acme/sketch", "text-to-image", ["hf-inference"], 500),
    model("acme/vlm", "image-text-to-text", ["nebius", "together"], 700),
]


def cards() -> Catalog:
    return Catalog([ModelCard(m["id"], m["pipeline_tag"], m["downloads"], 1, "d", None, ()) for m in HUB_MODELS])


@pytest.fixture
async def world(sink):
    """``(make, standin)``: ``make(provider, providers, bill_to)`` → a RoutingRunner and Selector
    over the stand-in router and Hub."""
    made: list[HubRunner] = []
    async with HubStandIn(HUB_MODELS) as hub, InferenceStandIn() as standin:
        standin.task_of.update({"acme/paint": "text-to-image", "acme/sketch": "text-to-image"})
        with redirect_hub(standin.url, hub.url) as transport:

            def make(provider="auto", providers=None, bill_to=None):
                policy = ProviderPolicy(provider, dict(providers or {}))
                av = Availability(provider=provider, base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                                  policy=policy)
                runner = HubRunner(pipeline_config(Settings(inference=dict(provider=provider, token=TOKEN, bill_to=bill_to, max_attempts=1,
                                                  backoff_max=0.01, router_url=ROUTER))), transport=transport)
                made.append(runner)
                selector = Selector(cards(), av, controller=None, strategy="top", top_k=3, mode="providers")
                return RoutingRunner(runner, selector.placement), selector

            yield make, standin
            for r in made:
                await r.aclose()


def prompt() -> dict:
    return {"text": "a red boat"}


# -- the policy's choice, the fallback across providers, the per-task override, the pin ----------

async def test_auto_takes_the_hubs_order_and_moves_across_providers_before_another_model(world, sink):
    make, standin = world
    routing, selector = make("auto")
    [first, second] = await selector.candidates("text-to-image")
    assert first.id == "acme/paint" and [r.label for r in first.routes] == ["provider together", "provider hf-inference"]
    standin.faults["together:acme/paint"] = [503]
    out = await routing.run("text-to-image", "acme/paint", prompt(), sink, task_id=1)
    assert out.where == "provider hf-inference" and out.files[0].kind == "image"
    # one call to together (503), then the same model on hf-inference: no other model was tried
    assert [(r.provider, r.model, r.status) for r in standin.records] == [
        ("together", "acme/paint", 503), ("hf-inference", "acme/paint", 200)]


async def test_a_provider_name_and_a_per_task_override(world, sink):
    make, standin = world
    routing, selector = make("hf-inference", providers={"image-text-to-text": "together"})
    # hf-inference for text-to-image: the two models it serves; together for the VLM
    assert [c.id for c in await selector.candidates("text-to-image")] == ["acme/paint", "acme/sketch"]
    [vlm] = await selector.candidates("image-text-to-text")
    assert [r.label for r in vlm.routes] == ["provider together"]
    routing2, selector2 = make("auto", providers={"text-to-image": "hf-inference"})
    assert [[r.label for r in c.routes] for c in await selector2.candidates("text-to-image")] == [
        ["provider hf-inference"], ["provider hf-inference"]]
    out = await routing2.run("text-to-image", "acme/paint", prompt(), sink, task_id=1)
    assert out.where == "provider hf-inference"
    assert [r.provider for r in standin.records] == ["hf-inference"]


async def test_a_model_pinned_to_a_provider_in_the_settings(world, sink):
    make, standin = world
    settings = load_settings(env={}, overrides={"inference": {"providers": {"text-to-image": "acme/sketch:hf-inference"}}})
    routing, selector = make(settings.inference.provider, providers=settings.inference.providers)
    [only] = await selector.candidates("text-to-image")  # the pin wins over the more downloaded model
    assert only.id == "acme/sketch" and [r.label for r in only.routes] == ["provider hf-inference"]
    sel, order = await selector.select(Task(1, "text-to-image", [-1], {"text": "a red boat"}), "draw", usage=None)
    assert (sel.model, order) == ("acme/sketch", ["acme/sketch"])
    out = await routing.run("text-to-image", "acme/sketch", prompt(), sink, task_id=1)
    assert out.where == "provider hf-inference" and standin.records[-1].model == "acme/sketch"


def test_pins_and_policies_parse_as_the_router_writes_them():
    assert split_pin("black-forest-labs/FLUX.1-dev:fal-ai") == ("black-forest-labs/FLUX.1-dev", "fal-ai")
    assert split_pin("org/m:cheapest") == ("org/m", "cheapest")
    assert split_pin("org/m") == ("org/m", None)
    with pytest.raises(ConfigError, match="only accepted per task"):
        load_settings(env={}, overrides={"inference": {"provider": "org/m:fal-ai"}})
    with pytest.raises(ConfigError, match="not a known task"):
        load_settings(env={}, overrides={"inference": {"providers": {"juggling": "fal-ai"}}})


def test_fastest_orders_by_observed_latency_and_chat_goes_to_the_router():
    book = LatencyBook()
    policy = ProviderPolicy("fastest", latency=book)
    live = ["fal-ai", "replicate", "hf-inference"]
    assert policy.order("text-to-image", "m", live) == live  # nothing observed: the Hub's order
    book.note("hf-inference", 0.4)
    book.note("replicate", 2.0)
    assert policy.order("text-to-image", "m", live) == ["hf-inference", "replicate", "fal-ai"]
    # object detection: no provider but hf-inference has a helper for it in the installed client
    assert policy.order("object-detection", "m", live) == ["hf-inference"]
    assert policy.order("image-text-to-text", "m", ["together"]) == ["auto:fastest"]
    assert ProviderPolicy("auto").order("image-text-to-text", "m", ["together"]) == ["auto"]
    assert ProviderPolicy("cheapest").order("image-text-to-text", "m", []) == []


async def test_the_vlm_goes_through_the_routers_auto_route_with_the_policy_suffix(world, sink, tmp_path):
    from tests.conftest import media_file, stored_upload

    make, standin = world
    routing, _ = make("cheapest")
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await routing.run("image-text-to-text", "acme/vlm", {"image": image, "text": "What animal is this?"}, sink,
                            task_id=1)
    assert out.where == "provider auto:cheapest"
    [rec] = standin.records
    assert (rec.provider, rec.model) == ("auto:cheapest", "acme/vlm")  # the body's model was "acme/vlm:cheapest"
    assert "What animal is this?" in out.text and "image 1: a 451x300 image" in out.text


# -- billing ------------------------------------------------------------------------------------

async def test_bill_to_is_sent_and_no_credits_is_one_sentence_that_stops_every_fallback(world, sink):
    make, standin = world
    routing, selector = make("auto", bill_to="acme-research")
    out = await routing.run("text-to-image", "acme/sketch", prompt(), sink, task_id=1)
    assert out.files and standin.records[-1].bill_to == "acme-research"

    standin.no_credits.add("acme-research")
    standin.records.clear()
    executor = Executor(selector, {"hub": routing}, pipeline_config(Settings(inference=dict(task_timeout=30, deadline=60, max_candidates_tried=3))).execution)
    task = Task(1, "text-to-image", [-1], {"text": "a red boat"})
    sel = Selection(1, "acme/paint", "top", ("acme/paint", "acme/sketch"), "top")
    result = await executor._run_models(task, sel, ["acme/paint", "acme/sketch"], prompt(), sink, lambda e: None, None)
    assert result.status == "failed"
    assert result.error == ("Inference Providers refused the call because the organisation "
                            "acme-research has no credits left (HTTP 402); top up the organisation acme-research at "
                            "https://huggingface.co/settings/billing or set [inference] bill_to to an organisation "
                            "with credits.")
    # one request: not the next provider of the model, not the next model
    assert [(r.provider, r.status, r.bill_to) for r in standin.records] == [("together", 402, "acme-research")]
    with pytest.raises(ExpertError) as info:
        await routing.run("text-to-image", "acme/sketch", prompt(), sink, task_id=2)
    assert info.value.reason == "billing"
