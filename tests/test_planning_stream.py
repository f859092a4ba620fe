"""Streamed task planning with eager dispatch, as a user of ``hugginggpt run`` sees it: tasks start
while the controller is still writing the plan; a finished plan that proves invalid stops them and
goes to the repair round; servers without streaming keep working."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.planning import complete_records
from sandbox.faulty_controller import FaultyController

MEDIA = Path(__file__).parent / "fixtures" / "media"


def test_only_records_followed_by_another_are_complete():
    assert complete_records("") == []
    assert complete_records('```json\n{"tasks": [{"task": "a", "id": 0, "args": {"text": "hel') == []
    two = '{"tasks": [{"task": "a", "id": 0, "args": {"text": "hello"}}, {"task": "b", "id'
    assert complete_records(two) == [{"task": "a", "id": 0, "args": {"text": "hello"}}]
    assert complete_records('[{"task": "a"}, {"task": "b"}, ') == [{"task": "a"}, {"task": "b"}]
    assert complete_records('[{"task": "a"}, {"task": "b", "args": {"text": "x"}') == [{"task": "a"}]  # still open
    assert complete_records('{"tasks": [{"task": "a", "id": 0') == []  # its brace has not arrived
    assert complete_records('{"tasks": [{"task": "a", "id": 0,') == []  # a comma inside it is no end
    assert complete_records('{"tasks": [{"task": "a", "id": 0}') == [{"task": "a", "id": 0}]  # it has
    assert complete_records('{"tasks": [{"task": "a", "id": 0}}') == []  # not JSON once closed
    # every prefix of a whole plan from its last record's brace on holds that record: the list's
    # "]" arriving before the object's "}" must not hide it until the very last byte
    whole = '{"tasks": [{"task": "a", "id": 0, "args": {"image": "image-1"}}]}'
    brace = whole.index("}}") + 2
    assert all(complete_records(whole[:k]) == [{"task": "a", "id": 0, "args": {"image": "image-1"}}]
               for k in range(brace, len(whole) + 1))
    assert all(complete_records(whole[:k]) == [] for k in range(brace))
    assert complete_records('```json\n{"tasks": [{"task": "a", "id": 0}]}\n```') == [{"task": "a", "id": 0}]
    assert complete_records('{"tasks": "none"}') == [] and complete_records("no JSON here") == []


def _plan(*tasks):
    return json.dumps({"tasks": [{"task": t, "id": i, "dep": d, "args": a} for i, (t, d, a) in enumerate(tasks)]})


CHAIN = _plan(
    ("image-classification", [-1], {"image": "image-1"}),
    ("text-to-speech", [0], {"text": "<resource>-0"}),
    ("image-to-text", [-1], {"image": "image-1"}),
)


@pytest.fixture
def controller():
    c = FaultyController().start()
    c.experts_url = c.start_experts()
    yield c
    c.close()


def _run(controller, tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": controller.url,
                "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HUGGINGGPT_INFERENCE__BASE_URL": controller.experts_url,
                "HUGGINGGPT_INFERENCE__SELECTION": "top"})
    return subprocess.run([sys.executable, "-m", "hugginggpt", "run", *args, "--file", str(MEDIA / "chelsea.png")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_tasks_start_while_the_plan_is_still_being_written(controller, tmp_path):
    controller.plan, controller.chunks, controller.trickle = CHAIN, 30, 0.04  # the plan takes about 1.2 s to write
    p = _run(controller, tmp_path, "What is in this photo? Say it aloud, and describe it too.")
    assert p.returncode == 0, p.stderr
    out = p.stderr  # the run's progress goes to stderr when stdout is not a terminal
    # task 0 was running before the whole plan was known
    assert out.index("[0] running on") < out.index("Plan: 3 tasks")
    assert "Plan (still being written" in out
    assert "[1] done" in out and "[2] done" in out
    # every task of the plan is listed once
    assert out.count("[0] image-classification") == 1 and out.count("[2] image-to-text") == 1


@pytest.mark.slow
def test_an_invalid_finished_plan_stops_early_tasks_and_is_repaired(controller, tmp_path):
    bad = _plan(("image-classification", [-1], {"image": "image-1"}), ("teleportation", [0], {"text": "<resource>-0"}))
    good = _plan(("image-classification", [-1], {"image": "image-1"}))
    controller.plans = {"Classify this photo": [bad, good]}
    controller.chunks, controller.trickle = 20, 0.03
    p = _run(controller, tmp_path, "--json", "Classify this photo")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [t["task"] for t in doc["tasks"]] == ["image-classification"]
    assert doc["results"]["0"]["status"] == "ok"
    [note] = [n for n in doc["notes"] if "finished plan was invalid" in n]
    assert "teleportation" in note and "asked to fix" in note
    assert [r["stage"] for r in controller.requests].count("task-planning") == 2


@pytest.mark.slow
def test_a_server_without_streaming_still_plans_and_answers(controller, tmp_path):
    controller.plan, controller.no_stream = CHAIN, True
    controller.answer = "All three are done."
    p = _run(controller, tmp_path, "What is in this photo? Say it aloud, and describe it too.")
    assert p.returncode == 0, p.stderr
    assert "Plan: 3 tasks" in p.stderr and "Plan (still being written" not in p.stderr
    assert "All three are done." in p.stdout


@pytest.mark.slow
def test_an_error_event_in_the_streamed_answer_is_one_sentence_and_exit_4(controller, tmp_path):
    controller.plan = _plan(("image-classification", [-1], {"image": "image-1"}))
    controller.answer, controller.chunks = "The photo shows a cat sitting on a rug.", 8
    controller.stream_error = ("response-generation", 3)
    p = _run(controller, tmp_path, "--json", "Classify this photo")
    assert p.returncode == 4, p.stderr
    doc = json.loads(p.stdout)
    assert doc["results"]["0"]["status"] == "ok"  # what finished is kept
    assert doc["status"] == "error" and "reported an error while answering" in doc["error"]
    assert "Traceback" not in p.stderr and "overloaded" not in doc["error"]  # the server's words go to the log


@pytest.mark.slow
def test_an_error_event_while_planning_is_a_controller_error(controller, tmp_path):
    controller.plan, controller.chunks = CHAIN, 10
    controller.stream_error = ("task-planning", 2)
    p = _run(controller, tmp_path, "What is in this photo? Say it aloud, and describe it too.")
    assert p.returncode == 4, p.stderr
    assert "reported an error while answering" in p.stderr and "Traceback" not in p.stderr


async def test_tokens_reported_in_a_stream_are_counted(controller):
    from bot.backends import build_controller
    from bot.settings import Settings
    from pipeline.llm import Usage

    controller.stream_usage, controller.chunks = True, 4
    llm = build_controller(Settings(llm=dict(model="m", base_url=controller.url, api_key="sk-test-0000", max_retries=0)))
    usage = Usage()
    try:
        text = "".join([d async for d in llm.stream_text([{"role": "user", "content": "hi"}], stage="response-generation", usage=usage)])
    finally:
        await llm.aclose()
    assert text == controller.answer
    assert (usage.prompt_tokens, usage.completion_tokens, usage.calls) == (120, 30, 1)
