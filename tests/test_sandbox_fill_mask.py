"""fill-mask in the sandbox: the inference stand-in through the real ``AsyncInferenceClient``, and
the stand-in planner offering the task for a fill-in-the-blank request."""

from __future__ import annotations

import json

import openai
import pytest
from huggingface_hub import AsyncInferenceClient
from huggingface_hub.errors import HfHubHTTPError

from sandbox.controller import ControllerStandIn
from sandbox.heuristics import plan_tasks
from pipeline.tasks import TASKS

ALL_TASKS = sorted(set(TASKS) | {"fill-mask"})
BERT = "google-bert/bert-base-uncased"
ROBERTA = "FacebookAI/roberta-base"


@pytest.fixture
def client() -> AsyncInferenceClient:
    return AsyncInferenceClient(timeout=10)


@pytest.fixture
def models(standin):
    standin.task_of.update({BERT: "fill-mask", ROBERTA: "fill-mask"})
    return standin


@pytest.mark.parametrize("model, text, mask", [
    (BERT, "Paris is the [MASK] of France.", "[MASK]"),
    (ROBERTA, "The goal of life is <mask>.", "<mask>"),
])
async def test_fill_mask_wire_format_through_the_real_client(models, client, model, text, mask):
    url = f"{models.url}/models/{model}"
    out = await client.fill_mask(text, model=url)
    assert len(out) == 5  # the Inference API's default top_k
    scores = [o.score for o in out]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    assert sum(scores) <= 1.0001
    before, after = text.split(mask)
    for o in out:
        assert o.token_str and mask not in o.sequence
        assert o.sequence == before + o.token_str + after
        assert isinstance(o.token, int)
    assert len({o.token_str for o in out}) == 5
    # derived from the input: the same text gives the same answer, another text another ranking
    again = await client.fill_mask(text, model=url)
    assert [(o.sequence, o.score) for o in again] == [(o.sequence, o.score) for o in out]
    other = await client.fill_mask(text.replace(mask, f"most {mask}"), model=url)
    assert [o.score for o in other] != scores
    assert [(r.model, r.task, r.status) for r in models.records] == [(model, "fill-mask", 200)] * 3


async def test_top_k_and_targets_are_honoured(models, client):
    url = f"{models.url}/models/{BERT}"
    top2 = await client.fill_mask("Paris is the [MASK] of France.", model=url, top_k=2)
    full = await client.fill_mask("Paris is the [MASK] of France.", model=url)
    assert [o.token_str for o in top2] == [o.token_str for o in full[:2]]
    picked = await client.fill_mask("Paris is the [MASK] of France.", model=url, targets=["capital", "village"])
    assert sorted(o.token_str for o in picked) == ["capital", "village"]
    assert {o.sequence for o in picked} == {"Paris is the capital of France.", "Paris is the village of France."}
    assert picked[0].score >= picked[1].score and abs(picked[0].score + picked[1].score - 1) < 0.001


async def test_unknown_model_is_served_as_fill_mask_when_the_text_has_a_mask(standin, client):
    out = await client.fill_mask("I drink [MASK] every morning.", model=f"{standin.url}/models/someone/unknown-model")
    assert out and all(o.sequence.startswith("I drink ") for o in out)
    assert [r.task for r in standin.records] == ["fill-mask"]


async def test_text_without_a_mask_is_a_400_saying_so(models, client):
    with pytest.raises(HfHubHTTPError) as err:
        await client.fill_mask("Paris is the capital of France.", model=f"{models.url}/models/{BERT}")
    assert err.value.response.status_code == 400
    assert "No mask_token ([MASK]) found on the input" in err.value.response.text
    assert [r.status for r in models.records] == [400]


# ----------------------------------------------------------------------------------------------
# planning


@pytest.mark.parametrize("text, passage", [
    ("Fill in the blank: Paris is the [MASK] of France.", "Paris is the [MASK] of France."),
    ("Fill in the blank: Paris is the ___ of France.", "Paris is the [MASK] of France."),
    ('What word fits in "The goal of life is <mask>."?', "The goal of life is <mask>."),
    ("I love Paris. It is the [MASK] of France! Tell me more.", "It is the [MASK] of France!"),
])
def test_planner_offers_fill_mask_for_a_blank(text, passage):
    assert plan_tasks(text, [], ALL_TASKS) == [{"task": "fill-mask", "id": 0, "dep": [-1], "args": {"text": passage}}]


def test_fill_mask_output_feeds_a_later_task():
    plan = plan_tasks("Complete the sentence: Paris is the [MASK] of France, then translate it into French", [], ALL_TASKS)
    assert plan == [
        {"task": "fill-mask", "id": 0, "dep": [-1], "args": {"text": "Paris is the [MASK] of France"}},
        {"task": "translation", "id": 1, "dep": [0], "args": {"text": "<resource>-0 (to French)"}},
    ]


def test_without_fill_mask_available_the_plan_is_unchanged():
    without = sorted(set(ALL_TASKS) - {"fill-mask"})
    # no fill-mask task is made up: the text goes to the controller, which answers it itself
    assert [t["task"] for t in plan_tasks("Fill in the blank: Paris is the [MASK] of France.", [], without)] == [
        "conversational"
    ]
    # the other intents still see the request as before
    assert [t["task"] for t in plan_tasks('What word fits in "The goal of life is <mask>."?', [], without)] == [
        "question-answering"
    ]
    assert "fill-mask" not in [t["task"] for t in plan_tasks("Fill in the blanks, please.", [], ALL_TASKS)]  # no hole


async def test_stand_in_controller_plans_fill_mask_over_http():
    user = (
        "<request>Fill in the blank: Paris is the [MASK] of France.</request>\n<resources>[]</resources>\n"
        f"<available_tasks>{json.dumps(ALL_TASKS)}</available_tasks>"
    )
    async with ControllerStandIn() as ctl:
        client = openai.AsyncOpenAI(base_url=ctl.base_url, api_key="sandbox", max_retries=0, timeout=10)
        r = await client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": "Plan."}, {"role": "user", "content": user}],
            extra_headers={"X-HuggingGPT-Stage": "task-planning"},
        )
    assert json.loads(r.choices[0].message.content) == {
        "tasks": [{"task": "fill-mask", "id": 0, "dep": [-1], "args": {"text": "Paris is the [MASK] of France."}}]
    }
