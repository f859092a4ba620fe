"""Real recorded Hugging Face traffic (``tests/fixtures/cassettes/``) through the product.

Each cassette is replayed byte for byte by ``tests/standins/cassettes.py``; the real
``huggingface_hub`` clients (``AsyncInferenceClient`` in :class:`HubRunner`, ``HfApi`` in
:class:`Availability`) and the real ``openai`` client (:class:`pipeline.llm.Controller`) talk to it over HTTP.
Expected values are read from the recordings (the answer bodies), never typed in.
"""

from __future__ import annotations

import base64
import io
import json

import aiohttp
import pytest
from PIL import Image

from bot.incoming import IncomingFile, Message
from bot.service import Service
from bot.settings import Settings, load_settings
from bot.uploads import probe
from pipeline.catalog.availability import Availability
from pipeline.catalog.models import ModelCard
from pipeline.errors import ExpertError
from bot.backends import build_controller, pipeline_config
from pipeline.experts.hub import HubRunner
from pipeline.llm import Usage
from pipeline.planning import plan_schema, validate_plan
from pipeline.tasks import TASKS, languages
from pipeline.tasks.base import Inputs
from pipeline.types import Done
from tests.conftest import stored_upload
from tests.standins.cassettes import CASSETTES, CassetteServer, Interaction, load

TOKEN = "hf_replaySECRETtoken42"


def inference(name: str) -> Interaction:
    """The recorded inference call (the first POST) of cassette ``name``."""
    return next(i for i in load(name) if i.method == "POST")


def model_of(it: Interaction) -> str:
    """Model id of a recorded ``/hf-inference/models/<id>[/v1/chat/completions]`` call."""
    return it.path.split("/models/", 1)[1].removesuffix("/v1/chat/completions")


@pytest.fixture
async def replay():
    servers: list[CassetteServer] = []

    async def start(*names: str) -> CassetteServer:
        server = CassetteServer(list(names))
        await server.__aenter__()
        servers.append(server)
        return server

    yield start
    for s in servers:
        await s.__aexit__(None, None, None)


@pytest.fixture
async def hub_for(replay):
    runners: list[HubRunner] = []

    async def make(*names: str, endpoints: dict[str, str] | None = None) -> tuple[HubRunner, CassetteServer]:
        server = await replay(*names)
        # the recorded path is {router}/hf-inference/models/{id}: the product's gateway routing
        # ({base_url}/models/{id}) with base_url = {server}/hf-inference asks for exactly that path
        hub = HubRunner(pipeline_config(Settings(inference=dict(
            provider="hf-inference", token=TOKEN, base_url=f"{server.url}/hf-inference",
            endpoints={m: server.url + p for m, p in (endpoints or {}).items()}, max_attempts=1,
        ))))
        runners.append(hub)
        return hub, server

    yield make
    for h in runners:
        await h.aclose()


def recorded_image(it: Interaction) -> bytes:
    """The photo the recording sent: raw bytes, or base64 in a JSON body (VQA)."""
    if it.request_body[:1] == b"{":
        body = it.request_json()
        return base64.b64decode(body.get("image") or body["inputs"])
    return it.request_body


# -- experts: every recorded inference answer, normalised as a user expects ---------------------


@pytest.mark.parametrize("name", ["image_classification--hf-inference", "text_classification--hf-inference",
                                  "audio_classification--hf-inference"])
async def test_recorded_labels(hub_for, sink, name):
    it = inference(name)
    task = name.split("--")[0].replace("_", "-")
    hub, server = await hub_for(name)
    if task == "text-classification":
        args: dict = {"text": it.request_json()["inputs"]}
    else:
        kind = TASKS[task].required
        key = next(iter(kind))
        args = {key: await stored_upload(sink, it.request_body, f"input.{'png' if key == 'image' else 'flac'}", None)}
    out = await hub.run(task, model_of(it), args, sink, task_id=1)
    answer = it.json()
    answer = answer[0] if isinstance(answer[0], list) else answer  # text classification: a list of lists
    best_first = sorted(answer, key=lambda x: -x["score"])
    assert [(x.label, x.score) for x in out.data.items] == [(x["label"], x["score"]) for x in best_first]
    assert out.text.startswith(f"{best_first[0]['label']} ({best_first[0]['score']:.2f})")
    # the product sent what the recording's client sent (the same photo / recording / text)
    (sent,) = server.posts()
    assert sent.path == it.path
    if task != "text-classification":
        assert sent.body == it.request_body


