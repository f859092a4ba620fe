"""The sandbox controller, driven by the real ``openai`` SDK over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.controller import ControllerStandIn
from sandbox.heuristics import LABEL, plan_tasks
from pipeline.tasks import TASKS

FIXTURES = Path(__file__).parent / "fixtures"
ALL_TASKS = sorted(TASKS)

CHELSEA = {"id": "image-1", "kind": "image", "name": "chelsea.png", "origin": "user", "turn": 0,
           "description": "photo chelsea.png, 451x300 pixels"}
SPEECH = {"id": "audio-1", "kind": "audio", "name": "speech_cat_request.wav", "origin": "user", "turn": 0}


# ----------------------------------------------------------------------------------------------
# helpers: requests in the shape the pipeline sends (routing headers, tagged blocks)


def headers(stage: str, task: str | None = None) -> dict[str, str]:
    """The routing headers ``pipeline.llm`` sends with a call of ``stage``."""
    out = {"X-HuggingGPT-Stage": stage}
    if task:
        out["X-HuggingGPT-Task"] = task
    return out


def planning(text: str, resources: list[dict] = (), available: list[str] = ALL_TASKS, problem: str | None = None) -> dict:
    """``create()`` keyword arguments (messages and headers) for a task-planning call."""
    user = (
        f"<request>{text}</request>\n<resources>{json.dumps(list(resources))}</resources>\n"
        f"<available_tasks>{json.dumps(list(available))}</available_tasks>"
    )
    if problem:
        user += f"\n<problem>{problem}</problem>"
    messages = [
        {"role": "system", "content": "Plan the request as tasks."},
        {"role": "user", "content": "<request>demo</request>"},
        {"role": "assistant", "content": '{"tasks": []}'},
        {"role": "user", "content": user},
    ]
    return {"messages": messages, "extra_headers": headers("task-planning")}


def selection(task: dict, candidates: list[dict]) -> dict:
    messages = [
        {"role": "system", "content": "Pick one model."},
        {"role": "user", "content": f"<task>{json.dumps(task)}</task>\n<candidates>{json.dumps(candidates)}</candidates>"},
    ]
    return {"messages": messages, "extra_headers": headers("model-selection")}


def responding(request: str, plan: list, selections: dict, results: dict) -> dict:
    messages = [
        {"role": "system", "content": "Answer the user."},
        {
            "role": "user",
            "content": f"<request>{request}</request>\n<plan>{json.dumps(plan)}</plan>\n"
            f"<selections>{json.dumps(selections)}</selections>\n<results>{json.dumps(results)}</results>",
        },
    ]
    return {"messages": messages, "extra_headers": headers("response-generation")}


PLAN_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "plan",
        "strict": True,
        "schema": {"type": "object", "properties": {"tasks": {"type": "array"}}, "required": ["tasks"]},
    },
}


@pytest.fixture
async def ctl():
    async with ControllerStandIn() as server:
        yield server


def client_for(server: ControllerStandIn, **kw) -> openai.AsyncOpenAI:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 10)
    return openai.AsyncOpenAI(base_url=server.base_url, api_key=kw.pop("api_key", "sandbox"), **kw)


async def plan_via(server, text, resources=(), available=ALL_TASKS, **kw) -> list[dict]:
    client = client_for(server)
    r = await client.chat.completions.create(
        model="gpt-test", **planning(text, resources, available), response_format=PLAN_SCHEMA, **kw
    )
    return json.loads(r.choices[0].message.content)["tasks"]


def assert_valid_plan(plan: list[dict], resources: list[dict], available: list[str]) -> None:
    """The checks the pipeline's plan validation makes (docs/how-it-works.md, task planning)."""
    ids = {r["id"] for r in resources}
    kinds = {r["id"]: r["kind"] for r in resources}
    seen: dict[int, str] = {}
    for i, t in enumerate(plan):
        assert set(t) == {"task", "id", "dep", "args"}
        assert t["id"] == i and t["task"] in available, t
        spec = TASKS[t["task"]]
        deps = [d for d in t["dep"] if d != -1]
        assert deps or t["dep"] == [-1], t
        assert all(d in seen for d in deps), t
        assert set(spec.required) <= set(t["args"]) <= set(spec.allowed), t
        for key, value in t["args"].items():
            assert isinstance(value, str) and value, t
            for m in re.finditer(r"<resource>-(\d+)", value):
                n = int(m.group(1))
                assert n in deps and spec.allowed[key] in TASKS[seen[n]].outputs, t
            if spec.allowed[key] != "text" and not value.startswith("<resource>-"):
                assert value in ids and kinds[value] == spec.allowed[key], t
        seen[i] = t["task"]


