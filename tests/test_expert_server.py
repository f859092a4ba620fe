"""The expert server end to end: tiny random checkpoints in a real Hugging Face cache layout, the
real server (``python -m expert_server``, uvicorn on 127.0.0.1) and the real
``huggingface_hub.AsyncInferenceClient`` calling it as a URL model. Nothing touches the network:
the server runs with ``HF_HUB_OFFLINE=1``."""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

import httpx2  # noqa: E402
from huggingface_hub import AsyncInferenceClient  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError  # noqa: E402
from PIL import Image  # noqa: E402

from benchmarks.harness import tinymodels  # noqa: E402
from benchmarks.harness.realparts import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MEDIA = ROOT / "tests" / "fixtures" / "media"
BIG = 3  # ViTs of about 20 MB each for the eviction test (two fit the 50 MB budget)


def _big_vit(out: Path) -> None:
    tinymodels.vit(out, layers=6, hidden=320)


EXTRA = {f"tiny/vit-big-{i}": (_big_vit, "image-classification") for i in range(BIG)}
EXTRA["tiny/vit-once"] = (tinymodels.vit, None)
EXTRA["tiny/vit-oom"] = (tinymodels.vit, "image-classification")


class Server:
    """``python -m expert_server`` in a subprocess on a free port."""

    def __init__(self, cache: Path, config: str, log: Path, *, wait: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = log.with_suffix(".toml")
        cfg.write_text(config)
        env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "expert_server", "--port", str(self.port), "--device", "cpu",
                                      "--config", str(cfg)], cwd=ROOT, env=env, stdout=open(log, "wb"),  # noqa: SIM115
                                     stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 180) -> None:
        """Return once ``/readyz`` answers 200.

        Raises:
            RuntimeError: the process exited or did not get ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the expert server did not start:\n{self.log.read_text()[-3000:]}")

    def models(self) -> dict[str, dict]:
        doc = httpx2.get(f"{self.url}/models", timeout=10).json()
        return {m["id"]: m for m in doc["models"]}

    def rss(self) -> int:
        from expert_server.memory import rss_bytes

        return rss_bytes(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hf-cache")
    tinymodels.build_cache(cache, {**tinymodels.REPOS, **EXTRA})
    return cache


@pytest.fixture(scope="module")
def server(tiny_cache, tmp_path_factory):
    srv = Server(tiny_cache, 'controlnet_base = "tiny/stable-diffusion"\nmemory_budget = "50MB"\n'
                 'min_free_memory_for = {"tiny/vit-oom" = "1PB"}\n'
                 'default_parameters = {"canny-text-to-image" = {"num_inference_steps" = 2}}\n', tmp_path_factory.mktemp("srv") / "server.log")
    yield srv
    srv.stop()


def _url(server: Server, model: str) -> str:
    return f"{server.url}/models/{model}"


def _small_png(size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.open(MEDIA / "chelsea.png").convert("RGB").resize(size).save(buf, "PNG")
    return buf.getvalue()


def _labels(out) -> None:
    assert out and all(isinstance(x.label, str) and 0 <= x.score <= 1 for x in out)


def _wav(data: bytes) -> None:
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000 and w.getnframes() > 0 and w.getnchannels() == 1


def _image(size):
    def check(img) -> None:
        assert img.format == "PNG" and img.size == size
    return check


CASES = {
    "image-classification": (lambda c, u: c.image_classification(MEDIA / "chelsea.png", model=u("tiny/vit-classifier")),
                             lambda out: (_labels(out), {x.label for x in out} <= {"cat", "dog", "rocket", "coffee"})),
    "text-classification": (lambda c, u: c.text_classification("the cat is happy", model=u("tiny/bert-sentiment")),
                            lambda out: (_labels(out), {x.label for x in out} == {"negative", "positive"})),
    "token-classification": (lambda c, u: c.token_classification("the cat sat in paris", model=u("tiny/bert-ner")),
                             lambda out: all(x.word and x.start is not None for x in out)),
    "fill-mask": (lambda c, u: c.fill_mask("the cat [MASK] on the mat", model=u("tiny/bert-mlm")),
                  lambda out: all(x.sequence.startswith("the cat") for x in out)),
    "question-answering": (lambda c, u: c.question_answering(question="where is the cat", context="the cat sat in paris",
                                                             model=u("tiny/bert-squad")),
                           lambda out: "the cat sat in paris"[out.start:out.end] == out.answer != ""),
    "sentence-similarity": (lambda c, u: c.sentence_similarity("the cat", ["the dog", "a red city"], model=u("tiny/bert-embed")),
                            lambda out: len(out) == 2 and all(-1 <= x <= 1.0001 for x in out)),
    "text-generation": (lambda c, u: c.text_generation("the cat", max_new_tokens=4, model=u("tiny/gpt2")),
                        lambda out: isinstance(out, str) and out.startswith("the cat")),
    "summarization": (lambda c, u: c.summarization("the cat sat on the mat", model=u("tiny/t5-summarize")),
                      lambda out: isinstance(out.summary_text, str)),
    "translation": (lambda c, u: c.translation("the cat sat on the mat", model=u("tiny/t5-translate")),
                    lambda out: isinstance(out.translation_text, str)),
    "object-detection": (lambda c, u: c.object_detection(MEDIA / "chelsea.png", threshold=0.0, model=u("tiny/detr")),
                         lambda out: out and all(0 <= x.box.xmin <= x.box.xmax and x.label in ("cat", "dog") for x in out)),
    "image-segmentation": (lambda c, u: c.image_segmentation(MEDIA / "chelsea.png", model=u("tiny/segformer")),
                           lambda out: out and all(x.mask.size == Image.open(MEDIA / "chelsea.png").size for x in out)),
    "automatic-speech-recognition": (lambda c, u: c.automatic_speech_recognition(MEDIA / "speech_weather.mp3",
                                                                                 model=u("tiny/wav2vec2-asr")),
                                     lambda out: isinstance(out.text, str)),
    "audio-classification": (lambda c, u: c.audio_classification(MEDIA / "speech_cat_request.ogg",
                                                                 model=u("tiny/wav2vec2-audio-cls")),
                             lambda out: (_labels(out), {x.label for x in out} <= {"speech", "music", "silence"})),
    "zero-shot-classification": (lambda c, u: c.zero_shot_classification("the cat sat", ["animal", "city"],
                                                                         model=u("tiny/bert-nli")),
                                 lambda out: {x.label for x in out} == {"animal", "city"}),
    "image-to-text": (lambda c, u: c.image_to_text(MEDIA / "chelsea.png", model=u("tiny/vit-gpt2-caption")),
                      lambda out: isinstance(out.generated_text, str)),
    "visual-question-answering": (lambda c, u: c.visual_question_answering(MEDIA / "chelsea.png", "what is it",
                                                                           top_k=2, model=u("tiny/vilt-vqa")),
                                  lambda out: len(out) == 2 and all(x.answer in ("yes", "no", "cat", "two") for x in out)),
    "text-to-speech": (lambda c, u: c.text_to_speech("the cat sat on the mat", model=u("tiny/vits-tts")), _wav),
    "text-to-image": (lambda c, u: c.text_to_image("a red cat", num_inference_steps=2, width=48, height=32,
                                                   model=u("tiny/stable-diffusion")), _image((48, 32))),
    "image-to-image": (lambda c, u: c.image_to_image(_small_png(), prompt="a red cat", num_inference_steps=2,
                                                     model=u("tiny/stable-diffusion")), _image((64, 48))),
    "canny-text-to-image": (lambda c, u: c.image_to_image(_small_png((40, 56)), prompt="a cat", num_inference_steps=2,
                                                          model=u("tiny/sd-controlnet-canny")), _image((40, 56))),
    "canny-control": (lambda c, u: c.image_to_image(MEDIA / "chelsea.png", model=u("canny-control")),
                      _image(Image.open(MEDIA / "chelsea.png").size)),
    "depth-control": (lambda c, u: c.image_to_image(_small_png(), model=u("depth-control")), _image((64, 48))),
    "seg-control": (lambda c, u: c.image_to_image(_small_png(), model=u("seg-control")), _image((64, 48))),
}


@pytest.mark.parametrize("task", list(CASES))
async def test_every_task_answers_what_the_client_parses(server, task):
    call, check = CASES[task]
    async with AsyncInferenceClient(timeout=120) as client:
        out = await call(client, lambda m: _url(server, m))
    check(out)
    served = {m["task"] for m in server.models().values()}
    assert task in served or task == "image-to-image"  # a text-to-image checkpoint answers image-to-image too


async def test_depth_estimation_and_hed_answer_png(server):
    async with httpx2.AsyncClient(timeout=60) as http:
        r = await http.post(_url(server, "tiny/dpt-depth"), content=_small_png(), headers={"Content-Type": "image/png"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(r.content)).size == (64, 48)


async def test_text_to_video_answers_an_mp4(server):
    import av

    async with httpx2.AsyncClient(timeout=120) as http:
        r = await http.post(_url(server, "tiny/text-to-video"),
                            json={"inputs": "a cat", "parameters": {"num_inference_steps": 2}})
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(r.content)) as container:
        assert container.streams.video[0].frames > 1


async def test_models_lists_tasks_states_and_refusals(server):
    listed = server.models()
    # inferred from config.json (no card): BertForSequenceClassification, Wav2Vec2ForCTC, DETR, DPT, SD, ControlNet
    assert listed["tiny/bert-sentiment"]["task"] == "text-classification"
    assert listed["tiny/wav2vec2-asr"]["task"] == "automatic-speech-recognition"
    assert listed["tiny/wav2vec2-audio-cls"]["task"] == "audio-classification"
    assert listed["tiny/detr"]["task"] == "object-detection"
    assert listed["tiny/stable-diffusion"]["task"] == "text-to-image"
    assert listed["tiny/sd-controlnet-canny"]["task"] == "canny-text-to-image"
    assert listed["tiny/bert-embed"]["task"] == "sentence-similarity"  # from its card
    # the HED annotator's real network (about 59 MB) can never fit the 50 MB budget
    hed = listed["hed-control"]
    assert hed["state"] == "refused" and "budget" in hed["reason"] and hed["library"] == "controlnet_aux"
    assert {m["state"] for m in listed.values()} <= {"loaded", "on_disk", "refused"}
    async with AsyncInferenceClient(timeout=30) as client:
        with pytest.raises(HfHubHTTPError) as e:
            await client.image_to_image(_small_png(), model=_url(server, "hed-control"))
    assert e.value.response.status_code == 507 and "never loaded here" in str(e.value)


async def test_loading_past_the_budget_evicts_the_least_recently_used(server):
    async with AsyncInferenceClient(timeout=60) as client:
        for i in range(BIG):
            await client.image_classification(_small_png(), model=_url(server, f"tiny/vit-big-{i}"))
            if i == 1:
                rss_two = server.rss()
    listed = server.models()
    size = listed["tiny/vit-big-0"]["size_bytes"]
    assert listed["tiny/vit-big-2"]["state"] == "loaded" and listed["tiny/vit-big-0"]["state"] == "on_disk"
    assert listed["tiny/vit-big-1"]["state"] == "loaded"
    doc = httpx2.get(f"{server.url}/models").json()
    assert doc["memory_used_bytes"] <= doc["memory_budget_bytes"] == 50_000_000
    # the third model took the first one's place: the process did not grow by another model
    assert server.rss() - rss_two < size
    scraped = httpx2.get(f"{server.url}/metrics").text  # what Prometheus reads says so too
    assert float(re.search(r"^hugginggpt_experts_evictions_total (\S+)$", scraped, re.M).group(1)) >= 1
    assert 'hugginggpt_experts_models{state="loaded"}' in scraped


async def test_twenty_simultaneous_first_requests_load_the_model_once(server):
    assert server.models()["tiny/vit-once"]["loads"] == 0
    async with AsyncInferenceClient(timeout=60) as client:
        outs = await asyncio.gather(*(client.image_classification(_small_png(), model=_url(server, "tiny/vit-once"))
                                      for _ in range(20)))
    assert all(out and out[0].label for out in outs)
    assert server.models()["tiny/vit-once"]["loads"] == 1


@pytest.mark.parametrize(("call", "status", "sentence"), [
    (lambda c, u: c.text_classification(" ", model=u("tiny/bert-sentiment")), 400, "Field 'inputs' must be a non-empty string"),
    (lambda c, u: c.image_classification(b"this is not an image", model=u("tiny/vit-classifier")), 400,
     "Field 'inputs' is not an image"),
    (lambda c, u: c.text_generation("the cat", max_new_tokens=100000, model=u("tiny/gpt2")), 400,
     "Field 'parameters.max_new_tokens' must be at most"),
    (lambda c, u: c.question_answering(question="where", context="", model=u("tiny/bert-squad")), 400,
     "Field 'inputs.context' must be a non-empty string"),
    (lambda c, u: c.image_to_image(_small_png(), model=u("tiny/sd-controlnet-canny")), 400, "Field 'parameters.prompt'"),
    (lambda c, u: c.image_classification(MEDIA / "chelsea.png", model=u("nobody/no-such-model")), 404,
     "Model nobody/no-such-model is not served here"),
])
async def test_bad_payloads_and_unknown_models_get_hf_errors(server, call, status, sentence):
    async with AsyncInferenceClient(timeout=30) as client:
        with pytest.raises(HfHubHTTPError) as e:
            await call(client, lambda m: _url(server, m))
    assert e.value.response.status_code == status
    assert e.value.response.json()["error"].startswith(sentence)
    assert sentence in str(e.value)


async def test_out_of_memory_during_inference_is_503_and_the_server_keeps_serving(server):
    async with AsyncInferenceClient(timeout=30) as client:
        with pytest.raises(HfHubHTTPError) as e:
            await client.image_classification(_small_png(), model=_url(server, "tiny/vit-oom"))
        assert e.value.response.status_code == 503 and "ran out of memory" in e.value.response.json()["error"]
        assert server.models()["tiny/vit-oom"]["state"] == "on_disk"  # unloaded
        assert server.models()["tiny/vit-oom"]["loads"] == 1
        out = await client.image_classification(_small_png(), model=_url(server, "tiny/vit-classifier"))
    assert out and httpx2.get(f"{server.url}/healthz").json() == {"status": "ok"}
    log = server.log.read_text()
    assert "ran out of memory" in log and "Traceback" not in log


async def test_a_request_past_its_deadline_is_504(server):
    async with AsyncInferenceClient(timeout=30, headers={"X-Request-Timeout": "0.001"}) as client:
        with pytest.raises(HfHubHTTPError) as e:
            await client.text_to_image("a cat", num_inference_steps=20, model=_url(server, "tiny/stable-diffusion"))
    assert e.value.response.status_code == 504 and "deadline" in e.value.response.json()["error"]


async def test_models_says_how_long_the_server_has_been_idle(server):
    """What ``hugginggpt experts launch`` reads to stop a rented server nobody uses: it grows
    while no model is asked, and a request sets it back."""
    first = httpx2.get(f"{server.url}/models").json()["idle_seconds"]
    await asyncio.sleep(1.2)
    later = httpx2.get(f"{server.url}/models").json()["idle_seconds"]
    assert later >= first + 1
    async with httpx2.AsyncClient(timeout=60) as http:
        r = await http.post(_url(server, "tiny/bert-sentiment"), json={"inputs": "I like it"})
    assert r.status_code == 200 and httpx2.get(f"{server.url}/models").json()["idle_seconds"] < 1 <= later


def test_the_servers_connections_send_each_reply_at_once():
    """``listen`` (the expert server's and ``hugginggpt serve``'s socket): an accepted connection
    has Nagle's algorithm off, else each reply on a kept-alive connection waited 40 ms for the
    client's delayed ACK."""
    import socket

    from expert_server.server import listen

    with listen("127.0.0.1", 0) as sock:
        sock.setblocking(True)
        with socket.create_connection(sock.getsockname()) as client:
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                client.sendall(b"ping")
                assert accepted.recv(4) == b"ping"