@pytest.mark.parametrize("name,task,field", [
    ("image_to_text--hf-inference", "image-to-text", "generated_text"),
    ("automatic_speech_recognition--hf-inference", "automatic-speech-recognition", "text"),
    ("summarization--hf-inference", "summarization", "summary_text"),
    ("translation--hf-inference", "translation", "translation_text"),
])
async def test_recorded_text(hub_for, sink, decoder, name, task, field):
    it = inference(name)
    hub, server = await hub_for(name)
    if task == "image-to-text":
        args: dict = {"image": await stored_upload(sink, it.request_body, "photo.png", None)}
    elif task == "automatic-speech-recognition":
        audio = await stored_upload(sink, it.request_body, "speech.flac", None)
        info = await probe(audio.path, decoder)  # the recorded speech is real audio that decodes
        assert any(s["codec_type"] == "audio" for s in info["streams"]) and float(info["format"]["duration"]) > 1
        args = {"audio": audio}
    else:
        args = {"text": it.request_json()["inputs"]}
    out = await hub.run(task, model_of(it), args, sink, task_id=1)
    answer = it.json()
    expected = (answer[0] if isinstance(answer, list) else answer)[field]
    assert out.text == expected.strip() and out.text
    assert out.files == []
    assert server.posts()[0].path == it.path


async def test_recorded_translation_request_matches_the_recording(hub_for, sink):
    """t5-small takes no language codes: even with the plan naming French, the body sent is the
    recorded one (``{"inputs": ..., "parameters": {}}``) and the answer is the recorded German."""
    it = inference("translation--hf-inference")
    hub, server = await hub_for("translation--hf-inference")
    out = await hub.run("translation", "t5-small", {"text": "Hello world", "tgt_lang": "French"}, sink, task_id=1)
    assert out.text == it.json()[0]["translation_text"]
    assert server.posts()[0].json() == it.request_json()


async def test_recorded_visual_question_answering(hub_for, sink):
    it = inference("visual_question_answering--hf-inference")
    hub, _ = await hub_for("visual_question_answering--hf-inference")
    photo = await stored_upload(sink, recorded_image(it), "photo.png", None)
    out = await hub.run("visual-question-answering", model_of(it), {"image": photo, "text": it.request_json()["question"]},
                        sink, task_id=1)
    assert [(a.answer, a.score) for a in out.data.items] == [(x["answer"], x["score"]) for x in it.json()]
    assert out.text == it.json()[0]["answer"]


async def test_recorded_sentence_similarity(hub_for, sink):
    """The recording's client used the route ``/hf-inference/pipeline/sentence-similarity/{id}``;
    a dedicated endpoint set to that URL makes the product ask for exactly that path."""
    it = inference("sentence_similarity--hf-inference")
    model = it.path.split("/sentence-similarity/", 1)[1]
    sent = it.request_json()
    hub, server = await hub_for("sentence_similarity--hf-inference", endpoints={model: it.path})
    out = await hub.run("sentence-similarity", model,
                        {"text": sent["source_sentence"], "context": "\n".join(sent["sentences"])}, sink, task_id=1)
    assert [(s.sentence, s.score) for s in out.data.items] == list(zip(sent["sentences"], it.json()))
    assert server.posts()[0].json()["inputs"] == {"source_sentence": sent["source_sentence"], "sentences": sent["sentences"]}