# ----------------------------------------------------------------------------------------------
# task planning


async def test_plans_the_three_requests_of_the_issue(ctl):
    detail = await plan_via(ctl, "Describe this picture in as much detail as you can", [CHELSEA])
    assert detail == [
        {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
        {"task": "object-detection", "id": 1, "dep": [-1], "args": {"image": "image-1"}},
        {"task": "image-classification", "id": 2, "dep": [-1], "args": {"image": "image-1"}},
    ]
    cat = await plan_via(ctl, "Generate an image of a cat on a red sofa, then tell me what breed it might be")
    assert cat == [
        {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat on a red sofa"}},
        {"task": "image-classification", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
    ]
    voice = await plan_via(ctl, "Transcribe this and read it back in a different voice", [SPEECH])
    assert voice == [
        {"task": "automatic-speech-recognition", "id": 0, "dep": [-1], "args": {"audio": "audio-1"}},
        {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
    ]
    assert [r.stage for r in ctl.requests] == ["task-planning"] * 3


@pytest.mark.parametrize(
    "text, expected",
    [
        ("What is in this picture?", [("image-to-text", "image-2")]),
        ("Detect the objects in the first photo", [("object-detection", "image-1")]),
        ("What breed is the cat in chelsea.png?", [("image-classification", "image-1")]),
        ("Segment image-3", [("image-segmentation", "image-3")]),
        ("Estimate the depth of the previous photo", [("depth-estimation", "image-2")]),
        ("Describe the generated image", [("image-to-text", "image-3")]),
        ("How many people are in this photo?", [("object-detection", "image-3")]),
    ],
)
async def test_resource_choice(ctl, text, expected):
    resources = [
        CHELSEA,
        {"id": "image-2", "kind": "image", "name": "astronaut.png", "origin": "user", "turn": 1},
        {"id": "image-3", "kind": "image", "origin": "task:0", "turn": 1, "description": "generated image"},
    ]
    if text.startswith("What is in"):
        resources = resources[:2]
    plan = await plan_via(ctl, text, resources)
    assert [(t["task"], t["args"]["image"]) for t in plan] == expected
    assert_valid_plan(plan, resources, ALL_TASKS)


@pytest.mark.parametrize(
    "text, resources, expected",
    [
        ("Make it black and white", [CHELSEA], [("image-to-image", {"image": "image-1", "text": "Make it black and white"})]),
        (
            "Draw a castle from the edges of this photo",
            [CHELSEA],
            [("canny-control", {"image": "image-1"}), ("canny-text-to-image", {"image": "<resource>-0", "text": "a castle"})],
        ),
        (
            "Generate an image of a dog, then describe it",
            [CHELSEA],
            [("text-to-image", {"text": "a dog"}), ("image-to-text", {"image": "<resource>-0"})],
        ),
        (
            "Translate this recording into French",
            [SPEECH],
            [("automatic-speech-recognition", {"audio": "audio-1"}), ("translation", {"text": "<resource>-0 (to French)"})],
        ),
        ("Change the background to a blue sky", [CHELSEA],
         [("image-to-image", {"image": "image-1", "text": "Change the background to a blue sky"})]),
        ("What does it say?", [SPEECH], [("automatic-speech-recognition", {"audio": "audio-1"})]),
        (
            "Transcribe this recording, then generate an image of what it describes",
            [SPEECH],
            [("automatic-speech-recognition", {"audio": "audio-1"}), ("text-to-image", {"text": "<resource>-0"})],
        ),
        ("Detect the objects in this photo and draw boxes around them", [CHELSEA],
         [("object-detection", {"image": "image-1"})]),
        ("What is the cat doing?", [CHELSEA], [("visual-question-answering", {"image": "image-1", "text": "What is the cat doing?"})]),
        ("Make a video of a dog surfing a wave", [], [("text-to-video", {"text": "a dog surfing a wave"})]),
        ("Read 'good morning everyone' aloud", [], [("text-to-speech", {"text": "good morning everyone"})]),
        (
            "Translate 'Bonjour, je m'appelle John' into English",
            [],
            [("translation", {"text": "Bonjour, je m'appelle John (to English)"})],
        ),
        (
            "Summarize this: 'The storm hit the coast at dawn. Thousands lost power.'",
            [],
            [("summarization", {"text": "The storm hit the coast at dawn. Thousands lost power."})],
        ),
        (
            "Based on the text 'Paris is the capital of France and has two million people', what is the capital of France?",
            [],
            [("question-answering", {"text": "what is the capital of France?",
                                     "context": "Paris is the capital of France and has two million people"})],
        ),
    ],
)
async def test_keyword_planner_covers_common_requests(ctl, text, resources, expected):
    plan = await plan_via(ctl, text, resources)
    assert [(t["task"], t["args"]) for t in plan] == expected
    assert_valid_plan(plan, resources, ALL_TASKS)


@pytest.mark.parametrize("text", ["Hello!", "thanks a lot", "Who are you?"])
async def test_chit_chat_needs_no_tool(ctl, text):
    assert await plan_via(ctl, text, [CHELSEA]) == []


async def test_a_general_question_is_for_the_controller(ctl):
    assert await plan_via(ctl, "What is the capital of France?", []) == [
        {"task": "conversational", "id": 0, "dep": [-1], "args": {"text": "What is the capital of France?"}}
    ]


async def test_plan_uses_only_available_tasks(ctl):
    available = ["image-classification", "object-detection"]
    plan = await plan_via(ctl, "Describe this picture in as much detail as you can", [CHELSEA], available)
    assert [t["task"] for t in plan] == ["object-detection", "image-classification"]
    assert [t["id"] for t in plan] == [0, 1]
    # the generator is missing: no plan with a dangling dep; the stand-in declines in prose instead
    assert plan_tasks("Generate an image of a cat, then tell me what breed it is", [], ["image-classification"]) == []
    r = await client_for(ctl).chat.completions.create(
        model="m", **planning("Generate an image of a cat, then tell me what breed it is", [], ["image-classification"]))
    assert r.choices[0].message.content.startswith("The offline stand-in controller (--sandbox)")


async def test_repair_round_returns_a_valid_plan(ctl):
    client = client_for(ctl)
    r = await client.chat.completions.create(
        model="m",
        **planning("Transcribe this", [SPEECH], problem="task 0 refers to audio-9, which does not exist"),
    )
    plan = json.loads(r.choices[0].message.content)["tasks"]
    assert plan == [{"task": "automatic-speech-recognition", "id": 0, "dep": [-1], "args": {"audio": "audio-1"}}]


def _taskbench_resources(text: str) -> list[dict]:
    kinds = {"jpg": "image", "jpeg": "image", "png": "image", "wav": "audio", "mp3": "audio", "mp4": "video"}
    out: list[dict] = []
    for m in re.finditer(r"\b[\w-]+\.(jpg|jpeg|png|wav|mp3|mp4)\b", text):
        if all(r["name"] != m.group(0) for r in out):
            kind = kinds[m.group(1)]
            out.append({"id": f"{kind}-{len(out) + 1}", "kind": kind, "name": m.group(0), "origin": "user"})
    return out


def test_taskbench_requests_give_valid_plans():
    records = [json.loads(line) for f in sorted((FIXTURES / "taskbench").glob("*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    requests = [r["user_request"] for r in records if "user_request" in r]  # not the hand-checked verdicts
    assert len(requests) >= 300
    planned = 0
    for text in requests:
        resources = _taskbench_resources(text)
        plan = plan_tasks(text, resources, ALL_TASKS)
        assert_valid_plan(plan, resources, ALL_TASKS)
        planned += bool(plan)
    assert planned / len(requests) > 0.65, planned


def test_taskbench_named_file_is_used():
    text = "I need to detect objects in a photo named example.jpg."
    resources = [CHELSEA, {"id": "image-2", "kind": "image", "name": "example.jpg", "origin": "user"}]
    assert plan_tasks(text, resources, ALL_TASKS) == [
        {"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "image-2"}}
    ]


_WORDS = [
    "describe", "this", "picture", "photo", "image", "audio", "recording", "generate", "draw", "an image of",
    "a cat", "then", "and", "tell me", "what breed", "transcribe", "read it back aloud", "in a different voice",
    "make it black and white", "segment", "depth", "edges", "from the edges", "detect", "count", "how many",
    "translate", "summarize", "into French", "'quoted text here'", "\"a quote\"", "?", ".", ",", "the first",
    "the second", "previous", "generated", "that image", "image-1", "audio-2", "video-1", "chelsea.png",
    "in as much detail", "what is the cat doing", "make a video of", "answer", "classify", "sentiment",
    "tokens", "paraphrase", "write a poem", "denoise", "hello", "everything", "it", "edit", "change the background",
]


@st.composite
def resources_st(draw):
    kinds = draw(st.lists(st.sampled_from(["image", "audio", "video", "text"]), max_size=5))
    out = []
    for i, k in enumerate(kinds):
        r = {"id": f"{k}-{i + 1}", "kind": k, "origin": draw(st.sampled_from(["user", "task:0", "task:2"]))}
        if draw(st.booleans()):
            r["name"] = draw(st.sampled_from(["chelsea.png", "a.wav", "clip.mp4", "x.png"]))
        out.append(r)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(st.sampled_from(_WORDS) | st.text(max_size=12), max_size=14),
    resources=resources_st(),
    available=st.sets(st.sampled_from(ALL_TASKS)),
)
def test_any_request_gives_a_valid_plan(words, resources, available):
    text = " ".join(words)
    plan = plan_tasks(text, resources, sorted(available))
    assert_valid_plan(plan, resources, sorted(available))
    assert plan == plan_tasks(text, resources, sorted(available))  # deterministic


# ----------------------------------------------------------------------------------------------
# structured output and keys


async def test_json_schema_rejected_when_switched_off_and_json_object_still_works():
    async with ControllerStandIn(accept_json_schema=False) as server:
        client = client_for(server)
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="m", **planning("Transcribe this", [SPEECH]), response_format=PLAN_SCHEMA)
        assert err.value.status_code == 400 and "json_schema" in err.value.message
        r = await client.chat.completions.create(
            model="m", **planning("Transcribe this", [SPEECH]), response_format={"type": "json_object"}
        )
        assert json.loads(r.choices[0].message.content)["tasks"][0]["task"] == "automatic-speech-recognition"
        r = await client.chat.completions.create(model="m", **planning("Transcribe this", [SPEECH]))
        assert json.loads(r.choices[0].message.content)["tasks"][0]["args"] == {"audio": "audio-1"}


async def test_api_key_is_checked_when_set():
    async with ControllerStandIn(api_key="sk-right") as server:
        with pytest.raises(openai.AuthenticationError):
            await client_for(server, api_key="sk-wrong").chat.completions.create(model="m", **planning("hi"))
        models = await client_for(server, api_key="sk-right").models.list()
        assert [m.id for m in models.data] == ["sandbox-controller"]
        r = await client_for(server, api_key="sk-right").chat.completions.create(model="m", **planning("hi"))
        assert json.loads(r.choices[0].message.content) == {"tasks": []}


# ----------------------------------------------------------------------------------------------
# response generation and streaming

PLAN = [
    {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat on a red sofa"}},
    {"task": "image-classification", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
    {"task": "image-to-text", "id": 2, "dep": [0], "args": {"image": "<resource>-0"}},
]
SELECTIONS = {
    "0": {"model": "runwayml/stable-diffusion-v1-5", "reason": "popular"},
    "1": {"model": "google/vit-base-patch16-224", "reason": "only one"},
    "2": {"model": "nlpconnect/vit-gpt2-image-captioning", "reason": "top"},
}
RESULTS = {
    "0": {"task": "text-to-image", "status": "ok", "files": [{"id": "image-4", "kind": "image", "description": "generated"}]},
    "1": {"task": "image-classification", "status": "ok", "text": "Egyptian cat (0.61)", "files": [],
          "data": {"labels": [{"label": "Egyptian cat", "score": 0.61}]}},
    "2": {"task": "image-to-text", "status": "failed", "files": [], "error": "The captioning model timed out."},
}


async def test_response_answers_first_then_explains(ctl):
    client = client_for(ctl)
    r = await client.chat.completions.create(
        model="m", **responding("Generate a cat, then tell me its breed", PLAN, SELECTIONS, RESULTS)
    )
    text = r.choices[0].message.content
    assert text.startswith(LABEL)
    assert "Egyptian cat (0.61)" in text and "image-4" in text
    assert "The captioning model timed out." in text
    how = text.index("How I did it")
    assert text.index("Egyptian cat") < how
    assert "google/vit-base-patch16-224" in text[how:] and "runwayml/stable-diffusion-v1-5" in text[how:]


async def test_empty_plan_answers_directly(ctl):
    r = await client_for(ctl).chat.completions.create(model="m", **responding("Hello there!", [], {}, {}))
    text = r.choices[0].message.content
    assert text.startswith(LABEL) and "Hello" in text and "How I did it" not in text


async def test_streaming_assembles_the_same_text_with_usage(ctl):
    client = client_for(ctl)
    call = responding("Generate a cat, then tell me its breed", PLAN, SELECTIONS, RESULTS)
    whole = await client.chat.completions.create(model="m", **call)
    stream = await client.chat.completions.create(
        model="m", **call, stream=True, stream_options={"include_usage": True}
    )
    pieces, usage, finish = [], None, None
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) == whole.choices[0].message.content
    assert len([p for p in pieces if p]) >= 3
    assert finish == "stop"
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens > 0


async def test_streaming_without_include_usage_has_no_usage_chunk(ctl):
    stream = await client_for(ctl).chat.completions.create(
        model="m", **planning("Transcribe this", [SPEECH]), stream=True
    )
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert json.loads(text)["tasks"][0]["task"] == "automatic-speech-recognition"


# ----------------------------------------------------------------------------------------------
# model selection and controller tasks

CANDIDATES = [
    {"id": "facebook/detr-resnet-50", "downloads": 900, "likes": 10, "description": "DETR object detection model"},
    {"id": "nlpconnect/vit-gpt2-image-captioning", "downloads": 500, "likes": 5,
     "description": "image captioning: generates a caption text for an image"},
]


async def test_selection_returns_the_best_matching_candidate(ctl):
    client = client_for(ctl)
    task = {"id": 0, "task": "image-to-text", "args": {"image": "image-1"}}
    r = await client.chat.completions.create(model="m", **selection(task, CANDIDATES), response_format={"type": "json_object"})
    pick = json.loads(r.choices[0].message.content)
    assert pick["id"] == "nlpconnect/vit-gpt2-image-captioning" and pick["reason"].startswith("[sandbox]")
    task = {"id": 1, "task": "depth-estimation", "args": {"image": "image-1"}}
    r = await client.chat.completions.create(model="m", **selection(task, CANDIDATES))
    assert json.loads(r.choices[0].message.content)["id"] == "facebook/detr-resnet-50"  # no match: first


@pytest.mark.parametrize(
    "task, text, expected",
    [
        ("summarization", "The storm hit the coast at dawn. Thousands lost power for days.", "[sandbox] The storm hit the coast at dawn."),
        ("translation", "Bonjour tout le monde", "[sandbox translation] Bonjour tout le monde"),
    ],
)
async def test_controller_tasks(ctl, task, text, expected):
    messages = [
        {"role": "system", "content": "Do the task."},
        {"role": "user", "content": f"<input>{text}</input>"},
    ]
    r = await client_for(ctl).chat.completions.create(
        model="m", messages=messages, extra_headers=headers("controller-task", task)
    )
    assert r.choices[0].message.content == expected
    assert [(c.stage, c.task) for c in ctl.requests] == [("controller-task", task)]


def _plain(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@pytest.mark.parametrize(
    "messages, sent, words",
    [
        (_plain("Plan.", "x"), {"X-HuggingGPT-Stage": "daydreaming"}, "unknown stage 'daydreaming' in the X-HuggingGPT-Stage header"),
        (_plain("Plan.", "x"), {}, "the X-HuggingGPT-Stage header is missing"),
        (_plain("Plan.", "x"), {"X-HuggingGPT-Stage": ""}, "the X-HuggingGPT-Stage header is missing"),
        # the old first-line protocol is gone: a [stage:NAME] line no longer routes anything
        (_plain("[stage:task-planning]", "<request>hi</request>"), {}, "the X-HuggingGPT-Stage header is missing"),
        (_plain("Plan.", "<request>hi</request>"), headers("task-planning"), "<resources>"),
        (
            _plain("Pick.", "<task>{not json</task><candidates>[]</candidates>"),
            headers("model-selection"),
            "<task> does not hold valid JSON",
        ),
        (_plain("Do it.", "<input>x</input>"), headers("controller-task", "painting"),
         "unknown controller task 'painting' in the X-HuggingGPT-Task header"),
        (_plain("task: summarization", "<input>x</input>"), headers("controller-task"),
         "a controller-task request needs the X-HuggingGPT-Task header"),
    ],
)
async def test_routing_and_protocol_errors_are_400_with_a_reason(ctl, messages, sent, words):
    with pytest.raises(openai.BadRequestError) as err:
        await client_for(ctl).chat.completions.create(model="m", messages=messages, extra_headers=sent)
    assert err.value.status_code == 400 and words in err.value.message
    assert err.value.code == "sandbox_protocol" and err.value.type == "invalid_request_error"


async def test_header_names_are_case_insensitive(ctl):
    call = planning("Transcribe this", [SPEECH])
    call["extra_headers"] = {"x-huggingGPT-stage": "task-planning"}
    r = await client_for(ctl).chat.completions.create(model="m", **call)
    assert json.loads(r.choices[0].message.content)["tasks"][0]["args"] == {"audio": "audio-1"}
    assert [c.stage for c in ctl.requests] == ["task-planning"]


# ----------------------------------------------------------------------------------------------
# scripted failures, latency and the request log


async def test_script_actions_in_order():
    server = ControllerStandIn(
        script=[
            {"status": 401, "message": "Incorrect API key provided: sk-****"},
            {"status": 429, "message": "Rate limit reached", "retry_after": 3},
            {"status": 503, "message": "overloaded"},
            {"content": "Sure! Here is your plan: [{task: oops"},
            {"drop": True},
            {"truncate": True},
        ]
    )
    async with server:
        client = client_for(server)
        call = planning("Transcribe this", [SPEECH])
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", **call)
        with pytest.raises(openai.RateLimitError) as rate:
            await client.chat.completions.create(model="m", **call)
        assert rate.value.response.headers["retry-after"] == "3" and "Rate limit reached" in rate.value.message
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", **call)
        stream = await client.chat.completions.create(model="m", **call, stream=True)
        assert "".join([c.choices[0].delta.content or "" async for c in stream]) == "Sure! Here is your plan: [{task: oops"
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="m", **call)
        cut = await client.chat.completions.create(model="m", **call)
        normal = await client.chat.completions.create(model="m", **call)
        full = normal.choices[0].message.content
        assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.content == full[: len(full) // 2]
        with pytest.raises(json.JSONDecodeError):
            json.loads(cut.choices[0].message.content)
        assert server.script == []
        assert len(server.requests) == 7 and {r.stage for r in server.requests} == {"task-planning"}
        assert server.requests[4].end is None  # dropped: never answered


async def test_sdk_retries_consume_script_actions():
    async with ControllerStandIn(script=[{"status": 500, "message": "boom", "retry_after": 0.01}, {"status": 503, "message": "busy", "retry_after": 0.01}]) as server:
        client = client_for(server, max_retries=2)
        r = await client.chat.completions.create(model="m", **planning("Transcribe this", [SPEECH]))
        assert json.loads(r.choices[0].message.content)["tasks"][0]["task"] == "automatic-speech-recognition"
        assert len(server.requests) == 3


async def test_latency_delay_and_recorded_timestamps():
    async with ControllerStandIn(latency=0.05, script=[{"delay": 0.2}]) as server:
        client = client_for(server)
        t0 = time.monotonic()
        await client.chat.completions.create(model="m", **planning("Transcribe this", [SPEECH]))
        await client.chat.completions.create(model="m", **responding("Transcribe this", [], {}, {}))
        t1 = time.monotonic()
        first, second = server.requests
        assert (first.stage, second.stage) == ("task-planning", "response-generation")
        assert t0 <= first.start < first.end <= second.start < second.end <= t1
        assert first.end - first.start >= 0.25 and 0.05 <= second.end - second.start < 0.2
        assert first.body["messages"][0]["content"] == "Plan the request as tasks."
        assert [r.stage for r in server.calls("response-generation")] == ["response-generation"]