def test_health_and_readiness(server):
    assert httpx2.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx2.get(f"{server.url}/readyz").status_code == 200
    doc = httpx2.get(f"{server.url}/models").json()
    assert doc["device"] == "cpu"




# ---------------------------------------------------------------------------------------------
# The real server and the real bot together: `hugginggpt run --sandbox --json` (the sandbox's
# stand-in controller and providers) with [inference] mode = "hybrid" pointing at this server.


def _hugginggpt_run(tmp_path: Path, text: str, experts_url: str) -> dict:
    """``hugginggpt run --sandbox --json TEXT --file chelsea.png`` in hybrid mode; its JSON
    document. The catalog has no provider model for depth estimation or ControlNet."""
    import json

    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(json.dumps({"id": "microsoft/resnet-50", "task": "image-classification", "downloads": 5000,
                                   "likes": 10, "description": "Image classification.", "providers": None,
                                   "tags": []}) + "\n")
    config = tmp_path / "hugginggpt.toml"
    config.write_text(f'[catalog]\npath = "{catalog}"\n\n[inference]\nmode = "hybrid"\nexperts_url = "{experts_url}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "--config", str(config), "run", "--sandbox", "--json", text,
                        "--file", str(MEDIA / "chelsea.png")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_the_bot_reads_every_model_the_server_lists(server):
    from pipeline.catalog.servers import parse_listing
    from pipeline.tasks import TASKS

    doc = httpx2.get(f"{server.url}/models", timeout=10).json()
    listing = parse_listing(server.url, doc)
    # the bot keeps every entry whose task its registry has, field for field; the server also
    # serves pipeline tags the bot does not plan (zero-shot classification), which it leaves out
    assert [(m.id, m.task, m.state, m.reason, m.size_bytes, m.library) for m in listing.models] == \
        [(m["id"], m["task"], m["state"], m["reason"], m["size_bytes"], m["library"]) for m in doc["models"]
         if m["task"] in TASKS]
    assert {m["task"] for m in doc["models"]} - set(TASKS) == {"zero-shot-classification"}
    tasks = {m.id: m.task for m in listing.models}
    assert tasks["tiny/dpt-depth"] == "depth-estimation" and tasks["depth-control"] == "depth-control"
    assert tasks["canny-control"] == "canny-control" and tasks["tiny/sd-controlnet-canny"] == "canny-text-to-image"
    assert listing.device == "cpu"


@pytest.mark.slow
def test_hybrid_runs_depth_estimation_on_the_server_and_the_user_gets_the_map(server, tiny_cache, tmp_path):
    from transformers import pipeline

    doc = _hugginggpt_run(tmp_path, "Estimate the depth of this photo", server.url)
    [task] = doc["tasks"]
    assert task["task"] == "depth-estimation"
    sel, res = doc["selections"][str(task["id"])], doc["results"][str(task["id"])]
    where = f"local {server.url}"
    assert (sel["model"], sel["where"], res["status"], res["where"]) == ("tiny/dpt-depth", where, "ok", where)
    [file] = res["output"]["files"]
    made = np.asarray(Image.open(file["path"]).convert("L"), dtype=int)
    # the map the same checkpoint computes in process for the same photo: the server really ran it
    [snap] = (tiny_cache / "models--tiny--dpt-depth" / "snapshots").iterdir()
    expected = np.asarray(pipeline("depth-estimation", model=str(snap))(Image.open(MEDIA / "chelsea.png"))["depth"],
                          dtype=int)
    assert made.shape == expected.shape == (300, 451) and np.abs(made - expected).max() <= 1


@pytest.mark.slow
def test_hybrid_draws_with_controlnet_on_the_server(server, tmp_path):
    doc = _hugginggpt_run(tmp_path, "Draw a red cat from the edges of this photo", server.url)
    by_task = {t["task"]: str(t["id"]) for t in doc["tasks"]}
    assert set(by_task) == {"canny-control", "canny-text-to-image"}
    where = f"local {server.url}"
    edges, drawing = doc["results"][by_task["canny-control"]], doc["results"][by_task["canny-text-to-image"]]
    # Canny is cheap: the bot runs its own OpenCV Canny in process rather than call a server
    assert (edges["status"], edges["where"]) == ("ok", "in-process")
    assert (drawing["status"], drawing["where"], drawing["model"]) == ("ok", where, "tiny/sd-controlnet-canny")
    edge_map = np.asarray(Image.open(edges["output"]["files"][0]["path"]).convert("L"))
    assert edge_map.shape == (300, 451) and set(np.unique(edge_map)) == {0, 255}  # Canny's edges, from the photo
    assert Image.open(drawing["output"]["files"][0]["path"]).format == "PNG"