async def test_recorded_text_to_image_is_the_real_picture(hub_for, sink):
    """hf-inference answered ``image/jpeg`` although the client asked for ``image/png``; the
    product stores the picture exactly as it came (a JPEG is deliverable: no decode, no
    re-encode), with its recorded size in the description."""
    it = inference("text_to_image--hf-inference")
    assert it.content_type == "image/jpeg"
    hub, _ = await hub_for("text_to_image--hf-inference")
    out = await hub.run("text-to-image", model_of(it), {"text": it.request_json()["inputs"]}, sink, task_id=1)
    (image,) = out.files
    assert image.mime == "image/jpeg" and image.path.suffix == ".jpg"
    assert image.path.read_bytes() == it.body
    with Image.open(io.BytesIO(it.body)) as rec:
        assert f"({rec.width}x{rec.height} pixels)" in image.description


async def test_fal_ai_image_is_stored_at_its_real_size(sink):
    """The fal-ai leg (router URL fixed in huggingface_hub, then a download from v3.fal.media)
    cannot be pointed at a replay without patching the client; its recorded image still goes
    through the text-to-image normaliser as the client hands it over (a PIL image)."""
    interactions = load("text_to_image--fal-ai")
    answer = next(i for i in interactions if i.method == "POST").json()
    download = next(i for i in interactions if i.path.endswith(".png"))
    from pipeline.experts.base import TaskSaver

    with Image.open(io.BytesIO(download.body)) as picture:
        out = await TASKS["text-to-image"].normalise(picture, Inputs(text={"text": answer["prompt"]}), TaskSaver(sink, "text-to-image", 1, pipeline_config(Settings()).output))
    with Image.open(out.files[0].path) as got:
        assert got.size == (answer["images"][0]["width"], answer["images"][0]["height"])


async def test_recorded_chat_completion_as_an_expert(hub_for, sink):
    it = inference("chat_completion_no_stream--hf-inference")
    hub, server = await hub_for("chat_completion_no_stream--hf-inference")
    question = it.request_json()["messages"][-1]["content"]
    out = await hub.run("conversational", model_of(it), {"text": question}, sink, task_id=1)
    assert out.text == it.json()["choices"][0]["message"]["content"]
    assert server.posts()[0].path == it.path


@pytest.mark.parametrize("name", ["chat_completion_no_stream--hf-inference", "chat_completion_with_stream--hf-inference"])
async def test_recorded_chat_completion_as_the_controller(replay, name):
    """A Hugging Face chat model as the controller LLM (OpenAI-compatible route): the answer, or
    the streamed deltas, reach the product as recorded."""
    it = inference(name)
    server = await replay(name)
    ctl = build_controller(Settings(llm=dict(model=model_of(it), base_url=server.url + it.path.removesuffix("/chat/completions"),
                                             api_key=TOKEN, max_retries=0)))
    try:
        messages = it.request_json()["messages"]
        if it.request_json()["stream"]:
            got = "".join([d async for d in ctl.stream_text(messages, stage="response-generation", usage=Usage())])
            events = [json.loads(line[6:]) for line in it.body.decode().splitlines() if line.startswith("data: {")]
            expected = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
        else:
            got = await ctl.complete_text(messages, stage="response-generation", usage=Usage())
            expected = it.json()["choices"][0]["message"]["content"]
    finally:
        await ctl.aclose()
    assert got == expected and got.startswith("Deep")


# -- availability: the recorded Hub model-info answers ------------------------------------------

# model -> providers that serve it, as each recording shows: the fal-ai one carries an
# inferenceProviderMapping (nebius only "staging"); the others are the Hub's older answer with
# "inference": "warm" and no mapping, and their recorded hf-inference call answered 200.
SERVED = {
    "black-forest-labs/FLUX.1-dev": ("fal-ai", "hf-inference", "replicate", "together"),
    **{model_of(inference(n)): ("hf-inference",) for n in (
        "image_classification--hf-inference", "image_to_text--hf-inference", "automatic_speech_recognition--hf-inference",
        "audio_classification--hf-inference", "summarization--hf-inference", "text_classification--hf-inference",
        "text_to_image--hf-inference", "visual_question_answering--hf-inference", "translation--hf-inference",
        "chat_completion_no_stream--hf-inference")},
    "sentence-transformers/all-MiniLM-L6-v2": ("hf-inference",),
}


