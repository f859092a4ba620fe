"""How we reach Slack: posting and throttled updating, one run's live reply, file downloads and
uploads (Web API calls through slack_sdk's ``AsyncWebClient``).

Slack's rules applied here (docs.slack.dev):

* ``chat.update`` is a Tier 3 method (about 50 calls per minute); a status message is updated at
  most once per ``interval`` seconds and every update in the process passes one shared
  ``aiolimiter.AsyncLimiter``; intermediate texts are coalesced, the latest wins.
* ``chat.postMessage`` allows about one message per second per channel (short bursts are fine).
* ``url_private(_download)`` needs ``Authorization: Bearer xoxb-...`` and the ``files:read``
  scope; without them Slack answers 200 with an HTML sign-in page, which we refuse.
* Files go out with ``files_upload_v2`` (``files.getUploadURLExternal``, upload, then
  ``files.completeUploadExternal``), which needs ``files:write``.
* ``{"ok": false, "error": "missing_scope", "needed": "files:write"}`` becomes a
  :class:`SlackScopeError` whose sentence names the scope.

A run's live reply (:class:`LiveReply`): the plan as task cards in a chat stream, then the answer
streamed as Markdown; or, where streaming is refused or the stream closes, a status message edited
with ``chat.update``. ``chat.startStream`` / ``appendStream`` / ``stopStream`` go through
slack_sdk's ``AsyncChatStream`` with ``task_display_mode="plan"``: a ``plan_update`` chunk titles
the plan, one ``task_update`` chunk per planned task (``pending`` → ``in_progress`` → ``complete``
| ``error``) carries its model and its output or error; ``markdown_text`` at most 12,000
characters per call; in a channel a stream needs ``recipient_user_id`` and ``recipient_team_id``.
``assistant.threads.setStatus`` shows a loading status while the bot works (refreshed before Slack
clears it after two minutes). A Stop button rides on the reply while the run is going; feedback
buttons end the finished answer. Nothing here decides about tasks:
:class:`adapters.progress.Progress` is the single source of what is shown.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import time
from typing import Any, Iterable
from urllib.parse import urlsplit

import aiohttp
from aiolimiter import AsyncLimiter
from cachetools import TTLCache
from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import BlocksChunk, MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from adapters.editor import MessageEditor
from adapters.progress import Progress, TaskProgress
from bot.errors import InputError
from bot.incoming import IncomingFile
from pipeline.errors import HuggingGPTError
from pipeline.types import Resource

from .logic import NO_PREVIEWS, escape_slack, missing_scope_sentence, render_status, split_text, to_mrkdwn

log = logging.getLogger(__name__)

MiB = 1024 * 1024

Origin = tuple[str, str, int]
"""``(scheme, host, port)`` of a URL, the unit the bot token is scoped to (RFC 6454)."""

#: Origins that may receive the bot token when downloading a user's file (``url_private`` is served
#: by https://files.slack.com, https://files.slack-gov.com for GovSlack); the origin of a non-Slack
#: API base URL (``--api-url``, tests) is added by the caller. Scheme, host and port must all match.
DEFAULT_FILE_ORIGINS: frozenset[Origin] = frozenset({("https", "files.slack.com", 443), ("https", "files.slack-gov.com", 443)})


def origin_of(url: str) -> Origin | None:
    """``(scheme, host, port)`` of ``url`` with the scheme's default port filled in; ``None`` when
    it has no host, or a scheme other than http/https, or carries credentials."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    if scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None
    return scheme, parts.hostname.lower(), port


def keep_alive(client: AsyncWebClient) -> aiohttp.ClientSession | None:
    """Give ``client`` one ``aiohttp`` session for all its Web API calls (its documented
    ``session`` attribute), so that calls reuse pooled connections to Slack.

    Without one, ``slack_sdk`` opens a new ``ClientSession`` for every call: a new TCP (and TLS)
    connection per ``chat.update``, paid on the event loop (measured by ``bench_slack``: 696
    connections for 210 events). The session's timeout is the client's (``client.timeout``,
    seconds per call), as the per-call sessions had.

    Returns:
        The session made (the caller closes it), or ``None`` when the client already had one or
        no event loop is running (the client then keeps ``slack_sdk``'s per-call sessions).
    """
    if client.session is not None:
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    client.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=client.timeout))
    return client.session


class SlackScopeError(HuggingGPTError):
    """The Slack app lacks an OAuth scope. ``needed`` is the scope Slack named (``files:write``)."""

    def __init__(self, needed: str | None, action: str, detail: str | None = None) -> None:
        super().__init__(missing_scope_sentence(needed, action), detail)
        self.needed = needed


class SlackCallError(HuggingGPTError):
    """A Web API call failed for another reason (``error`` holds Slack's code)."""

    def __init__(self, error: str, action: str) -> None:
        super().__init__(f"Slack refused to {action} ({error}); please try again later.", f"Slack error {error} while trying to {action}")
        self.error = error


