"""Video generation: ``image-to-video`` (and ``text-to-video``) as real MP4 files, through the
stand-in gateway (the Hugging Face inference wire format, as a dedicated endpoint answers)."""

from __future__ import annotations

import pytest

from bot.uploads import probe
from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from tests.conftest import media_file, stored_upload

TOKEN = "hf_videoSECRET"


@pytest.fixture
async def experts(standin):
    standin.task_of.update({"sandbox/i2v-model": "image-to-video"})
    ex = HubRunner(pipeline_config(Settings(inference=dict(provider="hf-inference", token=TOKEN, base_url=standin.url, endpoints={},
                                  task_timeout=10.0, max_attempts=1, backoff_max=0.1))))
    yield ex
    await ex.aclose()


async def test_an_image_becomes_a_real_mp4(experts, standin, sink, decoder):
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await experts.run("image-to-video", "sandbox/i2v-model", {"image": image, "text": "the cat turns"}, sink,
                            task_id=1)
    (video,) = out.files
    assert video.kind == "video" and video.mime == "video/mp4"
    assert video.description == f"video animating {image.id}: 'the cat turns'"
    info = await probe(video.path, decoder)
    assert any(s["codec_type"] == "video" for s in info["streams"]) and float(info["format"]["duration"]) > 1.0
    assert standin.records[-1].task == "image-to-video" and standin.records[-1].status == 200


# -- fal-ai's queue, through the real client (submit, poll, result, download) -------------------

def _hub_model(mid: str, task: str, provider_id: str) -> dict:
    return {"id": mid, "downloads": 10, "likes": 1, "tags": [task], "cardData": {}, "pipeline_tag": task,
            "mappings": [{"provider": "fal-ai", "providerId": provider_id, "status": "live", "task": task}]}


async def test_fal_ai_animates_an_image_and_writes_a_clip_through_its_queue(sink, decoder):
    from sandbox.inference import InferenceStandIn
    from pipeline.catalog.availability import Availability
    from pipeline.catalog.models import Catalog, ModelCard
    from pipeline.experts.providers import ProviderPolicy
    from pipeline.experts.routing import RoutingRunner
    from pipeline.selection import Selector
    from tests.standins.hub import HubStandIn
    from tests.standins.loopback import redirect_hub

    models = [_hub_model("acme/animate", "image-to-video", "fal-ai/acme-animate"),
              _hub_model("acme/clip", "text-to-video", "fal-ai/acme-clip")]
    async with HubStandIn(models) as hub, InferenceStandIn() as standin:
        with redirect_hub(standin.url, hub.url) as transport:
            av = Availability(provider="auto", base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                              policy=ProviderPolicy("auto"))
            runner = HubRunner(pipeline_config(Settings(inference=dict(provider="auto", token=TOKEN, bill_to="acme-studio", max_attempts=1,
                                              task_timeout=30, backoff_max=0.01))), transport=transport)
            cards = Catalog([ModelCard(m["id"], m["pipeline_tag"], 10, 1, "d", None, ()) for m in models])
            routing = RoutingRunner(runner, Selector(cards, av, None, strategy="top", top_k=3, mode="providers").placement)
            try:
                photo = media_file("chelsea.png")
                image = await stored_upload(sink, photo.data, photo.name, None)
                animated = await routing.run("image-to-video", "acme/animate", {"image": image, "text": "the cat turns"},
                                             sink, task_id=1)
                clip = await routing.run("text-to-video", "acme/clip", {"text": "a green rocket"}, sink, task_id=2)
            finally:
                await runner.aclose()
    assert animated.where == clip.where == "provider fal-ai"
    for out in (animated, clip):
        (video,) = out.files
        info = await probe(video.path, decoder)
        assert video.mime == "video/mp4" and any(s["codec_type"] == "video" for s in info["streams"])
    # the app ids of the mapping, the prompt and the billing header reached fal's queue
    assert [(r.model, r.task, r.bill_to, r.asked) for r in standin.records] == [
        ("fal-ai/acme-animate", "image-to-video", "acme-studio", "the cat turns"),
        ("fal-ai/acme-clip", "text-to-video", "acme-studio", "a green rocket")]