def test_served_table_covers_every_recorded_model_info():
    recorded = {json.loads(i.body)["id"] for p in CASSETTES.glob("*.yaml") for i in load(p.name)
                if i.method == "GET" and "/api/models/" in i.path and i.status == 200}
    assert recorded == (set(SERVED) - {"t5-small"}) | {"google-t5/t5-small"}


@pytest.mark.parametrize("provider", ["hf-inference", "fal-ai", "nebius", "auto"])
async def test_availability_reads_the_recorded_model_info(replay, provider):
    server = await replay(*(p.name for p in CASSETTES.glob("*.yaml")))
    av = Availability(provider=provider, base_url=None, endpoints={}, token=None, hub_endpoint=server.url)
    cards = [ModelCard(m, "x", 1, 1, "", None) for m in [*SERVED, "someone/never-recorded"]]
    served = {c.id for c in await av.filter(cards)}
    expected = {m for m, ps in SERVED.items() if provider in ps or (provider == "auto" and ps)}
    assert served == expected
    for model, providers in SERVED.items():
        assert av.looked_up(model) == providers
    assert av.looked_up("someone/never-recorded") == ()
    # the product asked the Hub for the provider mapping, and followed t5-small's recorded redirect
    asked = {r.path: r for r in server.received}
    assert asked["/api/models/black-forest-labs/FLUX.1-dev"].query == {"expand": ["inferenceProviderMapping"]}
    assert asked["/api/models/t5-small"].status == 307 and "/api/models/google-t5/t5-small" in asked


# -- translation languages ----------------------------------------------------------------------


@pytest.mark.parametrize("request_text,expected", [
    ("Translate this from German to English", {"src_lang": "German", "tgt_lang": "English"}),
    ("translate 'I went to Paris' into French", {"tgt_lang": "French"}),
    ("Give me an English to Spanish translation of: good night", {"src_lang": "English", "tgt_lang": "Spanish"}),
    ("How do you say thank you in Japanese?", {"tgt_lang": "Japanese"}),
    ("Translate it to French and to German", {}),
    ("Translate this sentence", {}),
])
def test_languages_from_the_request(request_text, expected):
    assert languages.from_request(request_text) == expected


@pytest.mark.parametrize("model,expected", [
    ("facebook/mbart-large-50-many-to-many-mmt", {"src_lang": "de_DE", "tgt_lang": "fr_XX"}),
    ("http://gw/models/facebook/nllb-200-distilled-600M", {"src_lang": "deu_Latn", "tgt_lang": "fra_Latn"}),
    ("facebook/m2m100_418M", {"src_lang": "de", "tgt_lang": "fr"}),
    ("Helsinki-NLP/opus-mt-de-fr", {}),
    ("t5-small", {}),
])
def test_language_codes_by_model_family(model, expected):
    assert languages.model_codes(model, "de", "fr") == expected


def test_plan_takes_languages_from_the_request_unless_it_names_them():
    raw = [{"task": "translation", "id": 0, "dep": [-1], "args": {"text": "Guten Morgen"}}]
    (task,) = validate_plan(raw, available={"translation"}, resources=[], request_text="Translate 'Guten Morgen' from German to English")
    assert task.args == {"text": "Guten Morgen", "src_lang": "German", "tgt_lang": "English"}
    raw[0]["args"]["tgt_lang"] = "fr"
    (task,) = validate_plan(raw, available={"translation"}, resources=[], request_text="from German to English")
    assert task.args["tgt_lang"] == "fr" and task.args["src_lang"] == "German"
    props = plan_schema({"translation"})["properties"]["tasks"]["items"]["properties"]["args"]["properties"]
    assert {"src_lang", "tgt_lang"} <= set(props)  # structured output lets the controller write them