def map_slack_error(exc: SlackApiError, action: str) -> HuggingGPTError:
    """Turn a ``SlackApiError`` into a :class:`HuggingGPTError` with the user's sentence.

    Args:
        exc: the error slack_sdk raised (``exc.response`` holds Slack's JSON).
        action: what we tried, as a verb phrase ("upload the generated files").
    """
    data = exc.response.data if isinstance(exc.response.data, dict) else {}
    code = str(data.get("error") or "unknown_error")
    if code == "missing_scope":
        needed = data.get("needed")
        return SlackScopeError(needed, action, f"missing_scope needed={needed} provided={data.get('provided')} while trying to {action}")
    return SlackCallError(code, action)


class Poster:
    """Posts thread messages within Slack's per-channel pace (about one per second, bursts of 5).

    Args:
        client: the bot's ``AsyncWebClient``.
        per_channel_rate: messages per second per channel on average.
    """

    def __init__(self, client: AsyncWebClient, per_channel_rate: float = 1.0) -> None:
        self.client = client
        self._rate = per_channel_rate
        self._limiters: TTLCache[str, AsyncLimiter] = TTLCache(maxsize=5000, ttl=120)

    def _limiter(self, channel: str) -> AsyncLimiter:
        lim = self._limiters.get(channel)
        if lim is None:
            lim = AsyncLimiter(5, 5 / self._rate)
        self._limiters[channel] = lim  # (re)set: an active channel keeps its bucket
        return lim

    async def post(self, channel: str, thread_ts: str | None, text: str) -> str:
        """Post ``text`` (mrkdwn, < 4000 characters) in the thread; return the new message's ``ts``.

        Raises:
            SlackScopeError: ``chat:write`` is missing. SlackCallError: another refusal.
        """
        async with self._limiter(channel):
            try:
                resp = await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, **NO_PREVIEWS)
            except SlackApiError as e:
                raise map_slack_error(e, "post a message") from None
        return str(resp["ts"])

    async def update(self, channel: str, ts: str, text: str) -> None:
        """Replace the text of message ``ts`` (``chat.update``). Raises like :meth:`post`."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text, **NO_PREVIEWS)
        except SlackApiError as e:
            raise map_slack_error(e, "update my status message") from None


def _file_label(f: dict[str, Any]) -> str:
    return str(f.get("name") or f.get("title") or f.get("id") or "the file")


async def download_file(
    session: aiohttp.ClientSession,
    file: dict[str, Any],
    *,
    token: str,
    max_bytes: int,
    allowed_origins: Iterable[Origin] = DEFAULT_FILE_ORIGINS,
    timeout: float = 60.0,
) -> IncomingFile:
    """Download a file a user attached to a message, with the bot token.

    Args:
        session: an aiohttp session (no default auth headers).
        file: the file object of the message event (``url_private_download``, ``name``,
            ``mimetype``, ``size``).
        token: the bot token (``xoxb-...``); sent only to ``allowed_origins``.
        max_bytes: largest accepted file in bytes (``[storage] max_file_bytes``).
        allowed_origins: ``(scheme, host, port)`` the token may be sent to (:func:`origin_of`);
            redirects are not followed.
        timeout: seconds for the whole download.

    Returns:
        The bytes with the user's file name and Slack's declared MIME type.

    Raises:
        InputError: the file is too large, not hosted by Slack, unreachable, or Slack answered with
            its HTML sign-in page (missing token or ``files:read`` scope).
    """
    name = _file_label(file)
    size = file.get("size")
    if isinstance(size, int) and size > max_bytes:
        raise InputError(
            f"The file {name} is too large ({size / MiB:.1f} MB); the limit is {max_bytes / MiB:.0f} MB.",
            f"file {file.get('id')} size {size} > {max_bytes}",
        )
    url = file.get("url_private_download") or file.get("url_private")
    if not url or file.get("mode") in ("external", "email") or file.get("is_external"):
        raise InputError(f"The file {name} is not stored in Slack, so I cannot use it; please upload the file itself.",
                         f"file {file.get('id')} mode={file.get('mode')} has no url_private")
    origin = origin_of(url)
    if origin is None or origin not in set(allowed_origins):
        raise InputError(f"The file {name} is not hosted by Slack, so I did not download it.",
                         f"refusing to send the bot token to {origin or 'an unusable URL'}")
    try:
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}, allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            _check_response(resp, file, name)
            data = await _read_bounded(resp, file, name, max_bytes)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise InputError(f"I could not download {name} from Slack; please try again.", f"download {file.get('id')}: {e!r}") from None
    if not data:
        raise InputError(f"The file {name} is empty.", f"file {file.get('id')} has 0 bytes")
    return IncomingFile(bytes(data), name=file.get("name"), declared_mime=file.get("mimetype"))


def _check_response(resp: aiohttp.ClientResponse, file: dict[str, Any], name: str) -> None:
    """Refuse an answer that is not the file: another status, or Slack's HTML sign-in page."""
    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if resp.status != 200:
        raise InputError(f"I could not download {name} from Slack (HTTP {resp.status}); please attach it again.",
                         f"download {file.get('id')} status {resp.status}")
    if ctype == "text/html" and not str(file.get("mimetype", "")).startswith("text/html"):
        raise InputError(
            f"I could not download {name}: Slack sent its sign-in page instead of the file, "
            "so this app probably lacks the `files:read` scope; ask a workspace admin to add it and reinstall the app.",
            f"download {file.get('id')} returned text/html (login page): missing token or files:read scope",
        )


