"""Experts through the real ``AsyncInferenceClient`` against the inference stand-in.

Every task of ``pipeline.tasks.TASKS`` makes a real HTTP round trip on real media; the outputs are
decoded and checked as a user would see them (images opened, audio decoded, video probed).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

import numpy as np
import pytest
from PIL import Image

from tests.conftest import stored_upload
from pipeline.errors import ExpertError
from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from pipeline.experts.local import LOCAL_MODEL, LocalRunner
from bot.uploads import probe
from pipeline.tasks import TASKS

TOKEN = "hf_sandboxSECRETtoken123"
MODELS = {task: f"sandbox/{task}-model" for task, spec in TASKS.items() if not spec.local}


@pytest.fixture
async def experts(standin):
    standin.task_of.update({m: t for t, m in MODELS.items()})
    ex = HubRunner(
        pipeline_config(Settings(inference=dict(
            provider="hf-inference", token=TOKEN, base_url=standin.url, endpoints={},
            task_timeout=5.0, max_attempts=3, backoff_max=0.3,
        )))
    )
    yield ex
    await ex.aclose()


async def upload(sink, media_dir, name):
    data = (media_dir / name).read_bytes()
    return await stored_upload(sink, data, name, None)


def rgb(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.int16)


# -- NLP -----------------------------------------------------------------------------------------


async def test_text_classification_reads_the_sentiment(experts, sink, standin):
    out = await experts.run("text-classification", MODELS["text-classification"], {"text": "I love this, it is great"}, sink, task_id=1)
    sent = sorted(json.loads(standin.records[-1].answer)[0], key=lambda x: -x["score"])
    # the labels come back best first, with the scores the model sent, and the text names the best
    assert [(x.label, x.score) for x in out.data.items] == [(x["label"], x["score"]) for x in sent]
    assert out.text.startswith(f"{sent[0]['label']} ({sent[0]['score']:.2f})")
    other = await experts.run("text-classification", MODELS["text-classification"], {"text": "terrible and sad"}, sink, task_id=2)
    assert other.data.items[0].label != out.data.items[0].label


async def test_token_classification_finds_names(experts, sink):
    text = "Yesterday Clara Smith flew from Berkeley to Paris."
    out = await experts.run("token-classification", MODELS["token-classification"], {"text": text}, sink, task_id=1)
    words = [e.word for e in out.data.items]
    assert "Clara Smith" in words and "Paris" in words
    e = out.data.items[0]
    assert text[e.start : e.end] == e.word


def sent_text(standin) -> str:
    """The text of the last answer the stand-in model sent (the first string in its JSON)."""

    def first(value):
        if isinstance(value, str):
            return value
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        for v in items:
            found = first(v)
            if found is not None:
                return found
        return None

    body = json.loads(standin.records[-1].answer)
    if isinstance(body, dict) and "choices" in body:  # a chat completion
        return body["choices"][0]["message"]["content"]
    return first(body)


@pytest.mark.parametrize("task", ["summarization", "translation", "text-generation", "text2text-generation", "conversational"])
async def test_text_to_text_tasks(experts, sink, standin, task):
    text = "The rocket launched at dawn. It reached orbit an hour later."
    out = await experts.run(task, MODELS[task], {"text": text}, sink, task_id=3)
    assert out.text == sent_text(standin).strip()  # the model's text, as it sent it
    assert out.files == [] and out.data is None


async def test_question_answering_picks_the_span(experts, sink):
    ctx = "My name is Clara. I live in Berkeley and work on rockets."
    out = await experts.run(
        "question-answering", MODELS["question-answering"], {"text": "Where do I live?", "context": ctx}, sink, task_id=1
    )
    assert "Berkeley" in out.text
    assert ctx[out.data.start : out.data.end] == "I live in Berkeley and work on rockets."


async def test_sentence_similarity_scores_each_line(experts, sink):
    out = await experts.run(
        "sentence-similarity", MODELS["sentence-similarity"],
        {"text": "a cat sits on the mat", "context": "a cat sits on the rug\nstocks fell sharply\n"}, sink, task_id=1,
    )
    scores = {s.sentence: s.score for s in out.data.items}
    assert scores["a cat sits on the rug"] > scores["stocks fell sharply"] == 0.0


async def test_tabular_classification_from_csv(experts, sink, standin):
    csv_text = "alcohol,acidity\n9.4,0.7\n12.6,0.9\n9.8,0.6\n"
    out = await experts.run("tabular-classification", MODELS["tabular-classification"], {"text": csv_text}, sink, task_id=1)
    # one prediction per data row, in row order, as the model sent them
    assert list(out.data.items) == [str(p) for p in json.loads(standin.records[-1].answer)]
    assert len(out.data.items) == 3 and out.text.startswith(f"row 1: {out.data.items[0]}")
    with pytest.raises(ExpertError) as ei:
        await experts.run("tabular-classification", MODELS["tabular-classification"], {"text": "just words"}, sink, task_id=2)
    assert ei.value.reason == "refused"


# -- CV ------------------------------------------------------------------------------------------


async def test_object_detection_draws_boxes(experts, sink, media_dir):
    cat = await upload(sink, media_dir, "chelsea.png")
    out = await experts.run("object-detection", MODELS["object-detection"], {"image": cat}, sink, task_id=4)
    assert out.data.items, "the stand-in derives boxes from bright/dark regions"
    (drawn,) = out.files
    assert drawn.kind == "image" and drawn.origin == "task:4" and drawn.id == "image-2"
    before, after = rgb(cat.path), rgb(drawn.path)
    assert before.shape == after.shape
    xmin, ymin, xmax, ymax = out.data.items[0].box
    assert 0 <= xmin < xmax <= 451 and 0 <= ymin < ymax <= 300
    # The box outline changed the pixels on its left edge; pixels far outside all boxes did not.
    edge = np.abs(after[ymin + 5 : ymax - 5, xmin] - before[ymin + 5 : ymax - 5, xmin]).sum()
    assert edge > 0
    assert out.data.items[0].label in out.text


async def test_image_classification_and_caption_follow_the_image(experts, sink, media_dir, standin):
    cat = await upload(sink, media_dir, "chelsea.png")
    cls = await experts.run("image-classification", MODELS["image-classification"], {"image": cat}, sink, task_id=1)
    assert 0.99 <= sum(x.score for x in cls.data.items) <= 1.01 or len(cls.data.items) == 5
    cap = await experts.run("image-to-text", MODELS["image-to-text"], {"image": cat}, sink, task_id=2)
    assert cap.text == sent_text(standin).strip() and cap.files == []


async def test_text_to_image_renders_the_prompt_colour(experts, sink):
    out = await experts.run("text-to-image", MODELS["text-to-image"], {"text": "a red balloon over a field"}, sink, task_id=5)
    (img,) = out.files
    assert (img.mime, img.path.suffix) in (("image/png", ".png"), ("image/jpeg", ".jpg"))
    assert Image.open(img.path).format == {"image/png": "PNG", "image/jpeg": "JPEG"}[img.mime]
    arr = rgb(img.path)
    assert arr.shape == (512, 512, 3)
    r, g, b = arr.reshape(-1, 3).mean(axis=0)
    assert r > 150 and g < 80 and b < 80


async def test_image_to_image_black_and_white(experts, sink, media_dir):
    rocket = await upload(sink, media_dir, "rocket.jpg")
    out = await experts.run(
        "image-to-image", MODELS["image-to-image"], {"image": rocket, "text": "make it black and white"}, sink, task_id=1
    )
    arr = rgb(out.files[0].path)
    assert arr.shape[:2] == (427, 640)
    assert np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 1], arr[..., 2])
    # Without a prompt the image is still transformed (raw-bytes wire format).
    out2 = await experts.run("image-to-image", MODELS["image-to-image"], {"image": rocket}, sink, task_id=2)
    assert not np.array_equal(rgb(out2.files[0].path), rgb(rocket.path))


async def test_image_segmentation_overlays_masks_with_legend(experts, sink, media_dir):
    coffee = await upload(sink, media_dir, "coffee.png")
    out = await experts.run("image-segmentation", MODELS["image-segmentation"], {"image": coffee}, sink, task_id=1)
    labels = [s.label for s in out.data.items]
    assert 1 <= len(labels) <= 3 and labels[0] in out.text
    with Image.open(out.files[0].path) as im:
        assert im.width == 600 and im.height > 400  # legend strip below the image


async def test_depth_estimation_returns_a_depth_map(experts, sink, media_dir):
    astro = await upload(sink, media_dir, "astronaut.png")
    out = await experts.run("depth-estimation", MODELS["depth-estimation"], {"image": astro}, sink, task_id=1)
    arr = rgb(out.files[0].path)
    assert arr.shape == (512, 512, 3)
    assert arr[-50:].mean() > arr[:50].mean()  # the stand-in's map is nearer at the bottom


@pytest.mark.parametrize("task", ["visual-question-answering", "document-question-answering"])
async def test_image_question_answering(experts, sink, media_dir, task):
    doc = await upload(sink, media_dir, "text.png")
    out = await experts.run(task, MODELS[task], {"image": doc, "text": "What does it say?"}, sink, task_id=1)
    assert "What does it say?" in out.text and "448x172" in out.text
    assert out.data.items[0].answer == out.text


async def test_controlnet_tasks(experts, sink, media_dir, standin):
    cat = await upload(sink, media_dir, "chelsea.png")
    edges = await LocalRunner(pipeline_config(Settings()).output).run("canny-control", LOCAL_MODEL, {"image": cat}, sink, task_id=1)
    assert standin.records == [], "canny-control is computed locally"
    arr = rgb(edges.files[0].path)
    assert arr.shape == (300, 451, 3)
    values = set(np.unique(arr))
    assert values <= {0, 255} and 255 in values and 0 in values
    pose = await experts.run("openpose-control", MODELS["openpose-control"], {"image": cat}, sink, task_id=2)
    assert pose.files[0].kind == "image"
    drawn = await experts.run(
        "canny-text-to-image", MODELS["canny-text-to-image"], {"image": edges.files[0], "text": "a blue cat"}, sink, task_id=3
    )
    arr = rgb(drawn.files[0].path)
    assert arr.shape == (300, 451, 3)
    r, g, b = arr.reshape(-1, 3).mean(axis=0)
    assert b > r and b > g


# -- audio and video -----------------------------------------------------------------------------


async def test_text_to_speech_then_speech_recognition(experts, sink, standin):
    text = "Hello from the sandbox, this is a test."
    out = await experts.run("text-to-speech", MODELS["text-to-speech"], {"text": text}, sink, task_id=1)
    (speech,) = out.files
    assert speech.kind == "audio" and speech.mime == "audio/wav"
    with wave.open(str(speech.path)) as w:
        seconds = w.getnframes() / w.getframerate()
    assert seconds > 0.5
    heard = await experts.run("automatic-speech-recognition", MODELS["automatic-speech-recognition"], {"audio": speech}, sink, task_id=2)
    assert heard.text == sent_text(standin).strip() and heard.files == []


async def test_speech_recognition_of_real_speech_is_labelled(experts, sink, media_dir, standin):
    ogg = await upload(sink, media_dir, "speech_cat_request.ogg")
    out = await experts.run("automatic-speech-recognition", MODELS["automatic-speech-recognition"], {"audio": ogg}, sink, task_id=1)
    assert out.text == sent_text(standin).strip()


async def test_audio_to_audio_and_classification(experts, sink, media_dir, standin):
    mp3 = await upload(sink, media_dir, "speech_weather.mp3")
    out = await experts.run("audio-to-audio", MODELS["audio-to-audio"], {"audio": mp3}, sink, task_id=1)
    (clean,) = out.files
    with wave.open(str(clean.path)) as w:
        assert 4.5 < w.getnframes() / w.getframerate() < 5.5
    cls = await experts.run("audio-classification", MODELS["audio-classification"], {"audio": mp3}, sink, task_id=2)
    assert {x.label for x in cls.data.items} == {x["label"] for x in json.loads(standin.records[-1].answer)}


async def test_text_to_video_is_a_real_mp4(experts, sink, decoder):
    out = await experts.run("text-to-video", MODELS["text-to-video"], {"text": "a green rocket"}, sink, task_id=1)
    (video,) = out.files
    assert video.kind == "video" and video.mime == "video/mp4"
    info = await probe(video.path, decoder)
    stream = next(s for s in info["streams"] if s["codec_type"] == "video")
    assert (stream["width"], stream["height"]) == (160, 128)
    assert float(info["format"]["duration"]) > 1.0


# Arguments a user could give each kind of task (texts that the task needs in its own shape).
SAMPLE_TEXT = {
    "question-answering": {"text": "Where do I live?", "context": "My name is Clara. I live in Berkeley."},
    "sentence-similarity": {"text": "a cat sits on the mat", "context": "a cat sits on the rug\nstocks fell"},
    "tabular-classification": {"text": "alcohol,acidity\n9.4,0.7\n12.6,0.9\n"},
    "fill-mask": {"text": "Paris is the [MASK] of France."},
}


async def decodes(resource, decoder) -> bool:
    if resource.kind == "image":
        with Image.open(resource.path) as im:
            im.load()
            return im.width > 0 and im.height > 0
    info = await probe(resource.path, decoder)
    return any(s["codec_type"] == resource.kind for s in info["streams"])


@pytest.mark.parametrize("task", sorted(TASKS))
async def test_every_task_has_a_working_path(experts, sink, media_dir, decoder, task):
    """Each registry entry runs end to end through the real client against the stand-in and yields
    an output of every modality its entry declares (text, or a file that decodes)."""
    spec = TASKS[task]
    args: dict = dict(SAMPLE_TEXT.get(task, {}))
    for key, kind in spec.required.items():
        if key in args:
            continue
        if kind == "text":
            args[key] = "a red balloon over a green field"
        elif kind == "image":
            args[key] = await upload(sink, media_dir, "chelsea.png")
        elif kind == "audio":
            args[key] = await upload(sink, media_dir, "speech_weather.mp3")
        elif kind == "video":
            args[key] = await upload(sink, media_dir, "rocket_speech.mp4")
    runner = LocalRunner(pipeline_config(Settings()).output) if spec.local else experts
    out = await runner.run(task, LOCAL_MODEL if spec.local else MODELS[task], args, sink, task_id=7)
    for kind in spec.outputs:
        if kind == "text":
            assert out.text and out.text.strip(), task
        else:
            files = [f for f in out.files if f.kind == kind]
            assert files and all([await decodes(f, decoder) for f in files]), task
    if out.data is not None:
        json.dumps(out.data.to_json())  # the typed data has a JSON view


async def test_other_controlnet_conditions(experts, sink, media_dir):
    cat = await upload(sink, media_dir, "chelsea.png")
    for task in sorted(t for t in TASKS if t.endswith(("-control", "-text-to-image")) and not TASKS[t].local):
        args = {"image": cat} if task.endswith("-control") else {"image": cat, "text": "a yellow house"}
        out = await experts.run(task, MODELS[task], args, sink, task_id=9)
        assert out.files[0].kind == "image", task


# -- failures and retries ------------------------------------------------------------------------


async def test_retries_429_then_succeeds(experts, sink, standin):
    model = MODELS["summarization"]
    standin.faults[model] = [429]
    out = await experts.run("summarization", model, {"text": "One. Two."}, sink, task_id=1)
    assert out.text == sent_text(standin).strip()
    assert [r.status for r in standin.records] == [429, 200]


async def test_503_waits_estimated_time_then_succeeds(experts, sink, standin):
    standin.estimated_time = 0.25
    standin.faults[MODELS["text-classification"]] = [503]
    t0 = time.monotonic()
    out = await experts.run("text-classification", MODELS["text-classification"], {"text": "good"}, sink, task_id=2)
    first, second = standin.records
    assert out.data.items[0].label == max(json.loads(second.answer)[0], key=lambda x: x["score"])["label"]
    assert first.status == 503 and second.status == 200
    assert second.start - first.end >= 0.2  # waited min(estimated_time 0.25, backoff_max 0.3)
    assert time.monotonic() - t0 < 2


async def test_gives_up_after_max_attempts(experts, sink, standin, caplog):
    caplog.set_level("DEBUG")
    model = MODELS["translation"]
    standin.faults[model] = [503, 500, 503, 503]
    with pytest.raises(ExpertError) as ei:
        await experts.run("translation", model, {"text": "Bonjour"}, sink, task_id=1)
    err = ei.value
    assert err.retryable and err.reason == "loading"
    assert len(standin.records) == 3
    assert TOKEN not in err.user_message and TOKEN not in str(err)
    assert "retrying" in caplog.text and TOKEN not in caplog.text


async def test_gone_model_is_not_retried(experts, sink, standin):
    model = MODELS["translation"]
    standin.gone.add(model)
    with pytest.raises(ExpertError) as ei:
        await experts.run("translation", model, {"text": "Bonjour"}, sink, task_id=1)
    assert ei.value.reason == "gone" and not ei.value.retryable
    assert len(standin.records) == 1
    assert "HTTP 404" in ei.value.user_message


async def test_refused_request(experts, sink, standin):
    standin.faults[MODELS["translation"]] = [401]
    with pytest.raises(ExpertError) as ei:
        await experts.run("translation", MODELS["translation"], {"text": "Bonjour"}, sink, task_id=1)
    assert ei.value.reason == "refused" and not ei.value.retryable


async def test_timeout_when_latency_exceeds_task_timeout(standin, sink):
    standin.task_of["slow/model"] = "summarization"
    standin.latency["slow/model"] = 2.0
    ex = HubRunner(pipeline_config(Settings(inference=dict(token=TOKEN, base_url=standin.url, task_timeout=0.3, max_attempts=2, backoff_max=0.05))))
    try:
        t0 = time.monotonic()
        with pytest.raises(ExpertError) as ei:
            await ex.run("summarization", "slow/model", {"text": "x"}, sink, task_id=1)
        assert ei.value.reason == "timeout" and ei.value.retryable
        assert time.monotonic() - t0 < 1.5  # two tries of 0.3 s, no more
        assert "0.3 seconds" in ei.value.user_message
    finally:
        await ex.aclose()


async def test_media_argument_must_be_a_resource(experts, sink, standin, media_dir):
    with pytest.raises(ExpertError) as ei:
        await experts.run("image-to-text", MODELS["image-to-text"], {"image": str(media_dir / "chelsea.png")}, sink, task_id=1)
    assert ei.value.reason == "refused"
    assert standin.records == [], "a path written by the LLM is never read or sent"


async def test_bad_output_is_reported(experts, sink, standin):
    standin.task_of["wrong/model"] = "text-generation"  # answers with text, not an image
    with pytest.raises(ExpertError) as ei:
        await experts.run("text-to-image", "wrong/model", {"text": "a cat"}, sink, task_id=1)
    assert ei.value.reason == "bad_output"


async def test_routing_prefers_dedicated_endpoints(standin, sink):
    standin.task_of["endpoint-alias"] = "summarization"
    ex = HubRunner(pipeline_config(Settings(inference=dict(base_url="https://gateway.invalid/", endpoints={"org/sum": f"{standin.url}/models/endpoint-alias"}))))
    try:
        assert ex.endpoint_for("org/other") == "https://gateway.invalid/models/org/other"
        out = await ex.run("summarization", "org/sum", {"text": "Short text."}, sink, task_id=1)
        assert out.text == sent_text(standin).strip()
        assert [r.model for r in standin.records] == ["endpoint-alias"]
    finally:
        await ex.aclose()
    assert HubRunner(pipeline_config(Settings())).endpoint_for("org/sum") is None


async def test_stand_in_guesses_tasks_from_payloads(standin, sink, media_dir):
    """Models missing from ``task_of`` are served from what the payload looks like."""
    ex = HubRunner(pipeline_config(Settings(inference=dict(base_url=standin.url, max_attempts=1))))
    try:
        qa = await ex.run("question-answering", "unknown/a", {"text": "Who?", "context": "Ann did it."}, sink, task_id=1)
        assert "Ann did it." in qa.text
        img = await ex.run("text-to-image", "unknown/b", {"text": "a yellow sun"}, sink, task_id=2)
        assert img.files[0].kind == "image"
    finally:
        await ex.aclose()
    assert [r.task for r in standin.records] == ["question-answering", "text-to-image"]


async def test_independent_calls_overlap(experts, sink, standin):

    standin.latency["summarization"] = 0.3
    t0 = time.monotonic()
    await asyncio.gather(
        *(experts.run("summarization", MODELS["summarization"], {"text": f"Text {i}."}, sink, task_id=i) for i in range(3))
    )
    assert time.monotonic() - t0 < 0.8
    starts = sorted(r.start for r in standin.records)
    ends = sorted(r.end for r in standin.records)
    assert starts[-1] < ends[0]


@pytest.mark.parametrize("task,args", [("depth-estimation", "image"), ("text-to-video", "text")])
async def test_task_without_provider_support_is_unavailable(sink, media_dir, task, args):
    """hf-inference serves neither task by model id: a clear 'unavailable', no request made."""
    ex = HubRunner(pipeline_config(Settings(inference=dict(provider="hf-inference", token=TOKEN))))
    try:
        value = await upload(sink, media_dir, "chelsea.png") if args == "image" else "a rocket"
        with pytest.raises(ExpertError) as ei:
            await ex.run(task, "org/some-model", {args: value}, sink, task_id=1)
        assert ei.value.reason == "unavailable" and not ei.value.retryable
        assert TOKEN not in str(ei.value)
    finally:
        await ex.aclose()


async def test_stalled_request_times_out_then_retry_succeeds(standin, sink):
    standin.task_of["stall/model"] = "translation"
    standin.faults["stall/model"] = ["timeout"]
    ex = HubRunner(pipeline_config(Settings(inference=dict(base_url=standin.url, task_timeout=0.3, max_attempts=2, backoff_max=0.05))))
    try:
        out = await ex.run("translation", "stall/model", {"text": "Hallo"}, sink, task_id=1)
        assert out.text == sent_text(standin).strip()
    finally:
        await ex.aclose()
    for _ in range(50):  # the stand-in notices the dropped connection a moment later
        if len(standin.records) == 2:
            break
        await asyncio.sleep(0.02)
    assert sorted(r.status for r in standin.records) == [200, 499]


def test_pipeline_config_carries_the_inference_settings():
    """Each [inference] setting reaches the pipeline under its own name, the token in plain text."""
    inf = dict(token="hf_abc", base_url="http://gw", endpoints={"a/b": "http://e"}, task_timeout=9, max_media_bytes=5 << 20,
               max_json_bytes=3 << 20, max_image_pixels=123_456, max_items=7, max_text_chars=999)
    config = pipeline_config(Settings(inference=inf))
    st = config.experts
    assert (st.token, st.base_url, st.endpoints, st.provider) == ("hf_abc", "http://gw", {"a/b": "http://e"}, "auto")
    assert config.execution.task_timeout == 9.0
    assert (st.max_attempts, st.backoff_max) == (Settings().inference.max_attempts, Settings().inference.backoff_max)
    out = config.output
    assert (out.max_media_bytes, out.max_json_bytes) == (5 << 20, 3 << 20)
    assert (out.max_image_pixels, out.max_items, out.max_text_chars) == (123_456, 7, 999)
    assert "hf_abc" not in repr(config)


async def test_video_classification_names_what_the_video_shows(experts, sink, media_dir):
    zoom = await upload(sink, media_dir, "rocket_zoom.mp4")
    out = await experts.run("video-classification", MODELS["video-classification"], {"video": zoom}, sink, task_id=1)
    labels = [x.label for x in out.data.items]
    assert labels == ["moving scene", "still scene"]  # the clip zooms in: its first and last frames differ
    assert out.text.startswith("moving scene")
    still = await stored_upload(sink, _still_video(), "still.mp4", None)
    out = await experts.run("video-classification", MODELS["video-classification"], {"video": still}, sink, task_id=2)
    assert [x.label for x in out.data.items] == ["still scene", "moving scene"]


def _still_video() -> bytes:
    """Two seconds of one grey picture, H.264 in MP4, written with PyAV."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        picture = av.VideoFrame.from_image(Image.new("RGB", (64, 64), (120, 120, 120)))
        for _ in range(20):
            out.mux(stream.encode(picture))
        out.mux(stream.encode(None))
    return buf.getvalue()
