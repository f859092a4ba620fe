"""``image-text-to-text``: a vision-language model through the router's chat completion with image
content, on the real ``huggingface_hub`` client against the stand-in router and Hub
(tests/standins/loopback.py), and standing in for captioning when no captioning model is live.
"""

from __future__ import annotations

import base64

import pytest

from sandbox.inference import InferenceStandIn
from pipeline.catalog.availability import Availability
from pipeline.catalog.models import Catalog, ModelCard
from pipeline.execution import Executor
from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from pipeline.experts.providers import ProviderPolicy
from pipeline.experts.routing import RoutingRunner
from pipeline.llm import Usage
from pipeline.selection import Selector
from pipeline.tasks import TASKS
from pipeline.tasks.base import Inputs
from pipeline.tasks.multimodal import messages
from pipeline.types import Request, Task, TaskFinished
from tests.conftest import media_file, stored_upload
from tests.standins.hub import HubStandIn
from tests.standins.loopback import redirect_hub

TOKEN = "hf_vlmSECRET"


def model(mid: str, task: str, live: list[str], downloads: int = 100) -> dict:
    hub_task = "conversational" if task == "image-text-to-text" else task
    return {"id": mid, "downloads": downloads, "likes": 1, "tags": [task], "cardData": {}, "pipeline_tag": task,
            "mappings": [{"provider": p, "providerId": mid, "status": "live", "task": hub_task} for p in live]}


HUB_MODELS = [
    model("acme/captioner", "image-to-text", []),  # in the catalog, live nowhere
    model("acme/vlm", "image-text-to-text", ["together"], 700),
    model("acme/paint", "text-to-image", ["hf-inference"], 900),
]


@pytest.fixture
async def executor():
    async with HubStandIn(HUB_MODELS) as hub, InferenceStandIn() as standin:
        standin.task_of["acme/paint"] = "text-to-image"
        with redirect_hub(standin.url, hub.url) as transport:
            av = Availability(provider="auto", base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                              policy=ProviderPolicy("auto"))
            runner = HubRunner(pipeline_config(Settings(inference=dict(provider="auto", token=TOKEN, max_attempts=1, backoff_max=0.01,
                                              router_url="https://router.huggingface.co"))), transport=transport)
            cards = Catalog([ModelCard(m["id"], m["pipeline_tag"], m["downloads"], 1, "d", None, ()) for m in HUB_MODELS])
            selector = Selector(cards, av, controller=None, strategy="top", top_k=3, mode="providers")
            routing = RoutingRunner(runner, selector.placement)
            yield Executor(selector, {"hub": routing}, pipeline_config(Settings(inference=dict(task_timeout=30, deadline=60))).execution), standin
            await runner.aclose()


def test_images_travel_as_data_uris_after_the_question():
    png = media_file("chelsea.png").data
    msgs = messages(Inputs(text={"text": "Compare them."}, media={"image": png, "image2": png}, resources={}))
    [user] = msgs
    assert user["role"] == "user" and user["content"][0] == {"type": "text", "text": "Compare them."}
    urls = [p["image_url"]["url"] for p in user["content"][1:]]
    assert len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    assert base64.b64decode(urls[0].split(",", 1)[1]) == png
    with pytest.raises(ValueError, match="not an image"):
        messages(Inputs(text={"text": "?"}, media={"image": b"%PDF-1.4 not an image"}, resources={}))
    assert "image-text-to-text" in TASKS and TASKS["image-text-to-text"].allowed["image2"] == "image"


async def test_a_vlm_captions_when_no_captioning_model_is_live_and_a_later_task_uses_its_answer(executor, sink):
    ex, standin = executor
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    assert "image-to-text" in await ex.selector.served_tasks()  # offered to the planner through the VLM
    plan = [Task(1, "image-to-text", [], {"image": image.id}),
            Task(2, "text-to-image", [1], {"text": "<GENERATED>-1"})]
    events = []
    selections, results = await ex.execute(plan, Request("caption this and paint it", files=[image]), sink,
                                           events.append, Usage())
    sel = selections[1]
    assert (sel.model, sel.runs_as, sel.strategy) == ("acme/vlm", "image-text-to-text", "vlm-instead")
    assert sel.reason == ("no image-to-text model is available right now, so the vision-language model acme/vlm "
                          "(image-text-to-text) answers instead")
    caption = results[1].output.text
    # the stand-in VLM saw the captioning question and the photo's own pixels
    assert "[sandbox vlm] Describe this image in one or two sentences. -> image 1:" in caption
    assert "image 1: a 451x300 image" in caption
    assert results[2].status == "ok" and results[2].output.files[0].kind == "image"
    vlm_call, paint_call = standin.records
    assert (vlm_call.provider, vlm_call.model, vlm_call.task) == ("auto", "acme/vlm", "conversational")
    assert (paint_call.model, paint_call.asked) == ("acme/paint", caption)  # the VLM's answer, as any text
    assert any(isinstance(e, TaskFinished) and e.result.task_id == 2 for e in events)


async def test_without_a_vlm_the_task_fails_with_one_sentence(executor, sink):
    ex, _ = executor
    ex.selector.placement.availability.policy.per_task = {"image-text-to-text": "groq"}  # the VLM is not there
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    _, results = await ex.execute([Task(1, "image-to-text", [], {"image": image.id})],
                                  Request("caption", files=[image]), sink, lambda e: None, Usage())
    assert results[1].status == "failed"
    assert results[1].error == "No model that can run image-to-text is available right now."