@pytest.mark.parametrize("model,src,tgt,sent", [
    ("facebook/mbart-large-50-many-to-many-mmt", "German", "French", "(src_lang=de_DE tgt_lang=fr_XX)"),
    ("facebook/mbart-large-50-many-to-many-mmt", None, "fr_XX", "(src_lang=en_XX tgt_lang=fr_XX)"),
    ("facebook/nllb-200-distilled-600M", "de", "French", "(src_lang=deu_Latn tgt_lang=fra_Latn)"),
    ("Helsinki-NLP/opus-mt-en-fr", "English", "French", "translation of:"),
])
async def test_languages_arrive_as_parameters(standin, sink, model, src, tgt, sent):
    standin.task_of[model] = "translation"
    hub = HubRunner(pipeline_config(Settings(inference=dict(base_url=standin.url, max_attempts=1))))
    try:
        args = {"text": "Guten Morgen", "tgt_lang": tgt, **({"src_lang": src} if src else {})}
        out = await hub.run("translation", model, args, sink, task_id=1)
    finally:
        await hub.aclose()
    assert out.text == json.loads(standin.records[-1].answer)[0]["translation_text"]
    assert sent in out.text
    if "opus" in model:
        assert "src_lang" not in out.text


@pytest.mark.parametrize("args,message", [
    ({"text": "Hello", "tgt_lang": "Greek"}, "cannot translate into Greek"),
    ({"text": "Bonjour", "tgt_lang": "English"}, "which language the text is in"),
    ({"text": "Hello", "tgt_lang": "Klingon"}, "do not know the language 'Klingon'"),
])
async def test_languages_a_model_cannot_take_are_refused_before_any_call(standin, sink, args, message):
    hub = HubRunner(pipeline_config(Settings(inference=dict(base_url=standin.url, max_attempts=1))))
    try:
        with pytest.raises(ExpertError) as ei:
            await hub.run("translation", "facebook/mbart-large-50-many-to-many-mmt", args, sink, task_id=1)
    finally:
        await hub.aclose()
    assert ei.value.reason == "refused" and message in ei.value.user_message
    assert standin.records == []


# -- the whole pipeline on recorded answers -----------------------------------------------------

E2E = {  # cassette -> (task, its arguments besides files)
    "image_classification--hf-inference": ("image-classification", {}),
    "image_to_text--hf-inference": ("image-to-text", {}),
    "visual_question_answering--hf-inference": ("visual-question-answering", {"text": "Who's in the picture?"}),
    "automatic_speech_recognition--hf-inference": ("automatic-speech-recognition", {}),
    "translation--hf-inference": ("translation", {"text": "Hello world"}),
}


@pytest.mark.parametrize("name", sorted(E2E))
async def test_recorded_results_reach_the_response_stage(sandbox, replay, tmp_path, name):
    it = inference(name)
    task, args = E2E[name]
    server = await replay(name)
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(json.dumps({"id": model_of(it), "task": task, "downloads": 1, "likes": 1, "description": "recorded",
                                   "providers": None, "tags": []}) + "\n")
    files = []
    kind = next((k for k, v in TASKS[task].required.items() if v != "text"), None)
    if kind == "image":
        files = [IncomingFile(recorded_image(it), name="photo.png")]
        args = {**args, "image": "image-1"}
    elif kind == "audio":
        files = [IncomingFile(it.request_body, name="speech.flac")]
        args = {**args, "audio": "audio-1"}
    sandbox.controller.script.append({"content": json.dumps({"tasks": [{"task": task, "id": 0, "dep": [-1], "args": args}]})})
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update({"base_url": f"{server.url}/hf-inference", "selection": "top", "controller_tasks": [],
                                   "max_attempts": 1})
    overrides["catalog"] = {"path": str(catalog)}
    service = await Service.create(load_settings(env={}, overrides=overrides))
    try:
        events = [e async for e in service.handle(Message(f"Please do {task} for me", files))]
    finally:
        await service.close()
    record = events[-1].record if isinstance(events[-1], Done) else None
    assert record is not None and record.results[0].status == "ok", record and record.results
    answer = it.json()
    first = answer[0] if isinstance(answer, list) else answer
    expected = first.get("label") or first.get("answer") or first.get("generated_text") or first.get("text") \
        or first.get("translation_text")
    assert record.results[0].output.text.startswith(expected.strip())
    (response_call,) = sandbox.controller.calls("response-generation")
    prompt = json.dumps(response_call.body["messages"], ensure_ascii=False)
    assert json.dumps(expected.strip(), ensure_ascii=False)[1:-1] in prompt
    assert model_of(it) in prompt


