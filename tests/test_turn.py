"""The one turn loop (adapters/turn.py) on scripted event streams: each moment (answered, partial,
deadline, stopped, failed, refused, restarted, crashed) reaches the view as one outcome with the
one sentence for it, the view's calls come in the documented order, and the operator's log holds
the traceback of a crash (the user's sentence never does)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapters.progress import Progress
from adapters.turn import CRASHED, RESTARTED, Outcome, follow
from bot.errors import InputError
from pipeline.errors import DeadlineError
from pipeline.types import (
    Done, Event, Output, PlanReady, ResponseDelta, RunRecord, Task, TaskFailed, TaskFinished, TaskResult, TaskStarted,
)

CAPTION = Task(0, "image-to-text", args={"image": "image-1"})
DRAW = Task(1, "text-to-image", args={"text": "a cat"})


class Recorder:
    """A view that writes down what it was asked to show."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.ended = asyncio.Event()

    async def progress(self, progress: Progress, event: Event) -> None:
        self.calls.append(("progress", progress.stage))

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        self.calls.append(("answer", record.response))

    async def files(self, record: RunRecord) -> None:
        self.calls.append(("files", len(record.files)))

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        self.calls.append(("notice", sentence))

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        await asyncio.sleep(0)  # a real view awaits its platform: a cancelled turn must still get here
        self.calls.append(("end", None if outcome.answered else outcome.sentence))
        self.ended.set()

    def said(self) -> list[object]:
        return [value for kind, value in self.calls if kind in ("notice", "end") and value]


async def script(*events: Event, then: BaseException | None = None):
    for e in events:
        yield e
        await asyncio.sleep(0)
    if then is not None:
        raise then


def ok(task: Task) -> TaskResult:
    return TaskResult(task.id, "ok", Output(text="a photo of a cat"), model="m")


def failed(task: Task, why: str) -> TaskResult:
    return TaskResult(task.id, "failed", error=why, model="m")


def plan_events(*results: TaskResult) -> list[Event]:
    out: list[Event] = [PlanReady((CAPTION, DRAW)), TaskStarted(0, "m"), TaskStarted(1, "m")]
    out += [TaskFinished(r) if r.status == "ok" else TaskFailed(r) for r in results]
    return [*out, ResponseDelta("Here is what I found.")]


def record(status="ok", *results: TaskResult, **kw) -> RunRecord:
    return RunRecord(request="caption and draw", tasks=[CAPTION, DRAW], results={r.task_id: r for r in results},
                     response="Here is what I found." if status != "error" else "", status=status, **kw)


async def test_a_full_answer_is_shown_in_order_with_no_sentence():
    view = Recorder()
    rec = record("ok", ok(CAPTION), ok(DRAW))
    outcome = await follow(script(*plan_events(ok(CAPTION), ok(DRAW)), Done(rec)), view)
    assert outcome.moment == "answered" and outcome.sentence is None and outcome.answered
    kinds = [k for k, _ in view.calls]
    assert kinds[-3:] == ["answer", "files", "end"] and view.calls[-1] == ("end", None) and set(kinds[:-3]) == {"progress"}
    assert view.said() == []


async def test_a_partial_answer_names_the_failed_task_in_one_notice():
    view = Recorder()
    rec = record("partial", ok(CAPTION), failed(DRAW, "No text-to-image model answered."))
    outcome = await follow(script(*plan_events(ok(CAPTION)), Done(rec)), view)
    assert outcome.moment == "partial"
    assert view.said() == ["Part of this request failed: task 1 (text-to-image): No text-to-image model answered. "
                           "The answer covers what finished."]
    assert [k for k, _ in view.calls][-4:] == ["answer", "files", "notice", "end"]


async def test_a_deadline_answer_names_the_unfinished_task():
    view = Recorder()
    rec = record("partial", ok(CAPTION), failed(DRAW, "The run's deadline of 3 seconds passed."), deadline_passed=True)
    outcome = await follow(script(*plan_events(ok(CAPTION)), Done(rec)), view)
    assert outcome.moment == "deadline"
    assert view.said() == ["The time limit for this request passed before task 1 (text-to-image) finished; "
                           "the answer covers what finished."]


