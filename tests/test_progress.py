"""One progress model (adapters.progress) behind the terminal, Discord and Slack: the same event
sequence shows the same stages and task states on all three."""

from __future__ import annotations

import io
import re

from adapters.discord.render import render_progress
from adapters.slack.logic import render_status
from adapters.terminal.lines import TerminalRenderer
from adapters.progress import Progress
from pipeline.types import (
    Done,
    ModelSelected,
    Output,
    PlanReady,
    ResponseDelta,
    RunRecord,
    Selection,
    Task,
    TaskFailed,
    TaskFinished,
    TaskResult,
    TaskSkipped,
    TaskStarted,
)

PLAN = (
    Task(1, "image-to-text", (), {"image": "image-1"}),
    Task(2, "text-to-speech", (1,), {"text": "<resource>-1"}),
    Task(3, "object-detection", (), {"image": "image-1"}),
    Task(4, "image-classification", (3,), {"image": "image-1"}),
)
EVENTS = [
    PlanReady(PLAN),
    ModelSelected(Selection(1, "Salesforce/blip-image-captioning-large", "top")),
    TaskStarted(1, "Salesforce/blip-image-captioning-large"),
    ModelSelected(Selection(3, "facebook/detr-resnet-50", "top")),
    TaskStarted(3, "facebook/detr-resnet-50"),
    TaskFinished(TaskResult(1, "ok", output=Output(text="a cat on a sofa"), model="Salesforce/blip-image-captioning-large")),
    TaskFailed(TaskResult(3, "failed", error="The model facebook/detr-resnet-50 is still loading.", model="facebook/detr-resnet-50")),
    TaskSkipped(TaskResult(4, "skipped", error="Task 3, whose output it needs, did not succeed.")),
]
# task 2 is still waiting when the sequence is cut (to compare a mid-run view too)
FINAL_STATES = {1: "done", 3: "failed", 4: "skipped"}


def states_in(text: str) -> dict[int, str]:
    """Task id → its latest state word, read back from a rendered text of any of the three front ends
    (the terminal writes a log, so the last line about a task is its state)."""
    found = {}
    for tid in (1, 2, 3, 4):
        hits = re.findall(rf"(?:#|\[| ){tid}(?:\]|\.| )[^\n]*?\b(waiting|running|done|failed|skipped|stopped)\b", text)
        if hits:
            found[tid] = hits[-1]
    return found


def test_the_model_folds_events_into_stages_and_task_states() -> None:
    p = Progress(started=0.0)
    assert p.stage == "planning"
    p.apply(EVENTS[0], now=0.1)
    assert p.stage == "executing" and {t.state for t in p.tasks.values()} == {"waiting"}
    for e in EVENTS[1:]:
        p.apply(e, now=1.0)
    assert {tid: t.state for tid, t in p.tasks.items()} == {**FINAL_STATES, 2: "waiting"}
    assert p.tasks[3].error.startswith("The model facebook/detr-resnet-50")
    assert p.apply(ResponseDelta("A cat"), now=2.0) and not p.apply(ResponseDelta(" sits."), now=2.1)
    assert p.stage == "responding" and p.answer == "A cat sits."
    p.stop("I was restarted.", now=3.0)
    assert p.stage == "stopped" and p.tasks[2].state == "stopped" and p.tasks[1].state == "done"
    assert not p.apply(Done(RunRecord("r")), now=4.0), "a stopped run takes no more events"


def test_terminal_discord_and_slack_show_the_same_stages_and_states() -> None:
    out = io.StringIO()
    terminal = TerminalRenderer(out, color=False, err=io.StringIO())
    model = Progress(started=0.0)
    for e in EVENTS:
        terminal.render(e)
        model.apply(e, now=1.0)
    discord_text = render_progress(model, now=1.0)
    slack_text = render_status(model)
    terminal_text = out.getvalue()
    for name, text in (("terminal", terminal_text), ("discord", discord_text), ("slack", slack_text)):
        got = states_in(text)
        assert {k: got.get(k) for k in FINAL_STATES} == FINAL_STATES, (name, text)
        assert "still loading" in text, name
    # the waiting task is shown as waiting where a status message is re-rendered
    assert states_in(discord_text)[2] == states_in(slack_text)[2] == "waiting"

    done = Done(RunRecord("r", tasks=list(PLAN), response="A cat.", timings_ms={"total": 2000.0}))
    terminal.render(ResponseDelta("A cat."))
    terminal.render(done)
    model.apply(ResponseDelta("A cat."), now=1.5)
    model.apply(done, now=2.0)
    assert model.stage == "done" and model.elapsed == 2.0
    assert "Finished in 2.0 s" in render_progress(model, now=2.0)
    assert render_status(model).startswith(":white_check_mark: Done in 2.0 s.")
    assert out.getvalue().rstrip().endswith("A cat.")


def test_a_failed_run_reads_the_same_everywhere() -> None:
    err = io.StringIO()
    terminal = TerminalRenderer(io.StringIO(), color=False, err=err)
    model = Progress(started=0.0)
    done = Done(RunRecord("r", status="error", error="The controller LLM at example.org cannot be reached."))
    terminal.render(done)
    model.apply(done, now=1.0)
    for text in (err.getvalue(), render_progress(model, now=1.0), render_status(model)):
        assert "The controller LLM at example.org cannot be reached." in text


def test_a_notice_is_shown_once_on_every_front_end():
    from pipeline.types import Notice

    p = Progress()
    note = "The Hugging Face Hub could not be reached, so only the models known to be served are offered."
    assert p.apply(Notice(note)) is True
    assert p.apply(Notice(note)) is False
    assert p.notes == [note]
    assert render_progress(p).count(note) == 1
    assert render_status(p).count(note) == 1


def test_tasks_announced_early_and_then_discarded_leave_the_progress():
    from pipeline.types import PlanDiscarded, Task, TaskPlanned

    p = Progress()
    early = Task(0, "image-classification", (), {"image": "image-1"})
    assert p.apply(TaskPlanned(early)) and p.stage == "executing" and list(p.tasks) == [0]
    assert p.apply(TaskStarted(0, "m/a")) and p.tasks[0].state == "running"
    assert p.apply(PlanDiscarded("task 1 is unknown", (0,)))
    assert p.tasks == {} and p.stage == "planning"
    assert "image-classification" not in render_progress(p) and "Planning" in render_progress(p)