# -- the sandbox stand-in answers in the recorded shapes ----------------------------------------

CONTRACT = {  # cassette -> task and arguments (files come from the recorded request)
    "image_classification--hf-inference": "image-classification",
    "image_to_text--hf-inference": "image-to-text",
    "visual_question_answering--hf-inference": "visual-question-answering",
    "automatic_speech_recognition--hf-inference": "automatic-speech-recognition",
    "audio_classification--hf-inference": "audio-classification",
    "summarization--hf-inference": "summarization",
    "translation--hf-inference": "translation",
    "text_classification--hf-inference": "text-classification",
    "text_to_image--hf-inference": "text-to-image",
    "chat_completion_no_stream--hf-inference": "conversational",
}


def shape(value):
    """The structure of a JSON value: keys and element shapes, with leaf types (numbers as one type)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


@pytest.mark.parametrize("name", sorted(CONTRACT))
async def test_sandbox_answers_like_the_recording(hub_for, standin, sink, name):
    """The request the product sends is sent to the sandbox too: same content type, same JSON
    shape (field names, nesting, types) or an image of the same format as the recording."""
    it = inference(name)
    task = CONTRACT[name]
    hub, server = await hub_for(name)
    if task in ("image-classification", "image-to-text", "visual-question-answering"):
        args: dict = {"image": await stored_upload(sink, recorded_image(it), "photo.png", None)}
        if task == "visual-question-answering":
            args["text"] = it.request_json()["question"]
    elif task in ("automatic-speech-recognition", "audio-classification"):
        args = {"audio": await stored_upload(sink, it.request_body, "speech.flac", None)}
    elif task == "conversational":
        args = {"text": it.request_json()["messages"][-1]["content"]}
    else:
        args = {"text": it.request_json()["inputs"]}
    await hub.run(task, model_of(it), args, sink, task_id=1)
    (sent,) = server.posts()
    standin.task_of[model_of(it)] = task
    headers = {k: v for k, v in sent.headers.items() if k.lower() in ("content-type", "accept")}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{standin.url}{sent.path.removeprefix('/hf-inference')}", data=sent.body, headers=headers) as r:
            assert r.status == 200, await r.text()
            ctype, body = r.headers["Content-Type"], await r.read()
    assert ctype == it.content_type
    if ctype.startswith("image/"):
        with Image.open(io.BytesIO(body)) as a, Image.open(io.BytesIO(it.body)) as b:
            assert a.format == b.format
    else:
        assert shape(json.loads(body)) == shape(it.json())


async def test_request_languages_reach_a_many_to_many_model_end_to_end(sandbox, tmp_path):
    """The plan names no language; the request does. mBART-50 gets en_XX -> fr_XX, and the
    response prompt shows the translation the model made with them."""
    model = "facebook/mbart-large-50-many-to-many-mmt"
    sandbox.inference.task_of[model] = "translation"
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(json.dumps({"id": model, "task": "translation", "downloads": 1, "likes": 1, "description": "mBART-50",
                                   "providers": None, "tags": []}) + "\n")
    sandbox.controller.script.append({"content": json.dumps(
        {"tasks": [{"task": "translation", "id": 0, "dep": [-1], "args": {"text": "Hello world"}}]})})
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update({"selection": "top", "controller_tasks": []})
    overrides["catalog"] = {"path": str(catalog)}
    service = await Service.create(load_settings(env={}, overrides=overrides))
    try:
        events = [e async for e in service.handle(Message("Translate 'Hello world' into French, please", []))]
    finally:
        await service.close()
    record = events[-1].record
    assert record.tasks[0].args == {"text": "Hello world", "tgt_lang": "French"}
    out = record.results[0].output.text
    assert out == json.loads(sandbox.inference.records[-1].answer)[0]["translation_text"]
    assert "(src_lang=en_XX tgt_lang=fr_XX)" in out
    (response_call,) = sandbox.controller.calls("response-generation")
    assert "tgt_lang=fr_XX" in json.dumps(response_call.body["messages"])
