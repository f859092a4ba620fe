"""One run's reply in a Slack thread, live: the plan as task cards in a chat stream, then the answer
streamed as Markdown; or, where streaming is refused or the stream closes, a status message edited
with ``chat.update`` (the fallback the issue and PLATFORMS.md describe).

Slack features used (docs.slack.dev): ``chat.startStream`` / ``appendStream`` / ``stopStream``
through slack_sdk's ``AsyncChatStream`` with ``task_display_mode="plan"``: a ``plan_update`` chunk
titles the plan, one ``task_update`` chunk per planned task (``pending`` → ``in_progress`` →
``complete`` | ``error``) carries its model and its output or error; ``markdown_text`` at most
12,000 characters per call; in a channel a stream needs ``recipient_user_id`` and
``recipient_team_id``. ``assistant.threads.setStatus`` shows a loading status while the bot works
(refreshed before Slack clears it after two minutes). A Stop button (``actions`` block) rides on the
reply while the run is going; feedback buttons (``context_actions`` with ``feedback_buttons``) end
the finished answer.

Nothing here decides about tasks: :class:`adapters.progress.Progress` is the single source of what is
shown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiolimiter import AsyncLimiter
from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import BlocksChunk, MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from adapters.editor import MessageEditor
from adapters.progress import Progress, TaskProgress

from .logic import NO_PREVIEWS, escape_slack, render_status, split_text, to_mrkdwn

log = logging.getLogger(__name__)

STOP_ACTION = "hugginggpt_stop"
"""``action_id`` of the Stop button; its ``value`` is the run id."""
FEEDBACK_ACTION = "hugginggpt_feedback"
"""``action_id`` of the feedback buttons; their values are ``good <conversation id>:<turn>`` / ``bad …``."""
MARKDOWN_LIMIT = 12_000
"""Characters of Markdown per streaming call (docs.slack.dev, ``chat.appendStream``)."""
STATUS_REFRESH = 90.0
"""Seconds between two ``assistant.threads.setStatus`` calls (Slack clears it after 120 s)."""
LOADING = ["Planning the tasks…", "Choosing models…", "Running the models…", "Writing the answer…"]

_CARD_STATUS = {"waiting": "pending", "running": "in_progress", "done": "complete",
                "failed": "error", "skipped": "error", "stopped": "error"}


def task_card(tid: int, line: TaskProgress, output: str | None = None) -> TaskUpdateChunk:
    """The task card of one planned task (a ``task_update`` chunk)."""
    title = line.task.task + (f" · {line.model}" if line.model else "")
    details = {"stopped": "Stopped before it finished."}.get(line.state, line.error if line.state in ("failed", "skipped") else None)
    return TaskUpdateChunk(id=f"task-{tid}", title=escape_slack(title[:200]), status=_CARD_STATUS[line.state],
                           details=escape_slack(details[:500]) if details else None,
                           output=escape_slack(output[:500]) if output else None)


def stop_blocks(run_id: str) -> list[dict[str, Any]]:
    """An ``actions`` block with the Stop button of run ``run_id``."""
    return [{"type": "actions", "block_id": "hugginggpt_run", "elements": [{
        "type": "button", "action_id": STOP_ACTION, "style": "danger", "value": run_id,
        "text": {"type": "plain_text", "text": "Stop"}}]}]


def feedback_blocks(turn_ref: str) -> list[dict[str, Any]]:
    """A ``context_actions`` block with the feedback buttons of a stored turn (``<conversation id>:<turn>``)."""
    return [{"type": "context_actions", "elements": [{
        "type": "feedback_buttons", "action_id": FEEDBACK_ACTION,
        "positive_button": {"text": {"type": "plain_text", "text": "Good answer"}, "value": f"good {turn_ref}"},
        "negative_button": {"text": {"type": "plain_text", "text": "Bad answer"}, "value": f"bad {turn_ref}"}}]}]


class LiveReply:
    """The reply to one request in a thread (see the module docstring).

    Args:
        client: the bot's web client.
        channel, thread_ts: where the request was made.
        user, team: the requester (the stream's recipient in channels).
        run_id: the run's id (the Stop and feedback buttons carry it).
        interval: minimum seconds between two updates of the reply.
        limiter: the process's ``chat.update`` budget (used by the fallback).
        streaming: try a chat stream first (``[slack] streaming``); ``False``: status message only.
        progress: the run's progress model (the event context's), shown as it changes.

    Attributes:
        mode: ``"stream"`` or ``"updates"`` (the fallback), once :meth:`start` returned.
    """

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str, *, user: str, team: str, run_id: str,
                 interval: float = 1.0, limiter: AsyncLimiter | None = None, streaming: bool = True,
                 progress: Progress | None = None) -> None:
        self.client, self.channel, self.thread_ts = client, channel, thread_ts
        self.user, self.team, self.run_id = user, team, run_id
        self.interval, self.limiter = interval, limiter
        self.mode = "stream"
        self.streaming = streaming
        self.progress = progress if progress is not None else Progress()
        self._stream: Any = None
        self._status: MessageEditor | None = None
        self._status_ts: str | None = None
        self._cards: dict[str, tuple[str, str | None]] = {}  # card id -> (status, title) sent
        self._plan_title: str | None = None
        self._answer_sent = 0
        self._notes_sent = 0  # the run's notices already in the stream (a status message shows them all)
        self._wake = asyncio.Event()
        self._sending = asyncio.Lock()  # held while a stream update is in flight: never cancelled mid-call
        self._writer: asyncio.Task | None = None
        self._loading: asyncio.Task | None = None

    async def start(self) -> None:
        """Open the reply: a chat stream showing "Planning…" with a Stop button, else a status
        message with one. Raises ``SlackApiError`` only when not even a message can be posted."""
        self._loading = asyncio.create_task(self._keep_status(), name=f"status-{self.channel}/{self.thread_ts}")
        if not self.streaming:
            await self._fall_back()
            self._writer = asyncio.create_task(self._write(), name=f"reply-{self.channel}/{self.thread_ts}")
            return
        try:
            self._stream = await self.client.chat_stream(
                channel=self.channel, thread_ts=self.thread_ts, recipient_user_id=self.user or None,
                recipient_team_id=self.team or None, task_display_mode="plan", buffer_size=MARKDOWN_LIMIT,
                **NO_PREVIEWS)
            self._plan_title = "Planning the tasks…"
            await self._stream.append(chunks=[PlanUpdateChunk(title=self._plan_title), BlocksChunk(blocks=stop_blocks(self.run_id))])
        except SlackApiError as e:
            log.info("chat stream refused in %s (%s); using a status message", self.channel, e.response.get("error"))
            await self._fall_back()
        self._writer = asyncio.create_task(self._write(), name=f"reply-{self.channel}/{self.thread_ts}")

    @property
    def ts(self) -> str | None:
        """The ``ts`` of the reply's message (the chat stream or the status message), once posted."""
        stream_ts = getattr(self._stream, "ts", None) if self._stream is not None else None
        return stream_ts or self._status_ts

    def show(self, progress: Progress) -> None:
        """Show ``progress`` (the newest state) within ``interval`` seconds; never waits."""
        self.progress = progress
        if self.mode == "updates" and self._status is not None:
            self._status.set(render_status(progress))
        else:
            self._wake.set()

    async def finish(self, answer_ok: bool, outputs: dict[int, str], turn_ref: str | None = None) -> str:
        """Show the final state and close the reply.

        Args:
            answer_ok: the run answered.
            outputs: task id → a short text of its output, for the task cards.
            turn_ref: ``<conversation id>:<turn>`` of the stored turn: feedback buttons are offered.

        Returns:
            The part of the answer that is not in the thread yet (``""`` when the stream carried
            it all); the caller posts it as messages.
        """
        await self._quiet()
        if self.mode == "stream":
            try:
                await self._flush(outputs, final=True)
                failed = "" if answer_ok else f"\n\n⚠️ {escape_slack(self.progress.error or 'The run failed.')}"
                await self._stream.stop(markdown_text=failed or None,
                                        blocks=feedback_blocks(turn_ref) if answer_ok and turn_ref else None)
                return ""
            except SlackApiError as e:
                log.info("chat stream in %s closed (%s); finishing with messages", self.channel, e.response.get("error"))
                await self._fall_back()
        assert self._status is not None
        await self._status.close(render_status(self.progress))
        return self.progress.answer[self._answer_sent:] if answer_ok else ""

    async def close_failed(self, sentence: str) -> None:
        """End the reply with ``sentence`` (mrkdwn) instead of an answer (a failure before the run)."""
        await self._quiet()
        if self.mode == "stream":
            try:
                await self._stream.stop(markdown_text=sentence)
                return
            except SlackApiError:
                await self._fall_back()
        assert self._status is not None
        await self._status.close(sentence)

    # ------------------------------------------------------------------ internals

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.mode != "stream":
                return
            async with self._sending:
                try:
                    await self._flush({})
                except SlackApiError as e:  # the server closed the stream (after some minutes): keep going with updates
                    log.info("chat stream in %s closed (%s); switching to status updates", self.channel, e.response.get("error"))
                    await self._fall_back()
                    return
            await asyncio.sleep(self.interval)

    async def _quiet(self) -> None:
        """Stop the background updates and the loading status (the reply is about to be closed).
        An update in flight finishes first, so what it sent is counted and never sent twice."""
        async with self._sending:
            for job in (self._writer, self._loading):
                if job is not None and not job.done():
                    job.cancel()
                    await asyncio.gather(job, return_exceptions=True)
        await self._set_status("")

    async def _flush(self, outputs: dict[int, str], *, final: bool = False) -> None:
        p = self.progress
        chunks: list[Any] = []
        round_ = f" (re-planned, round {p.round})" if p.round > 1 else ""
        title = f"Plan{round_}: {len(p.tasks)} task{'s' if len(p.tasks) != 1 else ''}" if p.planned else self._plan_title
        if title != self._plan_title:
            chunks.append(PlanUpdateChunk(title=title))
            self._plan_title = title
        for tid in sorted(p.tasks):
            card = task_card(tid, p.tasks[tid], outputs.get(tid) if final else None)
            sent = (card.status, card.title)
            if self._cards.get(card.id) != sent or (final and card.output):
                chunks.append(card)
                self._cards[card.id] = sent
        for note in p.notes[self._notes_sent:]:  # before the answer, or after it when they come last
            gap = "\n\n" if self._answer_sent else ""
            chunks.append(MarkdownTextChunk(text=f"{gap}ℹ️ {escape_slack(note)}\n\n"))
        self._notes_sent = len(p.notes)
        text = p.answer[self._answer_sent:]
        while chunks or text:
            piece = text[:MARKDOWN_LIMIT // 5]  # escaped, it stays within the limit (at most 5 characters each)
            # model and controller output is untrusted: "<!channel>" or "<@U…>" must not ping anyone
            await self._stream.append(chunks=[*chunks, *([MarkdownTextChunk(text=escape_slack(piece))] if piece else [])])
            self._answer_sent += len(piece)
            text, chunks = text[len(piece):], []

    async def _fall_back(self) -> None:
        """Switch to a status message edited with ``chat.update`` (posted now, with a Stop button)."""
        self.mode = "updates"
        if self._status is not None:
            return
        text = render_status(self.progress)
        resp = await self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts, text=text,
                                                  blocks=self._status_blocks(text, running=True), **NO_PREVIEWS)
        self._status_ts = str(resp["ts"])
        self._status = MessageEditor(self._update_status, text, interval=self.interval, limiter=self.limiter,
                                     name=f"{self.channel}/{self._status_ts}")

    def _status_blocks(self, text: str, *, running: bool) -> list[dict[str, Any]]:
        section = {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}
        return [section, *stop_blocks(self.run_id)] if running else [section]

    async def _update_status(self, text: str) -> None:
        running = not self.progress.finished
        await self.client.chat_update(channel=self.channel, ts=self._status_ts, text=text,
                                      blocks=self._status_blocks(text, running=running), **NO_PREVIEWS)

    async def _keep_status(self) -> None:
        """``assistant.threads.setStatus`` now and every :data:`STATUS_REFRESH` seconds."""
        started = time.monotonic()
        while True:
            await self._set_status("is working on it…", LOADING)
            await asyncio.sleep(max(0.0, STATUS_REFRESH - (time.monotonic() - started) % STATUS_REFRESH))

    async def _set_status(self, status: str, loading: list[str] | None = None) -> None:
        try:
            await self.client.assistant_threads_setStatus(channel_id=self.channel, thread_ts=self.thread_ts,
                                                          status=status, **({"loading_messages": loading} if loading else {}))
        except SlackApiError as e:  # a courtesy: an app without the assistant scope still answers
            log.debug("setStatus refused in %s: %s", self.channel, e.response.get("error"))


def answer_messages(text: str) -> list[str]:
    """The answer (Markdown) as Slack messages: mrkdwn, split under the size limit."""
    return split_text(to_mrkdwn(text)) if text.strip() else []
