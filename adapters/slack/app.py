"""The Slack front end on slack-bolt (async): one app, one set of listeners for both transports.

``create_bolt_app(settings, service)`` builds the ``AsyncApp`` that Socket Mode
(``AsyncSocketModeHandler``) and HTTP mode (``app.web_app()`` / Events API) both serve; tests build
the same app production runs (collmbo's app factory; ChatGPT-in-Slack's single
``register_listeners``).

What a user sees: ``@bot <request>`` (files attached or not) in a channel gets a status message in
that message's thread, edited as the run progresses (plan, model and state per task), then the
answer (Markdown converted to mrkdwn, split under Slack's size limit) and the generated files.
A mention inside a thread continues that thread's conversation; in a thread the bot takes part
in, follow-ups need no mention (``[slack] followups_without_mention``). Direct messages work too.

Delivery rules (docs.slack.dev/apis/events-api): bolt acknowledges each event before our listener
runs (``process_before_response=False``); the listener does its checks without awaiting and hands
the work to a tracked task, so the acknowledgement never waits for the pipeline. Repeated
deliveries (retries, ``app_mention`` plus ``message``, Socket Mode redelivery) are answered once
(:class:`bot.limits.SeenKeys`); the bot's own messages and edits are ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiolimiter import AsyncLimiter
from cachetools import TTLCache
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.admission import Admission, Requester
from bot.limits import SeenKeys
from bot.progress import Progress
from bot.settings import Settings
from bot.incoming import ConversationKey, IncomingFile
from bot.errors import ConfigError, InputError
from pipeline.errors import HuggingGPTError
from pipeline.types import Done, RunRecord

from . import io as slack_io
from .live import LiveReply, answer_messages
from .controls import Controls
from .live import FEEDBACK_ACTION, STOP_ACTION
from .logic import (classify_message, delivery_key, event_payload, escape_slack, key_for, strip_mentions, unescape_slack,
                    wants_new_conversation)

log = logging.getLogger(__name__)

BACKEND_DOWN = "Something went wrong on my side and the request stopped; please try again in a few minutes."
RESTARTING = ":warning: I was restarted before finishing this request; please ask again."
STARTED_OVER = ("Starting a new conversation: the files and answers of our earlier messages are no longer used. "
                "Send a request (with files if it needs them).")
EMPTY_REQUEST = "Mention me with a request, for example: `@HuggingGPT describe this photo` with an image attached."


@dataclass
class Stats:
    """Counters for operators and the benchmark."""

    events: int = 0
    duplicates: int = 0
    ignored: int = 0
    runs: int = 0
    answers: int = 0
    errors: int = 0


class SlackBot(Controls):
    """State and behaviour behind the listeners (one per process).

    Args:
        settings: all settings (``[slack]`` and ``[storage] max_file_bytes`` are used here).
        service: the :class:`bot.service.Service` (only its contract is used).
        client: the bot's ``AsyncWebClient`` (the app's client).
        update_interval: minimum seconds between two edits of one status message (default 1.0).
        file_hosts: extra origins (``https://host[:port]`` URLs) the bot token may be sent to when
            downloading user files; scheme, host and port must match exactly.
    """

    def __init__(self, settings: Settings, service: Any, client: AsyncWebClient, *, update_interval: float = 1.0,
                 file_hosts: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.slack = settings.slack
        self.service = service
        self.client = client
        self.update_interval = update_interval
        self.poster = slack_io.Poster(client)
        self.update_limiter = AsyncLimiter(50, 60)  # chat.update: Tier 3, about 50 per minute
        self.dedup = SeenKeys()
        self.admission = Admission(settings, "slack", getattr(service, "store", None))
        # (channel, thread_ts) -> whether the bot takes part in that thread
        self.threads: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=20_000, ttl=7 * 24 * 3600)
        self.stats = Stats()
        self.tasks: set[asyncio.Task] = set()
        self.runs: dict[str, tuple[asyncio.Event, str]] = {}  # run id -> (its stop event, the requester)
        self.closing = False
        api = slack_io.origin_of(client.base_url)
        extra = {o for o in map(slack_io.origin_of, file_hosts) if o is not None}
        self.file_origins = set(slack_io.DEFAULT_FILE_ORIGINS) | extra | ({api} if api and api[1] != "slack.com" else set())
        self._session: aiohttp.ClientSession | None = None
        service.events.on_redelivery("slack:", self._redeliver)  # several processes on one store
        service.events.on_interrupted(self._tell_interrupted)

    # ------------------------------------------------------------------ entry from the listeners

    def on_event(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str | None, bot_id: str | None) -> None:
        """Decide about one delivered event without awaiting anything, then start the work.

        Called for ``app_mention`` and ``message`` events after bolt acknowledged them.
        """
        self.stats.events += 1
        decision = classify_message(
            event, bot_user_id=bot_user_id, bot_id=bot_id, followups_without_mention=self.slack.followups_without_mention
        )
        if decision.verdict == "ignore":
            self.stats.ignored += 1
            log.debug("ignored %s event %s: %s", event.get("type"), body.get("event_id"), decision.reason)
            return
        message = (event.get("channel"), event.get("ts")) if event.get("channel") and event.get("ts") else None
        if not self.dedup.first_time(body.get("event_id"), message):
            self.stats.duplicates += 1
            log.info("duplicate delivery of %s ts=%s (event %s) ignored", event.get("type"), event.get("ts"), body.get("event_id"))
            return
        if self.closing:
            log.warning("event %s arrived during shutdown; not started", body.get("event_id"))
            return
        task = asyncio.create_task(self._guarded(body, event, bot_user_id, bot_id, decision.needs_thread_check),
                                   name=f"slack-{event.get('channel')}-{event.get('ts')}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _guarded(self, *args: Any) -> None:
        try:
            await self._process(*args)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.errors += 1
            log.exception("unexpected error while handling a Slack event")

    # ------------------------------------------------------------------ one request

    async def _process(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str | None, bot_id: str | None,
                       needs_thread_check: bool, adopted: str | None = None) -> None:
        channel = event["channel"]
        ts = event["ts"]
        team = body.get("team_id") or event.get("team") or ""
        delivery = adopted or delivery_key(body, team, channel, ts)
        if adopted is None:
            payload = json.dumps(event_payload(body, event, bot_user_id, bot_id, needs_thread_check))
            if not await self._claim(body, team, channel, ts, payload):
                return
        try:
            await self._respond(body, event, bot_user_id, bot_id, needs_thread_check, delivery)
        except asyncio.CancelledError:  # shutdown: an unstarted delivery is left for another process
            raise
        except BaseException:
            await self.service.settle_delivery(delivery)
            raise
        await self.service.settle_delivery(delivery)  # answered (already settled by its turn), refused or ignored

    async def _respond(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str | None, bot_id: str | None,
                       needs_thread_check: bool, delivery: str) -> None:
        channel = event["channel"]
        ts = event["ts"]
        thread_ts = event.get("thread_ts") or ts
        user = event.get("user") or ""
        team = body.get("team_id") or event.get("team") or ""
        if needs_thread_check and not await self._bot_in_thread(channel, thread_ts, bot_user_id, bot_id):
            log.debug("thread reply in %s/%s without mention, bot not in thread: ignored", channel, thread_ts)
            return
        who = Requester("slack", user, (channel,), team, is_dm=event.get("channel_type") == "im")
        refusal = await self.admission.admit(who)
        if refusal is not None and refusal.reason == "rate":
            log.info("rate limited user=%s", user)
            await self._say(channel, thread_ts, ":hourglass: " + refusal.sentence)
            return
        if refusal is not None:
            log.info("refused user=%s channel=%s: %s", user, channel, refusal.reason)
            if not needs_thread_check:  # say it to mentions and DMs, not to every reply in a thread
                await self._say(channel, thread_ts, ":no_entry: " + refusal.sentence)
            return
        text = strip_mentions(unescape_slack(event.get("text") or ""), bot_user_id)
        if not text and not event.get("files"):
            await self._say(channel, thread_ts, EMPTY_REQUEST)
            return

        if wants_new_conversation(event, text):
            try:
                await self.service.start_over(key_for(team, channel, thread_ts, event))
            except HuggingGPTError as e:
                log.error("starting over in %s failed: %s", channel, e)
                await self._say(channel, thread_ts, ":warning: " + escape_slack(e.user_message))
                return
            await self._say(channel, thread_ts, STARTED_OVER)
            return
        self.stats.runs += 1
        self.threads[(channel, thread_ts)] = True
        run_id = f"{channel}-{ts}"
        stop = asyncio.Event()
        self.runs[run_id] = (stop, user)
        reply = LiveReply(self.client, channel, thread_ts, user=user, team=team, run_id=run_id,
                          interval=self.update_interval, limiter=self.update_limiter, streaming=self.slack.streaming)
        try:
            await reply.start()
        except SlackApiError as e:
            self.runs.pop(run_id, None)
            log.error("cannot post in channel=%s: %s", channel, slack_io.map_slack_error(e, "post a message"))
            return
        if reply.ts:  # a process taking this delivery over after a crash replaces this message
            await self.service.note_delivery(delivery, json.dumps(
                event_payload(body, event, bot_user_id, bot_id, needs_thread_check, status_ts=reply.ts)))
        try:
            await self._run(reply, text, event, key_for(team, channel, thread_ts, event), user, stop, delivery)
        finally:
            self.runs.pop(run_id, None)

    async def _run(self, reply: LiveReply, text: str, event: dict[str, Any], key: ConversationKey, user: str,
                   stop: asyncio.Event, delivery: str | None = None) -> None:
        channel, thread_ts = reply.channel, reply.thread_ts
        progress = Progress()
        record: RunRecord | None = None
        try:
            files = await self._download_files(event.get("files") or [])
            files = await self.service.check_files(files)
            async for ev in self.service.handle(text, files, key=key, user=user, stop=stop, delivery=delivery):
                if isinstance(ev, Done):
                    record = ev.record
                if progress.apply(ev) and not isinstance(ev, Done):
                    reply.show(progress)
        except HuggingGPTError as e:
            self.stats.errors += 1
            log.warning("request in %s/%s failed: %s", channel, thread_ts, e)
            await reply.close_failed(":warning: " + escape_slack(e.user_message))
            return
        except asyncio.CancelledError:
            await asyncio.shield(reply.close_failed(RESTARTING))
            raise
        except Exception:
            self.stats.errors += 1
            log.exception("service failed on request in %s/%s", channel, thread_ts)
            await reply.close_failed(":warning: " + BACKEND_DOWN)
            return
        if record is None:
            self.stats.errors += 1
            log.error("service ended without Done for %s/%s", channel, thread_ts)
            await reply.close_failed(":warning: " + BACKEND_DOWN)
            return
        reply.show(progress)
        if not record.answered:
            self.stats.errors += 1
            log.warning("run failed in %s/%s: %s", channel, thread_ts, record.error)
            await reply.finish(False, {})
            return
        outputs = {tid: (r.output.text or "") for tid, r in record.results.items() if r.output is not None}
        ref = f"{record.conversation_id}:{record.turn}" if record.conversation_id is not None else None
        rest = await reply.finish(True, outputs, ref)
        await self._deliver(channel, thread_ts, record, rest)

    async def _deliver(self, channel: str, thread_ts: str, record: RunRecord, text: str) -> None:
        """Post what the stream did not carry of the answer (mrkdwn, split), then upload the
        generated files into the thread."""
        try:
            for chunk in answer_messages(text):
                await self.poster.post(channel, thread_ts, chunk)
            self.stats.answers += 1
        except HuggingGPTError as e:
            log.error("posting the answer in %s/%s failed: %s", channel, thread_ts, e)
            return
        if record.files:
            try:
                await slack_io.upload_files(self.client, channel, thread_ts, record.files)
            except HuggingGPTError as e:
                log.error("uploading %d files in %s/%s failed: %s", len(record.files), channel, thread_ts, e)
                await self._say(channel, thread_ts, ":warning: " + escape_slack(e.user_message))

    async def _claim(self, body: dict[str, Any], team: str, channel: str, ts: str, payload: str | None = None) -> bool:
        """Take the delivery for this process, against the others on the store (the in-memory
        check in :meth:`on_event` only covers this one); ``payload`` is kept until the turn
        begins, so another process runs the event if this one dies first."""
        event_id = body.get("event_id")
        try:
            first = await self.service.claim_delivery(delivery_key(body, team, channel, ts),
                                                      f"slack:message:{team}:{channel}:{ts}", payload=payload)
        except HuggingGPTError as e:  # the run itself will say what is wrong with the store
            log.warning("could not record delivery %s: %s", event_id, e)
            return True
        if not first:
            self.stats.duplicates += 1
            log.info("delivery of %s ts=%s (event %s) already taken by another process", channel, ts, event_id)
        return first

    async def _say(self, channel: str, thread_ts: str | None, text: str) -> None:
        try:
            await self.poster.post(channel, thread_ts, text)
        except HuggingGPTError as e:
            log.error("cannot post in channel=%s: %s", channel, e)

    async def _download_files(self, files: list[dict[str, Any]]) -> list[IncomingFile]:
        if not files:
            return []
        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise InputError(f"Please attach at most {limit} files at a time.")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        token = self.client.token or ""
        return list(await asyncio.gather(*(
            slack_io.download_file(self._session, f, token=token, max_bytes=self.settings.storage.max_file_bytes,
                                   allowed_origins=self.file_origins)
            for f in files
        )))

    async def _bot_in_thread(self, channel: str, thread_ts: str, bot_user_id: str | None, bot_id: str | None) -> bool:
        """Whether the bot takes part in the thread: remembered, else read with ``conversations.replies``."""
        known = self.threads.get((channel, thread_ts))
        if known is not None:
            return bool(known)
        try:
            resp = await self.client.conversations_replies(channel=channel, ts=thread_ts, limit=200)
        except SlackApiError as e:
            err = slack_io.map_slack_error(e, "read the thread")
            log.warning("cannot check thread %s/%s: %s", channel, thread_ts, err)
            return False
        present = any(m.get("user") == bot_user_id or (bot_id and m.get("bot_id") == bot_id) for m in resp.get("messages") or [])
        self.threads[(channel, thread_ts)] = present
        return present

    # ------------------------------------------------------------------ lifecycle

    async def close(self, timeout: float = 30.0) -> None:
        """Graceful shutdown: take no new work, let runs in flight finish for ``timeout`` seconds,
        then cancel the rest (their status message says so). Does not close the service."""
        self.closing = True
        pending = set(self.tasks)
        if pending:
            log.info("waiting up to %.0f s for %d Slack runs in flight", timeout, len(pending))
            _, still = await asyncio.wait(pending, timeout=timeout)
            for t in still:
                t.cancel()
            if still:
                # each cancelled run edits its status message once more ("restarted"); bounded wait
                await asyncio.wait(still, timeout=5.0)
        if self._session is not None:
            await self._session.close()


def register_listeners(app: AsyncApp, bot: SlackBot) -> None:
    """Register the event listeners on ``app`` (the same for Socket Mode and HTTP mode).

    Events: ``app_mention`` and ``message`` (channels, groups, im). Both go through
    :meth:`SlackBot.on_event`, which deduplicates them.
    """

    @app.event("app_mention")
    async def on_app_mention(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("message")
    async def on_message(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("app_home_opened")
    async def on_home_opened(event: dict) -> None:
        await bot.on_home_opened(event)

    @app.action(STOP_ACTION)
    async def on_stop(ack: Any, body: dict) -> None:
        await ack()
        await bot.on_stop(body)

    @app.action(FEEDBACK_ACTION)
    async def on_feedback(ack: Any, body: dict) -> None:
        await ack()
        await bot.on_feedback(body)

    @app.error
    async def on_error(error: Exception, body: dict) -> None:
        log.error("bolt listener error for event %s: %r", (body or {}).get("event_id"), error)


def create_bolt_app(settings: Settings, service: Any, client: AsyncWebClient | None = None, *,
                    update_interval: float = 1.0) -> AsyncApp:
    """Build the bolt ``AsyncApp`` for Socket Mode and HTTP mode.

    Args:
        settings: all settings; ``[slack] bot_token`` is required, ``signing_secret`` is used to
            verify HTTP requests (bad signature: 401).
        service: the :class:`bot.service.Service`.
        client: an ``AsyncWebClient`` to use (tests point it at a stand-in); default: a client
            for ``https://slack.com/api/`` with the bot token.
        update_interval: minimum seconds between two edits of one status message.

    Returns:
        The app; :func:`get_bot` returns its :class:`SlackBot` (for shutdown and stats).

    Raises:
        ConfigError: no bot token.
    """
    s = settings.slack
    token = s.bot_token.get_secret_value() if s.bot_token else None
    if client is None:
        if not token:
            raise ConfigError("The Slack bot token is not set: set SLACK_BOT_TOKEN, HUGGINGGPT_SLACK__BOT_TOKEN or [slack] bot_token.")
        client = AsyncWebClient(token=token)
    if not any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in client.retry_handlers):
        client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    secret = s.signing_secret.get_secret_value() if s.signing_secret else ""
    app = AsyncApp(
        client=client,
        signing_secret=secret,
        process_before_response=False,
        logger=logging.getLogger("adapters.slack.bolt"),
    )
    bot = SlackBot(settings, service, client, update_interval=update_interval)
    register_listeners(app, bot)
    app._hugginggpt_bot = bot  # type: ignore[attr-defined]
    return app


def get_bot(app: AsyncApp) -> SlackBot:
    """The :class:`SlackBot` behind an app built by :func:`create_bolt_app`."""
    return app._hugginggpt_bot  # type: ignore[attr-defined]
