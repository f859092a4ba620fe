"""Video generation: ``image-to-video`` (and ``text-to-video``) as real MP4 files, through the
stand-in gateway (the Hugging Face inference wire format, as a dedicated endpoint answers)."""

from __future__ import annotations

import pytest

from bot.uploads import probe
from pipeline.experts.hub import ExpertSettings, HubRunner
from tests.conftest import media_file, stored_upload

TOKEN = "hf_videoSECRET"


@pytest.fixture
async def experts(standin):
    standin.task_of.update({"sandbox/i2v-model": "image-to-video"})
    ex = HubRunner(ExpertSettings(provider="hf-inference", token=TOKEN, base_url=standin.url, endpoints={},
                                  task_timeout=10.0, max_attempts=1, backoff_max=0.1))
    yield ex
    await ex.aclose()


async def test_an_image_becomes_a_real_mp4(experts, standin, sink):
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await experts.run("image-to-video", "sandbox/i2v-model", {"image": image, "text": "the cat turns"}, sink,
                            task_id=1)
    (video,) = out.files
    assert video.kind == "video" and video.mime == "video/mp4"
    assert video.description == f"video animating {image.id}: 'the cat turns'"
    info = await probe(video.path)
    assert any(s["codec_type"] == "video" for s in info["streams"]) and float(info["format"]["duration"]) > 1.0
    assert standin.records[-1].task == "image-to-video" and standin.records[-1].status == 200
