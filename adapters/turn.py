"""One turn followed for every front end: THE loop from the service's events to what a user sees.

Every front end (Slack, Discord, the HTTP API streamed and not, MCP, the terminal's ``run`` and
``chat``) hands :func:`follow` the events of one turn (``Service.handle``) and a small
:class:`TurnView` saying how it shows progress, a notice, the files, the answer and the end. This
module owns the rest, so the same moment reads the same on every front end:

* the progress model (:class:`adapters.progress.Progress`), folded from every event;
* the outcome (:class:`Outcome`): ``answered``; an answer that lacks something (``partial``,
  ``deadline``, ``stopped``, said in one notice naming the tasks that did not finish); no answer
  (``failed``, or ``deadline`` when the time limit left none); the service refusing the request
  (``refused``: the error's own sentence, :func:`adapters.progress.user_sentence`); the turn
  cancelled from outside (``restarted``: shutdown; the view's end is shielded, then the
  cancellation goes on); an unexpected exception or a stream without ``Done`` (``crashed``: one
  log line with the traceback for the operator, :data:`CRASHED` for the user); the delivery taken
  by another process sharing the store (``elsewhere``: no event at all; the view is not called);
* the sentences of those moments, each written once here (:data:`RESTARTED`, :data:`CRASHED`,
  :func:`notice_of`), or the error's or the record's own; :data:`INTERRUPTED_ELSEWHERE`, said
  by the front ends that find a turn a dead process left, and :data:`STARTED_OVER`.

The command line's exit status is not decided here: it stays
:func:`hugginggpt.common.record_exit_status` of the record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bot.approval import WAITING
from bot.metrics import TurnMetrics
from pipeline.errors import HuggingGPTError
from pipeline.replanning import last_round_ids, unsettled
from pipeline.types import Done, Event, RunRecord

from .progress import Progress
from .progress import record_error, user_sentence

log = logging.getLogger("adapters.turn")

RESTARTED = "I was restarted before finishing this request; please send it again in a minute."
"""What a user reads for a turn cut off by a shutdown (or refused while shutting down)."""
CRASHED = "Something went wrong on my side while answering; the details are in my log. Please try again."
"""What a user reads for a turn that failed in a way nobody planned for (the log has the traceback)."""

STARTED_OVER = ("Starting a new conversation: the files and answers of our earlier messages are no longer used. "
                "Send a request (with files if it needs them).")
"""Said when a user starts their conversation over (a DM's "new")."""

INTERRUPTED_ELSEWHERE = ("The process working on your last request here stopped unexpectedly before it finished; "
                         "please ask again.")
"""Said in a conversation whose turn a dead process left running (another process found it)."""

Moment = Literal["answered", "partial", "deadline", "stopped", "failed", "refused", "restarted", "crashed", "elsewhere",
                 "awaiting"]
"""How a turn ended, as a user sees it (see the module docstring); ``awaiting``: its plan waits for
approval (:mod:`bot.approval`; the view got the ``ApprovalNeeded`` event with its progress)."""


@dataclass
class Outcome:
    """How one turn ended.

    Attributes:
        moment: see :data:`Moment`.
        sentence: what the user reads about it: the notice of an answer that lacks something, the
            failure sentence of one with none; ``None`` for a full answer.
        record: the run's record (``None`` when the turn ended before ``Done``).
        error: the exception that ended the turn (refused, crashed), else ``None``.
    """

    moment: Moment
    sentence: str | None = None
    record: RunRecord | None = None
    error: BaseException | None = field(default=None, repr=False)

    @property
    def answered(self) -> bool:
        """Whether there is an answer to show (the record's, :attr:`RunRecord.answered`)."""
        return self.record is not None and self.record.answered


def _unfinished(record: RunRecord, why: bool = False) -> str:
    """The tasks the answer lacks, for a sentence: ``task 2 (image-to-text), task 3 (…)``; with
    ``why``, each with its error (``task 2 (image-to-text): No model answered; …``)."""
    names = {t.id: t.task for t in record.tasks}
    parts = []
    for tid in unsettled(record.tasks, record.results, last_round_ids(record.rounds)):
        result = record.results.get(tid)
        error = (result.error or "").strip().rstrip(".") if why and result is not None else ""
        parts.append(f"task {tid} ({names.get(tid, '?')})" + (f": {error[:200]}" if error else ""))
    return ("; " if why else ", ").join(parts)


def notice_of(record: RunRecord) -> tuple[Moment, str | None]:
    """The moment of a finished run and the sentence said with its answer (or instead of it).

    Args:
        record: the run's record (from ``Done``).

    Returns:
        ``(moment, sentence)``: ``("answered", None)`` for a full answer; ``stopped``,
        ``deadline`` or ``partial`` with the one sentence naming the tasks that did not finish;
        ``failed`` (or ``deadline``) with the record's own failure sentence when it has no answer.
    """
    if record.status == "awaiting approval":
        return "awaiting", WAITING
    if not record.answered:
        return ("deadline" if record.deadline_passed else "failed"), record_error(record) or CRASHED
    tasks = _unfinished(record)
    if record.stopped:
        return "stopped", (f"You stopped this run before {tasks} finished; the answer covers what finished."
                           if tasks else "You stopped this run; the answer covers what finished.")
    if record.deadline_passed:
        return "deadline", (f"The time limit for this request passed before {tasks} finished; the answer "
                            "covers what finished." if tasks else
                            "The time limit for this request passed while the answer was being written; it is cut short.")
    if record.status == "partial":
        tasks = _unfinished(record, why=True)
        if tasks:
            return "partial", f"Part of this request failed: {tasks}. The answer covers what finished."
        if record.left_out:  # nothing failed, but part of the request was not done (pipeline.coverage)
            return "partial", "Part of this request was not done: " + " ".join(record.left_out)
        return "partial", "Part of this request failed; the answer covers what finished."
    return "answered", None


class TurnView(Protocol):
    """How one front end shows one turn; :func:`follow` calls it, in this order: :meth:`progress`
    for each event but ``Done``; then, for an answered run, :meth:`answer`,
    :meth:`files` and (when the answer lacks something) :meth:`notice`; last :meth:`end`, always.
    A view may show each at once or keep it for :meth:`end` (to post in its platform's order)."""

    async def progress(self, progress: Progress, event: Event) -> None:
        """Show ``progress``, already folded with ``event`` (every event but ``Done``: each answer
        delta too, which a view streaming the answer needs); must not block long."""
        ...

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        """Show the answer of an answered run (``record.response``; ``progress.answer`` streamed)."""
        ...

    async def files(self, record: RunRecord) -> None:
        """Show the run's generated files (``record.files``, possibly empty)."""
        ...

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """Say ``sentence``: what the answer lacks (partial, deadline, stopped)."""
        ...

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """The turn is over: close the progress display; for a failure, say ``outcome.sentence``."""
        ...


async def follow(events: AsyncIterable[Event], view: TurnView, *, progress: Progress | None = None,
                 where: str = "") -> Outcome:
    """Follow one turn's ``events`` into ``view`` (see the module docstring).

    Args:
        events: the turn's events (``Service.handle``); it may raise ``HuggingGPTError`` (refused).
        view: the front end's view.
        progress: the model to fold the events into (default: a new one); shown by the view.
        where: the turn's place for the operator's log lines (``"slack C1/1700.1"``); its first
            word is the front end the metrics count the turn under (:mod:`bot.metrics`).

    Returns:
        The :class:`Outcome`; its sentence was said by the view.

    Raises:
        asyncio.CancelledError: the turn was cancelled (shutdown); the view's end said
            :data:`RESTARTED` first, shielded from the cancellation.
        Exception: whatever the view raised (its platform's failure, such as a closed pipe): the
            front end handles its own platform; only the events' failures are the turn's moments.
    """
    progress = progress if progress is not None else Progress()
    aclose = getattr(events, "aclose", None)
    counted = TurnMetrics(where)  # Prometheus: in flight now, counted by how it ends (bot.metrics)
    try:
        outcome = await _follow(events, view, progress, where)
        counted.ended(outcome.moment, outcome.record)
        return outcome
    except asyncio.CancelledError:
        counted.ended("restarted", None)
        raise
    finally:
        counted.close()  # a view's own failure: no longer in flight, not a turn's outcome
        if aclose is not None:  # given up early (a view's failure): the service's turn ends now, not when collected
            await aclose()


async def _follow(events: AsyncIterable[Event], view: TurnView, progress: Progress, where: str) -> Outcome:
    record: RunRecord | None = None
    showing = False  # the view's own failures are the view's (a closed pipe, a platform's refusal)
    seen = False
    try:
        async for event in events:
            seen = True
            progress.apply(event)
            if isinstance(event, Done):
                record = event.record
            else:
                showing = True
                await view.progress(progress, event)
                showing = False
    except HuggingGPTError as e:
        if showing:
            raise
        log.info("turn %s refused: %s", where, e)  # the user's doing: said to them, noted for the operator
        return await _end(view, progress, Outcome("refused", user_sentence(e), error=e))
    except asyncio.CancelledError:
        outcome = Outcome("restarted", RESTARTED)
        progress.stop(RESTARTED)
        await asyncio.shield(_end(view, progress, outcome))
        raise
    except Exception as e:
        if showing:
            raise
        log.exception("turn %s crashed", where)
        return await _end(view, progress, Outcome("crashed", CRASHED, error=e))
    if not seen:
        log.info("turn %s is answered by another process", where)
        return Outcome("elsewhere")
    if record is None:
        log.error("turn %s ended without Done", where)
        return await _end(view, progress, Outcome("crashed", CRASHED))
    moment, sentence = notice_of(record)
    outcome = Outcome(moment, sentence, record)
    if outcome.answered:
        await view.answer(record, progress)
        await view.files(record)
        if sentence is not None:
            await view.notice(sentence, outcome)
    await view.end(outcome, progress)
    return outcome


async def _end(view: TurnView, progress: Progress, outcome: Outcome) -> Outcome:
    """End a turn that has no record: the progress shows it stopped with the outcome's sentence."""
    if not progress.finished:
        progress.stop(outcome.sentence or CRASHED)
    await view.end(outcome, progress)
    return outcome