async def _read_bounded(resp: aiohttp.ClientResponse, file: dict[str, Any], name: str, max_bytes: int) -> bytearray:
    """The body, refused as soon as it grows past ``max_bytes``."""
    data = bytearray()
    async for chunk in resp.content.iter_chunked(256 * 1024):
        data += chunk
        if len(data) > max_bytes:
            raise InputError(
                f"The file {name} is too large; the limit is {max_bytes / MiB:.0f} MB.",
                f"file {file.get('id')} exceeded {max_bytes} bytes while downloading",
            )
    return data


def upload_name(resource: Resource) -> str:
    """File name for a generated resource: the stored name, or ``<id><ext>`` from its MIME type."""
    if resource.name:
        return resource.name
    ext = mimetypes.guess_extension(resource.mime) or resource.path.suffix or ""
    return f"{resource.id}{ext}"


async def upload_files(client: AsyncWebClient, channel: str, thread_ts: str, resources: list[Resource]) -> list[str]:
    """Upload generated media into the thread with ``files_upload_v2``.

    Args:
        client: the bot's ``AsyncWebClient``.
        channel: channel id; thread_ts: the thread's parent ``ts``.
        resources: files from ``RunRecord.files`` (read from ``Resource.path``).

    Returns:
        Slack file ids, in order.

    Raises:
        SlackScopeError: ``files:write`` is missing. SlackCallError / InputError: other failures.
    """
    if not resources:
        return []
    uploads = []
    for r in resources:
        data = await asyncio.to_thread(r.path.read_bytes)
        title = r.description or upload_name(r)
        if len(title) > 250:  # keep file titles short in the thread
            title = title[:249] + "…"
        uploads.append({"content": data, "filename": upload_name(r), "title": title})
    try:
        resp = await client.files_upload_v2(channel=channel, thread_ts=thread_ts, file_uploads=uploads)
    except SlackApiError as e:
        raise map_slack_error(e, "upload the generated files") from None
    except Exception as e:  # slack_sdk raises SlackRequestError when the upload URL refuses the bytes
        raise SlackCallError(type(e).__name__, "upload the generated files") from e
    return [f["id"] for f in resp.get("files") or []]



STOP_ACTION = "hugginggpt_stop"
"""``action_id`` of the Stop button; its ``value`` is the run id."""
FEEDBACK_ACTION = "hugginggpt_feedback"
"""``action_id`` of the feedback buttons; their values are ``good <conversation id>:<turn>`` / ``bad …``."""
APPROVE_ACTIONS = ("hugginggpt_plan_run", "hugginggpt_plan_cancel", "hugginggpt_plan_drop")
"""``action_id`` of a waiting plan's Run and Cancel buttons (their ``value``: the plan id) and of its
"Run without step" menu (an option's ``value``: ``<plan id> <task id>``); :mod:`bot.approval`."""
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


def approval_blocks(plan_id: str, lines: list[str], tasks: list[tuple[int, str]], sentence: str) -> list[dict[str, Any]]:
    """Block Kit of a plan waiting for approval: its steps and estimate (``lines``, plain text),
    ``sentence``, Run and Cancel, and a menu to run it without one step (``tasks``: id, task).
    At most 25 steps are offered in the menu (Block Kit's limit is 100 options)."""
    body = "\n".join(escape_slack(line) for line in lines)
    elements: list[dict[str, Any]] = [
        {"type": "button", "action_id": APPROVE_ACTIONS[0], "style": "primary", "value": plan_id,
         "text": {"type": "plain_text", "text": "Run"}},
        {"type": "button", "action_id": APPROVE_ACTIONS[1], "style": "danger", "value": plan_id,
         "text": {"type": "plain_text", "text": "Cancel"}},
    ]
    if len(tasks) > 1:
        elements.append({"type": "static_select", "action_id": APPROVE_ACTIONS[2],
                         "placeholder": {"type": "plain_text", "text": "Run without step…"},
                         "options": [{"text": {"type": "plain_text", "text": f"Without step {i} ({name})"[:75]},
                                      "value": f"{plan_id} {i}"} for i, name in tasks[:25]]})
    return [{"type": "section", "text": {"type": "mrkdwn", "text": f"{body}\n_{escape_slack(sentence)}_"[:3000]}},
            {"type": "actions", "block_id": "approval", "elements": elements}]
