"""Provider churn: the six providers Hugging Face removed from its router on 2026-07-01 and
provider names it never had, in the settings, in per-task overrides and in ``model:provider``
pins. Each is one sentence naming the setting and what to do, at start (a log line), in
``doctor`` (tests/test_doctor.py) and when a task would use it; ``auto`` routes around a removed
provider a model's mapping still lists. Through the real ``huggingface_hub`` client against the
Hub stand-in (``inferenceProviderMapping`` as the Hub serves it) and the router stand-in."""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import Settings, load_settings
from bot.backends import pipeline_config
from pipeline.catalog.availability import Availability
from pipeline.catalog.models import Catalog, ModelCard
from pipeline.errors import ExpertError
from pipeline.experts.hub import HubRunner
from pipeline.experts.providers import ProviderPolicy, watch_providers
from pipeline.experts.routing import RoutingRunner
from pipeline.selection import Selector
from pipeline.types import Task
from sandbox.inference import InferenceStandIn
from tests.conftest import media_file, stored_upload
from tests.standins.hub import HubStandIn
from tests.standins.loopback import redirect_hub

TOKEN = "hf_churnSECRET"
ROUTER = "https://router.huggingface.co"
PAGE = "https://huggingface.co/settings/inference-providers"


def model(mid: str, task: str, live: list[str], downloads: int) -> dict:
    """A Hub model record (mapping in the Hub's order) as tests/standins/hub.py serves it."""
    hub_task = "conversational" if task == "image-text-to-text" else task
    return {"id": mid, "downloads": downloads, "likes": 1, "tags": [task], "cardData": {}, "pipeline_tag": task,
            "mappings": [{"provider": p, "providerId": mid, "status": "live", "task": hub_task} for p in live]}


HUB_MODELS = [
    model("acme/old-vlm", "image-text-to-text", ["sambanova"], 900),  # only on a removed provider
    model("acme/vlm", "image-text-to-text", ["nebius", "together"], 700),
    model("acme/paint", "text-to-image", ["fal-ai", "hf-inference"], 500),
]


@pytest.fixture
async def world():
    """``(make, standin)``: ``make(provider, providers)`` → a RoutingRunner and Selector over the
    stand-in router and Hub, through the real client."""
    made: list[HubRunner] = []
    cards = Catalog([ModelCard(m["id"], m["pipeline_tag"], m["downloads"], 1, "d", None, ()) for m in HUB_MODELS])
    async with HubStandIn(HUB_MODELS) as hub, InferenceStandIn() as standin:
        standin.task_of.update({"acme/paint": "text-to-image"})
        with redirect_hub(standin.url, hub.url) as transport:

            def make(provider="auto", providers=None):
                policy = ProviderPolicy(provider, dict(providers or {}))
                av = Availability(provider=provider, base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                                  policy=policy)
                runner = HubRunner(pipeline_config(Settings(inference=dict(
                    provider=provider, token=TOKEN, max_attempts=1, backoff_max=0.01, router_url=ROUTER))),
                    transport=transport)
                made.append(runner)
                selector = Selector(cards, av, controller=None, strategy="top", top_k=3, mode="providers")
                return RoutingRunner(runner, selector.placement), selector

            yield make, standin
            for r in made:
                await r.aclose()


async def test_auto_routes_around_a_removed_provider_the_mapping_still_lists(world, sink):
    make, standin = world
    routing, selector = make("auto")
    # the more downloaded VLM is only on sambanova (removed): not a candidate; the other one is,
    # though its mapping lists nebius first
    [vlm] = await selector.candidates("image-text-to-text")
    assert vlm.id == "acme/vlm"
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await routing.run("image-text-to-text", "acme/vlm", {"image": image, "text": "What animal is this?"}, sink,
                            task_id=1)
    assert "What animal is this?" in out.text
    # asked for the one on sambanova anyway (a plan naming it): nothing is sent, one sentence
    with pytest.raises(ExpertError) as raised:
        await routing.run("image-text-to-text", "acme/old-vlm", {"image": image, "text": "What is it?"}, sink,
                          task_id=2)
    assert raised.value.user_message == "No configured provider serves image-text-to-text with acme/old-vlm."
    assert [(r.provider, r.model) for r in standin.records] == [("auto", "acme/vlm")]
    # a pin of the plan on the removed provider routes nowhere either
    assert selector.placement.provider_routes("image-text-to-text", "acme/vlm:nebius") == []


