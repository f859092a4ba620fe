"""Re-planning from the results, as a user of ``hugginggpt run`` sees it: a failed expert makes the
controller plan further tasks that reuse the finished ones; a re-plan that adds nothing, that only
repeats what was tried, or that the deadline cuts short, ends in an answer from what finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.catalog.models import Catalog
from pipeline.planning import PlanInvalid
from pipeline.replanning import accept_replan, replan_reason
from pipeline.types import Output, Request, Resource, Task, TaskResult
from sandbox.faulty_controller import FaultyController

MEDIA = Path(__file__).parent / "fixtures" / "media"


def _plan(*tasks: tuple[int, str, list[int], dict[str, str]]) -> str:
    return json.dumps({"tasks": [{"task": t, "id": i, "dep": d, "args": a} for i, t, d, a in tasks]})


FIRST = _plan((0, "image-to-text", [-1], {"image": "image-1"}), (1, "object-detection", [-1], {"image": "image-1"}))


@pytest.fixture
def controller():
    c = FaultyController().start()
    c.experts_url = c.start_experts()
    c.plan = FIRST
    # every object-detection model is gone: task 1 fails whichever candidate it tries
    c._experts.gone.update(m.id for m in Catalog.load(None).candidates("object-detection"))
    yield c
    c.close()


def _run(controller, tmp_path, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": controller.url,
                "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HUGGINGGPT_INFERENCE__BASE_URL": controller.experts_url,
                "HUGGINGGPT_INFERENCE__SELECTION": "top", "HUGGINGGPT_INFERENCE__MAX_CANDIDATES_TRIED": "2",
                "HUGGINGGPT_INFERENCE__BACKOFF_MAX": "0.1", **(env_extra or {})})
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "What is in this photo?", *args,
                        "--file", str(MEDIA / "chelsea.png")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return p


def _calls(controller, task):
    return [r for r in controller._experts.records if r.task == task]


@pytest.mark.slow
def test_a_failed_expert_is_replanned_around_reusing_the_finished_task(controller, tmp_path):
    controller.replans = [_plan((2, "image-classification", [-1], {"image": "image-1"}),
                                (3, "text-to-speech", [0], {"text": "<resource>-0"}))]
    p = _run(controller, tmp_path)
    assert p.returncode == 0, p.stderr  # the further plan got past the failure
    progress = p.stderr
    assert "Re-planning (round 2): Task 1 (object-detection) failed; asking the controller how to go on." in progress
    assert "Plan (round 2): 2 more tasks" in progress
    assert progress.index("[1] failed") < progress.index("Re-planning") < progress.index("[2] done")
    assert "[3] done" in progress
    assert p.stdout.startswith("Here is the answer.")
    assert controller.stages() == ["task-planning", "task-replanning", "response-generation"]
    assert len(_calls(controller, "image-to-text")) == 1  # the caption was reused, never asked again
    # the controller saw the failure and the finished caption when it re-planned
    seen = controller.requests[1]["body"]["messages"][-1]["content"]
    assert '"status": "failed"' in seen and "<next_id>2</next_id>" in seen
    # and the answer stage saw every round's results
    answer_prompt = controller.requests[-1]["body"]["messages"][-1]["content"]
    assert '"3": {"task": "text-to-speech", "status": "ok"' in answer_prompt


@pytest.mark.slow
def test_json_shows_the_rounds(controller, tmp_path):
    controller.replans = [_plan((2, "image-classification", [-1], {"image": "image-1"}))]
    p = _run(controller, tmp_path, "--json")
    doc = json.loads(p.stdout)
    assert doc["rounds"] == [
        {"round": 1, "tasks": [0, 1], "reason": None, "outcome": "planned"},
        {"round": 2, "tasks": [2], "reason": "Task 1 (object-detection) failed.", "outcome": "planned"},
    ]
    assert [t["id"] for t in doc["tasks"]] == [0, 1, 2]
    assert {k: v["status"] for k, v in doc["results"].items()} == {"0": "ok", "1": "failed", "2": "ok"}
    assert doc["status"] == "ok" and doc["llm_calls"] == 3


@pytest.mark.slow
def test_a_replan_with_nothing_new_answers_from_what_exists(controller, tmp_path):
    controller.replans = ['{"tasks": []}']
    p = _run(controller, tmp_path, "--json", env_extra={"HUGGINGGPT_PLANNING__MAX_REPLANS": "3"})
    assert p.returncode == 6, p.stderr  # task 1 still failed: partial
    doc = json.loads(p.stdout)
    assert doc["rounds"][1] == {"round": 2, "tasks": [], "reason": "Task 1 (object-detection) failed.", "outcome": "answer"}
    assert len(doc["rounds"]) == 2  # the controller chose to answer: no further round, whatever max_replans
    # the controller's answer, then what the run left out, said by the product (pipeline.coverage)
    assert doc["response"].startswith("Here is the answer.\n\n- Task 1 (object-detection) failed: The model ")
    assert controller.stages() == ["task-planning", "task-replanning", "response-generation"]


@pytest.mark.slow
def test_the_deadline_passing_during_a_replan_answers_from_what_finished(controller, tmp_path):
    controller.replan_delay = 30.0
    p = _run(controller, tmp_path, env_extra={"HUGGINGGPT_INFERENCE__DEADLINE": "8"})
    assert p.returncode == 7, p.stderr
    assert "The run's deadline passed while the controller was re-planning" in p.stderr
    # the answer is written without the controller, from what finished
    assert "The run's deadline of 8 seconds passed before the answer could be written" in p.stdout
    assert "task 0 (image-to-text" in p.stdout and "task 1 (object-detection): The model " in p.stdout
    assert "response-generation" not in controller.stages()


@pytest.mark.slow
def test_a_replan_that_only_repeats_what_was_tried_does_not_cycle(controller, tmp_path):
    repeat = _plan((2, "object-detection", [-1], {"image": "image-1"}), (3, "image-to-text", [-1], {"image": "image-1"}))
    controller.replans = [repeat]
    p = _run(controller, tmp_path, "--json", env_extra={"HUGGINGGPT_PLANNING__MAX_REPLANS": "3"})
    assert p.returncode == 6, p.stderr
    doc = json.loads(p.stdout)
    assert doc["rounds"][1]["outcome"] == "repeated" and len(doc["rounds"]) == 2
    assert "The controller's new plan only repeated tasks already tried" in " ".join(doc["notes"])
    assert controller.stages().count("task-replanning") == 1
    assert len(_calls(controller, "image-to-text")) == 1
    assert [t["id"] for t in doc["tasks"]] == [0, 1]


@pytest.mark.slow
def test_no_replan_when_max_replans_is_zero(controller, tmp_path):
    p = _run(controller, tmp_path, "--json", env_extra={"HUGGINGGPT_PLANNING__MAX_REPLANS": "0"})
    assert p.returncode == 6
    assert controller.stages() == ["task-planning", "response-generation"]
    assert json.loads(p.stdout)["rounds"] == [{"round": 1, "tasks": [0, 1], "reason": None, "outcome": "planned"}]
    assert "Re-planning" not in p.stderr


# ---------------------------------------------------------------------------------------------
# The decisions, without a network


def _setting():
    image = Resource("image-1", "image", Path("/nonexistent/a.png"), "image/png", 10)
    other = Resource("image-2", "image", Path("/nonexistent/b.png"), "image/png", 10)
    tasks = [Task(0, "image-to-text", (), {"image": "image-1"}), Task(1, "object-detection", (), {"image": "image-1"}),
             Task(2, "text-to-speech", (1,), {"text": "<resource>-1"})]
    results = {0: TaskResult(0, "ok", output=Output(text="a cat on a sofa")),
               1: TaskResult(1, "failed", error="object-detection failed: gone."),
               2: TaskResult(2, "skipped", error="Task 1, whose output it needs, did not succeed.")}
    available = {"image-to-text", "object-detection", "text-to-speech", "image-classification"}
    return Request("what is it?", files=[image, other]), available, tasks, results


def test_the_reason_names_failed_skipped_and_empty_tasks_and_is_none_when_all_produced_something():
    _, _, tasks, results = _setting()
    assert replan_reason(tasks, results) == "Task 1 (object-detection) failed; task 2 (text-to-speech) was skipped."
    assert replan_reason(tasks[:1], results) is None
    empty = {0: TaskResult(0, "ok", output=Output(text="  "))}
    assert replan_reason(tasks[:1], empty) == "Task 0 (image-to-text) came back blank."
    said_none = {0: TaskResult(0, "ok", output=Output(text="no entities found"))}
    assert replan_reason(tasks[:1], said_none) is None


def test_a_repeat_of_a_finished_task_is_replaced_by_it_and_a_repeat_of_a_failed_one_is_dropped():
    request, available, tasks, results = _setting()
    raw = _plan((3, "image-to-text", [-1], {"image": "image-1"}),  # repeats finished task 0
                (4, "text-to-speech", [3], {"text": "<resource>-3"}),  # so this reads task 0's caption
                (5, "object-detection", [-1], {"image": "image-1"}),  # repeats failed task 1: dropped
                (6, "image-classification", [5], {"image": "image-1"}),  # needs the dropped one: dropped
                (7, "object-detection", [-1], {"image": "image-2"}))  # the other photo: new
    d = accept_replan(raw, request=request, available=available, tasks=tasks, results=results, resources=request.resources)
    assert d.outcome == "planned"
    assert [(t.id, t.task, t.dep, t.args) for t in d.tasks] == [
        (4, "text-to-speech", (0,), {"text": "<resource>-0"}), (7, "object-detection", (), {"image": "image-2"})]
    assert d.note.startswith("3 tasks of the new plan repeated what was already tried")


def test_a_replan_may_not_reuse_ids_nor_use_what_failed():
    request, available, tasks, results = _setting()
    kw = dict(request=request, available=available, tasks=tasks, results=results, resources=request.resources)
    with pytest.raises(PlanInvalid, match="already used; number new tasks from 3 on"):
        accept_replan(_plan((1, "image-classification", [-1], {"image": "image-1"})), **kw)
    with pytest.raises(PlanInvalid, match="uses the output of task 1, which did not succeed"):
        accept_replan(_plan((3, "text-to-speech", [-1], {"text": "<resource>-1"})), **kw)
    with pytest.raises(PlanInvalid, match="not an image of this conversation"):
        accept_replan(_plan((3, "image-classification", [-1], {"image": "/etc/passwd"})), **kw)
    assert accept_replan('{"tasks": []}', **kw).outcome == "answer"


def test_every_front_end_shows_the_replanning_round():
    import io

    from adapters.discord.render import render_progress
    from adapters.http.render import progress_line
    from adapters.mcp.results import progress_message
    from adapters.progress import Progress
    from adapters.slack.logic import render_status
    from adapters.terminal.lines import TerminalRenderer
    from pipeline.types import PlanReady, ReplanStarted, TaskFailed

    first = (Task(0, "image-to-text", (), {"image": "image-1"}), Task(1, "object-detection", (), {"image": "image-1"}))
    events = [PlanReady(first), TaskFailed(TaskResult(1, "failed", error="object-detection failed: gone.")),
              ReplanStarted(2, "Task 1 (object-detection) failed."),
              PlanReady((Task(2, "image-classification", (), {"image": "image-1"}),))]
    out = io.StringIO()
    terminal, model = TerminalRenderer(out, color=False), Progress(started=0.0)
    for e in events:
        terminal.render(e)
        model.apply(e, now=1.0)
    sentence = "Re-planning (round 2): Task 1 (object-detection) failed; asking the controller how to go on."
    assert f"({sentence})" in out.getvalue() and "Plan (round 2): 1 more task" in out.getvalue()
    assert model.round == 2 and sorted(model.tasks) == [0, 1, 2] and model.tasks[1].state == "failed"
    assert sentence in render_progress(model, now=1.0) and sentence in render_status(model)
    assert progress_message(events[2], {}) == sentence
    assert progress_line(events[2]) == sentence  # the HTTP API's reasoning view