async def test_a_deadline_with_no_answer_says_the_record_sentence():
    view = Recorder()
    err = DeadlineError("The run's deadline of 2 seconds passed during task planning; nothing was run.")
    rec = RunRecord(request="x", status="error", error=err.user_message, failure=err, deadline_passed=True)
    outcome = await follow(script(Done(rec)), view)
    assert outcome.moment == "deadline" and not outcome.answered
    assert view.calls == [("end", err.user_message)]


async def test_a_stopped_run_says_it_was_stopped_and_what_did_not_finish():
    view = Recorder()
    rec = record("partial", ok(CAPTION), failed(DRAW, "Stopped before it finished."), stopped=True)
    outcome = await follow(script(*plan_events(ok(CAPTION)), Done(rec)), view)
    assert outcome.moment == "stopped"
    assert view.said() == ["You stopped this run before task 1 (text-to-image) finished; the answer covers what finished."]


async def test_a_failed_run_says_its_record_error_and_shows_no_answer():
    view = Recorder()
    rec = RunRecord(request="x", status="error", error="The controller is not reachable.")
    outcome = await follow(script(Done(rec)), view)
    assert outcome.moment == "failed" and view.calls == [("end", "The controller is not reachable.")]


async def test_a_refusal_says_the_error_sentence_and_logs_one_line(caplog):
    view = Recorder()
    with caplog.at_level(logging.INFO, "adapters.turn"):
        outcome = await follow(script(then=InputError("Please attach at most 4 files at a time.")), view, where="t1")
    assert outcome.moment == "refused" and view.said() == ["Please attach at most 4 files at a time."]
    assert [r.getMessage() for r in caplog.records] == ["turn t1 refused: Please attach at most 4 files at a time."]


async def test_an_unexpected_exception_is_a_crash_sentence_and_a_traceback_for_the_operator(caplog):
    view = Recorder()
    progress = Progress()
    with caplog.at_level(logging.ERROR, "adapters.turn"):
        outcome = await follow(script(PlanReady((CAPTION,)), TaskStarted(0, "m"), then=KeyError("secret detail")),
                               view, progress=progress, where="t2")
    assert outcome.moment == "crashed" and view.said() == [CRASHED] and "secret" not in CRASHED
    (line,) = caplog.records
    assert line.exc_info is not None and "turn t2 crashed" in line.getMessage()
    assert progress.stage == "stopped" and progress.tasks[0].state == "stopped"  # the running task shows stopped


async def test_a_stream_ending_without_done_is_a_crash(caplog):
    view = Recorder()
    with caplog.at_level(logging.ERROR, "adapters.turn"):
        outcome = await follow(script(PlanReady(())), view, where="t3")
    assert outcome.moment == "crashed" and view.said() == [CRASHED]
    assert any("ended without Done" in r.getMessage() for r in caplog.records)


async def test_a_cancelled_turn_says_restarted_shielded_then_stays_cancelled():
    view = Recorder()
    progress = Progress()
    started = asyncio.Event()

    async def endless():
        yield PlanReady((CAPTION,))
        started.set()
        await asyncio.sleep(3600)
        yield ResponseDelta("never")

    turn = asyncio.create_task(follow(endless(), view, progress=progress))
    await started.wait()
    await asyncio.sleep(0.01)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert view.said() == [RESTARTED] and progress.stage == "stopped" and progress.error == RESTARTED


async def test_a_view_failing_is_the_front_ends_failure_not_a_crash_sentence():
    class Broken(Recorder):
        async def progress(self, progress: Progress, event: Event) -> None:
            raise BrokenPipeError("the reader of the answer went away")

    view = Broken()
    with pytest.raises(BrokenPipeError):  # the command line ends quietly on it (exit status 141)
        await follow(script(PlanReady((CAPTION,)), Done(record("ok", ok(CAPTION)))), view)
    assert view.said() == []