async def test_a_per_task_override_to_an_unknown_provider_fails_that_task_with_one_sentence(world):
    make, standin = world
    _, selector = make("auto", providers={"text-to-image": "acme-cloud"})
    assert "text-to-image" in await selector.served_tasks()  # planned, so the user hears why it fails
    with pytest.raises(LookupError) as raised:
        await selector.select(Task(1, "text-to-image", [-1], {"text": "a red boat"}), "draw a red boat", usage=None)
    assert str(raised.value) == (f'[inference.providers] "text-to-image" = "acme-cloud" names acme-cloud, which is not '
                                 f'a provider the Hugging Face router knows; set it to "auto" or to a provider enabled '
                                 f'at {PAGE}.')
    [vlm] = await selector.candidates("image-text-to-text")  # the other tasks keep the default
    assert vlm.id == "acme/vlm" and standin.records == []


async def test_a_pinned_model_on_a_provider_that_does_not_serve_it_is_found_on_the_hub(world):
    make, _ = world
    _, selector = make("auto", providers={"text-to-image": "acme/paint:together"})
    policy = selector.availability.policy
    [sentence] = await policy.problems(selector.availability.live_of)
    assert sentence == (f'[inference.providers] "text-to-image" = "acme/paint:together" pins acme/paint to together, '
                        f'which does not serve it now (the Hub lists fal-ai, hf-inference); pin one of those or a '
                        f'provider enabled at {PAGE}.')
    _, fine = make("auto", providers={"text-to-image": "acme/paint:fal-ai"})
    assert await fine.availability.policy.problems(fine.availability.live_of) == []


async def test_settings_pinning_nebius_log_at_start_and_the_task_fails_with_the_sentence(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update(base_url=None, token=TOKEN, router_url=ROUTER, mode="providers",
                                  providers={"text-to-image": "nebius"})
    sentence = (f'[inference.providers] "text-to-image" = "nebius" names nebius, which Hugging Face removed from '
                f'Inference Providers on 2026-07-01; set it to "auto" or to a provider enabled at {PAGE}.')
    async with HubStandIn(HUB_MODELS) as hub:
        with redirect_hub(sandbox.inference_url, hub.url):
            service = await Service.create(load_settings(env={}, overrides=overrides))
            try:
                key = ConversationKey("test", "w", "c", "churn")
                events = [e async for e in service.handle(Message("Draw a red boat.", [], key=key,
                                                                  who=Requester("terminal", "u1")))]
            finally:
                await service.close()
    started = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "pipeline.experts.providers"]
    assert started == [(logging.WARNING, f"provider settings: {sentence}")]  # once, at start
    record = events[-1].record.to_json()
    assert record["results"]["0"] == {"status": "failed", "model": None, "where": None, "output": None,
                                      "error": sentence}
    assert f"**text-to-image** failed: {sentence}" in record["response"]
    assert sandbox.inference.records == []  # nothing was sent to any provider


async def test_the_timer_says_a_pin_broke_and_when_it_is_fixed_from_the_hubs_mapping(caplog):
    caplog.set_level(logging.INFO, logger="pipeline.experts.providers")
    async with HubStandIn(copy.deepcopy(HUB_MODELS)) as hub, InferenceStandIn() as standin:
        with redirect_hub(standin.url, hub.url):
            policy = ProviderPolicy("auto", {"text-to-image": "acme/paint:together"})
            av = Availability(provider="auto", base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                              policy=policy, ttl=0.05)
            watch = asyncio.create_task(watch_providers(policy, av.live_of, 0.1))
            try:
                await asyncio.sleep(0.3)
                hub.models["acme/paint"]["mappings"].append(
                    {"provider": "together", "providerId": "x", "status": "live", "task": "text-to-image"})
                await asyncio.sleep(0.4)
            finally:
                watch.cancel()
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO]  # once each, not at every tick
    assert said[0][1].startswith('provider settings: [inference.providers] "text-to-image" = "acme/paint:together" '
                                 "pins acme/paint to together, which does not serve it now")
    assert said[1][1].startswith("provider settings: resolved: ")
