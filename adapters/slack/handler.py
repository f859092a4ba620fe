"""What Slack calls: the listeners of the Slack front end and what each does. One
:class:`SlackBot` per process sits behind them; each accepted event becomes one
:class:`adapters.slack.logic.EventContext` that every step works from.

What a user sees: ``@bot <request>`` (files attached or not) in a channel gets a status message in
that message's thread, edited as the run progresses (plan, model and state per task), then the
answer (Markdown converted to mrkdwn, split under Slack's size limit) and the generated files.
A mention inside a thread continues that thread's conversation; in a thread the bot takes part
in, follow-ups need no mention (unless ``[slack] followups_need_mention``). Direct messages work
too. Each request is one call of the service's front door (``Service.handle``: the delivery's
claim across processes, admission, the files, the turn), followed by :func:`adapters.turn.follow`
into a :class:`SlackView`.

Delivery rules (docs.slack.dev/apis/events-api): bolt acknowledges each event before our listener
runs (``process_before_response=False``); the listener does its checks without awaiting and hands
the work to a tracked task, so the acknowledgement never waits for the pipeline. Repeated
deliveries (retries, ``app_mention`` plus ``message``, Socket Mode redelivery) are answered once
(:class:`bot.limits.SeenKeys` here, the store across processes); the bot's own messages and edits
are ignored.

Besides requests: the Stop and feedback buttons (``block_actions``), the suggested prompts shown
when a user opens the bot's DM (``app_home_opened``), and what reaches the bot when another process
sharing the store died (its threads are told about interrupted turns; its unstarted events are run
here). :func:`create_bolt_app` builds the one ``AsyncApp`` that Socket Mode and HTTP mode both
serve, with :func:`register_listeners`; tests build the same app production runs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import aiohttp
from aiolimiter import AsyncLimiter
from cachetools import TTLCache
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.progress import Progress
from adapters.progress import user_sentence
from adapters.turn import INTERRUPTED_ELSEWHERE as INTERRUPTED, STARTED_OVER, Outcome, follow
from bot.approval import EXPIRED, Approve, ApprovalNeeded, plan_lines, cost_line
from bot.errors import ConfigError, Refused
from bot.incoming import Accepted, ConversationKey, Delivery, Download, IncomingFile, Message, Requester
from bot.limits import SeenKeys
from bot.settings import Settings
from pipeline.errors import HuggingGPTError
from pipeline.types import Event, RunRecord

from . import web as slack_web
from .logic import (DM_THREAD, EventContext, Viewing, classify_message, escape_slack, strip_mentions, unescape_slack,
                    wants_new_conversation)
from .web import APPROVE_ACTIONS, FEEDBACK_ACTION, LiveReply, STOP_ACTION, answer_messages, approval_blocks

if TYPE_CHECKING:
    from bot.service import Service


log = logging.getLogger(__name__)

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


class SlackView:
    """Slack's :class:`adapters.turn.TurnView`: the live reply (a chat stream or a status message,
    :class:`adapters.slack.web.LiveReply`) shows the progress; at the end it is closed, then what
    the stream did not carry of the answer, the files and the notice are posted in the thread.

    Args:
        bot: the front end (its poster, client and counters).
        reply: the run's live reply, started.
        ctx: the event's context.
    """

    def __init__(self, bot: SlackBot, reply: LiveReply, ctx: EventContext) -> None:
        self.bot, self.reply, self.ctx = bot, reply, ctx
        self._notice: str | None = None
        self._waiting: ApprovalNeeded | None = None
        self.started = False

    def payload(self) -> str:
        """What the delivery keeps for a process taking it over: the event, and the status
        message once posted (that process replaces it)."""
        return self.ctx.payload(status_ts=self.reply.ts)

    async def progress(self, progress: Progress, event: Event | Accepted) -> None:
        """Open the live reply once the request is accepted; then show the progress within the
        reply's update interval (never waits).

        Raises:
            CannotPost: the reply cannot be posted in the channel (logged; the run is given up).
        """
        if isinstance(event, Accepted):
            await self._start()
            return
        if isinstance(event, ApprovalNeeded):
            self._waiting = event
        self.reply.show(progress)

    async def _start(self) -> None:
        bot, ctx = self.bot, self.ctx
        bot.stats.runs += 1
        bot.threads[(ctx.channel, ctx.thread_ts)] = True
        try:
            await self.reply.start()
        except SlackApiError as e:
            raise CannotPost(slack_web.map_slack_error(e, "post a message")) from None
        self.started = True

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        """Nothing yet: the reply is closed first, then the rest of the answer is posted (:meth:`end`)."""

    async def files(self, record: RunRecord) -> None:
        """Nothing yet: uploaded after the answer (:meth:`SlackBot.deliver`)."""

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """Kept for :meth:`end`: posted after the answer and its files."""
        self._notice = sentence

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """Close the reply with the final state (or the failure's sentence) and post the rest."""
        bot, reply, ctx, record = self.bot, self.reply, self.ctx, outcome.record
        if isinstance(outcome.error, Refused):
            await self._refused(outcome.error)
            return
        if record is None:
            if not self.started:  # refused before the reply was opened: said in the thread
                await bot.say(ctx.channel, ctx.thread_ts, ":warning: " + escape_slack(outcome.sentence or ""))
                return
            if outcome.moment != "restarted":
                bot.stats.errors += 1
            await reply.close_failed(":warning: " + escape_slack(outcome.sentence or ""))
            return
        reply.show(progress)
        if outcome.moment == "awaiting" and self._waiting is not None:
            await self._ask(self._waiting, outcome.sentence or "")
            return
        if not record.answered:
            bot.stats.errors += 1
            log.warning("run failed in %s/%s: %s", ctx.channel, ctx.thread_ts, record.error)
            await reply.finish(False, {})
            return
        outputs = {tid: (r.output.text or "") for tid, r in record.results.items() if r.output is not None}
        ref = f"{record.conversation_id}:{record.turn}" if record.conversation_id is not None else None
        rest = await reply.finish(True, outputs, ref)
        await bot.deliver(ctx.channel, ctx.thread_ts, record, rest)
        if self._notice:
            await bot.say(ctx.channel, ctx.thread_ts, ":warning: " + escape_slack(self._notice))

    async def _ask(self, waiting: ApprovalNeeded, sentence: str) -> None:
        """Close the reply on the plan and post it with Run, Cancel and "Run without step"."""
        ctx = self.ctx
        await self.reply.close_failed(":raised_hand: " + escape_slack(sentence))
        blocks = approval_blocks(waiting.plan_id, [*plan_lines(waiting.tasks), cost_line(waiting.estimate_usd)],
                                 [(t.id, t.task) for t in waiting.tasks], sentence)
        try:
            await self.bot.client.chat_postMessage(channel=ctx.channel, thread_ts=ctx.thread_ts, text=waiting.text(),
                                                   blocks=blocks)
        except SlackApiError as e:
            log.error("cannot post the plan for approval in %s: %s", ctx.channel, e.response.get("error"))

    async def _refused(self, refusal: Refused) -> None:
        """Say an admission refusal in the thread (an access refusal not to every thread reply)."""
        ctx = self.ctx
        if refusal.reason == "rate":
            log.info("rate limited user=%s", ctx.user)
            await self.bot.say(ctx.channel, ctx.thread_ts, ":hourglass: " + refusal.user_message)
            return
        log.info("refused user=%s channel=%s: %s", ctx.user, ctx.channel, refusal.reason)
        if not ctx.needs_thread_check:  # say it to mentions and DMs, not to every reply in a thread
            await self.bot.say(ctx.channel, ctx.thread_ts, ":no_entry: " + refusal.user_message)


class CannotPost(Exception):
    """The bot cannot post in the channel (not a member, archived, ...): the run is given up."""


class SlackBot:
    """State and request handling behind the listeners (one per process); the listeners are plain
    functions registered by :func:`register_listeners`, the buttons' in the button listeners below.

    Args:
        settings: all settings (``[slack]`` and ``[storage] max_files`` / ``max_file_bytes`` are used here).
        service: the service the requests go to.
        client: the bot's ``AsyncWebClient`` (the app's client).
        update_interval: minimum seconds between two edits of one status message (default 1.0).
        file_hosts: extra origins (``https://host[:port]`` URLs) the bot token may be sent to when
            downloading user files; scheme, host and port must match exactly.

    Attributes:
        runs: run id -> (its stop event, the requester), for the Stop button.
        tasks: the runs in flight (tracked tasks).
        stats: counters for operators and the benchmark.
    """

    def __init__(self, settings: Settings, service: Service, client: AsyncWebClient, *, update_interval: float = 1.0,
                 file_hosts: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.slack = settings.slack
        self.service = service
        self.client = client
        self.update_interval = update_interval
        self.poster = slack_web.Poster(client)
        self.update_limiter = AsyncLimiter(50, 60)  # chat.update: Tier 3, about 50 per minute
        self.dedup = SeenKeys()
        # (channel, thread_ts) -> whether the bot takes part in that thread
        self.threads: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=20_000, ttl=7 * 24 * 3600)
        self.stats = Stats()
        self.tasks: set[asyncio.Task] = set()
        self.runs: dict[str, tuple[asyncio.Event, str]] = {}
        self.closing = False
        api = slack_web.origin_of(client.base_url)
        extra = {o for o in map(slack_web.origin_of, file_hosts) if o is not None}
        self.file_origins = set(slack_web.DEFAULT_FILE_ORIGINS) | extra | ({api} if api and api[1] != "slack.com" else set())
        self.session: aiohttp.ClientSession | None = None
        self.web_session = slack_web.keep_alive(client)  # closed by close()
        self.viewing = Viewing()  # what each user views (agent view), for their next request
        self.greeted = SeenKeys(ttl=GREETED_SECONDS)  # users greeted when they opened the bot's DM

    # ------------------------------------------------------------------ entry from the listeners

    def on_event(self, body: dict[str, Any], event: dict[str, Any], bot_user_id: str | None, bot_id: str | None) -> None:
        """Decide about one delivered event without awaiting anything, then start the work.

        Called for ``app_mention`` and ``message`` events after bolt acknowledged them.
        """
        self.stats.events += 1
        decision = classify_message(
            event, bot_user_id=bot_user_id, bot_id=bot_id, followups_need_mention=self.slack.followups_need_mention
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
        self.start(EventContext.of(body, event, bot_user_id=bot_user_id, bot_id=bot_id,
                                   needs_thread_check=decision.needs_thread_check))

    def start(self, ctx: EventContext) -> None:
        """Handle ``ctx`` in a tracked task (:meth:`close` waits for it)."""
        name = f"slack-adopted-{ctx.delivery}" if ctx.adopted else f"slack-{ctx.channel}-{ctx.ts}"
        task = asyncio.create_task(self.handle(ctx), name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def handle(self, ctx: EventContext) -> None:
        """Answer one event; an unexpected error is logged, never raised."""
        try:
            await self._respond(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.errors += 1
            log.exception("unexpected error while handling a Slack event")

    # ------------------------------------------------------------------ one request

    async def _respond(self, ctx: EventContext) -> None:
        if ctx.needs_thread_check and not await self._bot_in_thread(ctx):
            log.debug("thread reply in %s/%s without mention, bot not in thread: ignored", ctx.channel, ctx.thread_ts)
            if ctx.adopted:
                await self.service.settle_delivery(ctx.delivery)
            return
        text = strip_mentions(unescape_slack(ctx.event.get("text") or ""), ctx.bot_user_id)
        if not text and not ctx.files:
            await self.say(ctx.channel, ctx.thread_ts, EMPTY_REQUEST)
        elif wants_new_conversation(dict(ctx.event), text):
            await self._start_over(ctx)
        else:
            await self._run_reply(ctx, text)
            return
        if ctx.adopted:
            await self.service.settle_delivery(ctx.delivery)

    async def _start_over(self, ctx: EventContext) -> None:
        try:
            await self.service.start_over(ctx.key)
        except HuggingGPTError as e:
            log.error("starting over in %s failed: %s", ctx.channel, e)
            await self.say(ctx.channel, ctx.thread_ts, ":warning: " + escape_slack(user_sentence(e)))
            return
        await self.say(ctx.channel, ctx.thread_ts, STARTED_OVER)

    async def _run_reply(self, ctx: EventContext, text: str, approve: Approve | None = None) -> None:
        """Hand the request to the service (:meth:`bot.service.Service.handle`: claim, admission,
        files, the turn) and follow it (:func:`adapters.turn.follow`) into a live reply (status
        message or stream), opened once the request is accepted; ``approve``: a Run press (its
        plan is the request; the press itself is the delivery, taken once with the plan)."""
        stop = asyncio.Event()
        self.runs[ctx.run_id] = (stop, ctx.user)
        reply = LiveReply(self.client, ctx.channel, ctx.thread_ts, user=ctx.user, team=ctx.team, run_id=ctx.run_id,
                          interval=self.update_interval, limiter=self.update_limiter, streaming=self.slack.streaming,
                          progress=ctx.progress)
        view = SlackView(self, reply, ctx)
        files = ctx.files
        message = Message(
            text, download=Download(len(files), lambda max_bytes: self.download_files(ctx, max_bytes)) if files else None,
            who=Requester("slack", ctx.user, (ctx.channel,), ctx.team, is_dm=ctx.is_dm), key=ctx.key,
            delivery=None if approve else Delivery((ctx.delivery, ctx.message_key), view.payload, claimed=ctx.adopted),
            stop=stop, memoryless_fallback=True, approve=approve,
            context=self.viewing.line_for(ctx.team, ctx.user, ctx.event))
        try:
            outcome = await follow(self.service.handle(message), view, progress=ctx.progress,
                                   where=f"slack {ctx.channel}/{ctx.thread_ts}")
            if outcome.moment == "elsewhere":
                self.stats.duplicates += 1
        except CannotPost as e:
            log.error("cannot post in channel=%s: %s", ctx.channel, e)
        finally:
            self.runs.pop(ctx.run_id, None)

    async def deliver(self, channel: str, thread_ts: str, record: RunRecord, text: str) -> None:
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
                await slack_web.upload_files(self.client, channel, thread_ts, record.files)
            except HuggingGPTError as e:
                log.error("uploading %d files in %s/%s failed: %s", len(record.files), channel, thread_ts, e)
                await self.say(channel, thread_ts, ":warning: " + escape_slack(user_sentence(e)))

    async def edit(self, channel: str, ts: str, text: str) -> None:
        """Replace message ``ts`` with ``text`` and no buttons; a failure is logged, never raised."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text, blocks=[])  # our own sentences
        except SlackApiError as e:
            log.warning("cannot edit message %s in %s: %s", ts, channel, e.response.get("error"))

    async def say(self, channel: str, thread_ts: str | None, text: str) -> None:
        """Post ``text`` in the thread (or the channel); a failure is logged, never raised."""
        try:
            await self.poster.post(channel, thread_ts, text)
        except HuggingGPTError as e:
            log.error("cannot post in channel=%s: %s", channel, e)

    async def download_files(self, ctx: EventContext, max_bytes: int) -> list[IncomingFile]:
        """Download the files attached to the event, at most ``max_bytes`` bytes each.

        Raises:
            InputError: one cannot be downloaded (:func:`adapters.slack.web.download_file`).
        """
        files = ctx.files
        if not files:
            return []
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession()
        token = self.client.token or ""
        return list(await asyncio.gather(*(
            slack_web.download_file(self.session, f, token=token, max_bytes=max_bytes,
                                   allowed_origins=self.file_origins)
            for f in files
        )))

    async def _bot_in_thread(self, ctx: EventContext) -> bool:
        """Whether the bot takes part in the thread: remembered, else read with ``conversations.replies``."""
        channel, thread_ts = ctx.channel, ctx.thread_ts
        known = self.threads.get((channel, thread_ts))
        if known is not None:
            return bool(known)
        try:
            resp = await self.client.conversations_replies(channel=channel, ts=thread_ts, limit=200)
        except SlackApiError as e:
            err = slack_web.map_slack_error(e, "read the thread")
            log.warning("cannot check thread %s/%s: %s", channel, thread_ts, err)
            return False
        present = any(m.get("user") == ctx.bot_user_id or (ctx.bot_id and m.get("bot_id") == ctx.bot_id)
                      for m in resp.get("messages") or [])
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
        if self.session is not None:
            await self.session.close()
        if self.web_session is not None:
            await self.web_session.close()



NOT_YOURS = "Only the person who asked (or a workspace admin of this bot) can stop this run."
ALREADY_ENDED = "This run has already ended."
SUGGESTED_PROMPTS = [
    {"title": "Describe a photo", "message": "Describe this photo in as much detail as you can."},
    {"title": "Transcribe and speak", "message": "Transcribe this recording, then read the text aloud in a clear voice."},
    {"title": "Draw a picture", "message": "Draw a picture of a lighthouse at dawn, then describe what you drew."},
    {"title": "Start over", "message": "new"},
]
"""Shown when a user opens the bot's DM: its file tasks, and how to start a new conversation."""
GREETING = ("Hi! I plan your request as AI tasks and run Hugging Face models for them. Attach an image, a "
            "recording or a video, or just ask; the prompts below are a start.")
"""Posted when a user first opens the bot's DM (agent view) or an assistant thread (assistant view)."""
GREETED_SECONDS = 24 * 3600.0
"""A user who opens the bot's DM again within this many seconds gets the prompts, not the greeting again."""


async def stop_pressed(bot: SlackBot, body: dict[str, Any]) -> None:
    """The Stop button (``block_actions``): the requester or a ``[slack] admins`` member stops
    the run (it ends with what finished); anyone else, or a run that ended, gets an ephemeral
    sentence."""
    user = (body.get("user") or {}).get("id") or ""
    action = next((a for a in body.get("actions") or [] if a.get("action_id") == STOP_ACTION), {})
    run = bot.runs.get(str(action.get("value") or ""))
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or ""
    if run is None:
        await whisper(bot.client, channel, user, ALREADY_ENDED)
        return
    stop, requester = run
    if user != requester and user not in bot.slack.admins:
        log.info("stop of run %s by %s refused (requester %s)", action.get("value"), user, requester)
        await whisper(bot.client, channel, user, NOT_YOURS)
        return
    log.info("run %s stopped by %s", action.get("value"), user)
    stop.set()


async def approval_pressed(bot: SlackBot, body: dict[str, Any]) -> None:
    """Run, Cancel or "Run without step" on a plan waiting for approval (:mod:`bot.approval`):
    only its requester or a ``[planning] approvers`` member; anyone else, a plan run, cancelled or
    expired, gets one ephemeral sentence (an expired plan's message says so too). Run starts the
    turn in the plan's thread; the plan's message loses its buttons."""
    user = (body.get("user") or {}).get("id") or ""
    team = (body.get("team") or {}).get("id") or ""
    action = next((a for a in body.get("actions") or [] if a.get("action_id") in APPROVE_ACTIONS), {})
    value = str((action.get("selected_option") or {}).get("value") or action.get("value") or "")
    plan_id, _, step = value.partition(" ")
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id") or ""
    ts = str(container.get("message_ts") or "")
    who = Requester("slack", user, (channel,), team)
    try:
        if action.get("action_id") == APPROVE_ACTIONS[1]:
            await bot.edit(channel, ts, await bot.service.cancel_plan(plan_id, who))
            return
        plan = await bot.service.pending_plan(plan_id, who)
    except HuggingGPTError as e:
        log.info("press on plan %s by %s refused: %s", plan_id, user, e)
        await whisper(bot.client, channel, user, user_sentence(e))
        if e.user_message == EXPIRED:
            await bot.edit(channel, ts, EXPIRED)
        return
    drop = (int(step),) if step.isdigit() else ()
    await bot.edit(channel, ts, f"Running this plan{f' without step {step}' if drop else ''} (approved by <@{user}>).")
    thread = plan.key.thread if plan.key is not None else ts
    event = {"channel": channel, "ts": ts, "thread_ts": thread, "user": user, "team": team}
    ctx = EventContext.of({"team_id": team}, event, bot_user_id=None, bot_id=None, needs_thread_check=False)
    task = asyncio.create_task(bot._run_reply(ctx, "", Approve(plan_id, drop)), name=f"slack-approved-{plan_id}")
    bot.tasks.add(task)
    task.add_done_callback(bot.tasks.discard)


async def feedback_pressed(bot: SlackBot, body: dict[str, Any]) -> None:
    """A feedback button on an answer: stored with the run's turn (``good`` / ``bad``)."""
    user = (body.get("user") or {}).get("id") or ""
    action = next((a for a in body.get("actions") or [] if a.get("action_id") == FEEDBACK_ACTION), {})
    verdict, _, ref = str(action.get("value") or "").partition(" ")
    conv, _, turn = ref.partition(":")
    channel = (body.get("channel") or {}).get("id") or ""
    try:
        saved = turn.isdigit() and await bot.service.record_feedback(conv, int(turn), verdict, user)
    except HuggingGPTError as e:
        log.warning("feedback on %s not stored: %s", ref, e)
        saved = False
    await whisper(bot.client, channel, user, "Thanks for the feedback." if saved else ALREADY_ENDED)


async def suggest(bot: SlackBot, channel: str, thread_ts: str | None = None, *, greeting: bool = False) -> None:
    """The suggested prompts that show what the bot can do with files
    (``assistant.threads.setSuggestedPrompts``, in the assistant thread ``thread_ts`` if any),
    after the greeting if ``greeting``; a refusal is logged, never raised."""
    if greeting:
        await bot.say(channel, thread_ts, GREETING)
    try:
        await bot.client.assistant_threads_setSuggestedPrompts(
            channel_id=channel, thread_ts=thread_ts, title="Attach a file, or just ask:", prompts=SUGGESTED_PROMPTS)
    except SlackApiError as e:
        log.info("suggested prompts refused in %s: %s", channel, e.response.get("error"))


async def home_opened(bot: SlackBot, body: dict[str, Any], event: dict[str, Any]) -> None:
    """The bot's DM opened (``app_home_opened``, ``tab == "messages"``; the agent view's start,
    docs.slack.dev/ai/developing-agents): the suggested prompts each time, the greeting the first
    time a user opens it (within :data:`GREETED_SECONDS`); the context it carries is remembered."""
    channel, user = event.get("channel"), str(event.get("user") or "")
    if event.get("tab") != "messages" or not channel:
        return
    team = str(body.get("team_id") or "")
    if "context" in event:
        bot.viewing.remember(team, user, event.get("context"))
    await suggest(bot, channel, greeting=bot.greeted.first_time((team, user)))


async def assistant_started(bot: SlackBot, body: dict[str, Any], event: dict[str, Any]) -> None:
    """An assistant thread opened (``assistant_thread_started``: apps installed with the older
    ``assistant_view``): the greeting and suggested prompts in that thread; its context is remembered."""
    thread = event.get("assistant_thread") or {}
    channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
    if not channel or not thread_ts:
        return
    bot.viewing.remember(str(body.get("team_id") or ""), str(thread.get("user_id") or ""), thread.get("context"))
    await suggest(bot, channel, thread_ts, greeting=True)


def context_changed(bot: SlackBot, body: dict[str, Any], event: dict[str, Any]) -> None:
    """What the user views changed (``app_context_changed`` of the agent view, or
    ``assistant_thread_context_changed`` of the older assistant view): remembered for the user's
    next request (:class:`adapters.slack.logic.Viewing`). The user is the event's ``user`` (or the
    assistant thread's ``user_id``), else the envelope's human authorization (Slack's example event
    names the viewer only there: docs.slack.dev/reference/events/app_context_changed)."""
    thread = event.get("assistant_thread") or {}
    humans = [a.get("user_id") for a in body.get("authorizations") or [] if isinstance(a, dict) and a.get("is_bot") is False]
    user = str(event.get("user") or thread.get("user_id") or (humans[0] if len(humans) == 1 else "") or "")
    if not user:
        log.debug("%s without a user: ignored", event.get("type"))
        return
    bot.viewing.remember(str(body.get("team_id") or ""), user, event.get("context", thread.get("context")))


async def whisper(client: AsyncWebClient, channel: str, user: str, text: str) -> None:
    """An ephemeral message to ``user`` in ``channel``; a failure is logged, never raised."""
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text)
    except SlackApiError as e:
        log.warning("cannot answer %s privately in %s: %s", user, channel, e.response.get("error"))



INTERRUPTED_ELSEWHERE = f":warning: {INTERRUPTED}"
"""Posted in a thread whose turn a dead process left running (found within the lease time)."""


def listen(bot: SlackBot, service: Service) -> None:
    """Send the service's adopted Slack deliveries and interrupted turns to ``bot``."""

    async def adopted(items: list[tuple[str, str]]) -> None:
        await redeliver(bot, items)

    async def interrupted(marked: list[tuple[ConversationKey, int]]) -> None:
        await tell_interrupted(bot, marked)

    service.events.on_redelivery("slack:", adopted)
    service.events.on_interrupted(interrupted)


async def redeliver(bot: SlackBot, items: list[tuple[str, str]]) -> None:
    """Run events a gone process took but never started (``Service.events.on_redelivery``)."""
    for key, payload in items:
        try:
            ctx = EventContext.from_payload(key, payload)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.error("delivery %s taken over from a gone process is unreadable (%s); dropped", key, e)
            await bot.service.settle_delivery(key)
            continue
        log.warning("running delivery %s taken over from a gone process", key)
        if bot.closing:
            continue
        if ctx.status_ts:  # the gone process's "working" message: this run posts its own
            try:
                await bot.client.chat_delete(channel=ctx.channel, ts=ctx.status_ts)
            except SlackApiError as e:
                log.info("could not delete the status message of delivery %s: %s", key, e.response.get("error"))
        bot.start(ctx)


async def tell_interrupted(bot: SlackBot, marked: list[tuple[ConversationKey, int]]) -> None:
    """Tell the Slack threads whose turn a gone process left running (``Service.events.on_interrupted``)."""
    for key, _turn in marked:
        if key.platform != "slack":
            continue
        thread = None if key.thread == DM_THREAD else key.thread
        await bot.say(key.channel, thread, INTERRUPTED_ELSEWHERE)




def register_listeners(app: AsyncApp, bot: SlackBot) -> None:
    """Register the listeners on ``app`` (the same for Socket Mode and HTTP mode).

    Events: ``app_mention`` and ``message`` (channels, groups, im) both go through
    :meth:`SlackBot.on_event`, which deduplicates them; ``app_home_opened`` (greeting, prompts)
    and ``app_context_changed`` of the agent view, ``assistant_thread_started`` and
    ``assistant_thread_context_changed`` of the older assistant view, and the Stop and feedback
    buttons go to the listeners below.
    """

    @app.event("app_mention")
    async def on_app_mention(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("message")
    async def on_message(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("app_home_opened")
    async def on_home_opened(body: dict, event: dict) -> None:
        await home_opened(bot, body, event)

    @app.event("app_context_changed")
    async def on_context_changed(body: dict, event: dict) -> None:
        context_changed(bot, body, event)

    # the older assistant view (apps installed before the agent view): both keep working
    @app.event("assistant_thread_started")
    async def on_assistant_started(body: dict, event: dict) -> None:
        await assistant_started(bot, body, event)

    @app.event("assistant_thread_context_changed")
    async def on_assistant_context(body: dict, event: dict) -> None:
        context_changed(bot, body, event)

    @app.action(STOP_ACTION)
    async def on_stop(ack: Any, body: dict) -> None:
        await ack()
        await stop_pressed(bot, body)

    @app.action(FEEDBACK_ACTION)
    async def on_feedback(ack: Any, body: dict) -> None:
        await ack()
        await feedback_pressed(bot, body)

    for action_id in APPROVE_ACTIONS:
        @app.action(action_id)
        async def on_approval(ack: Any, body: dict) -> None:
            await ack()
            await approval_pressed(bot, body)

    @app.error
    async def on_error(error: Exception, body: dict) -> None:
        log.error("bolt listener error for event %s: %r", (body or {}).get("event_id"), error)


@dataclass(frozen=True)
class SlackApp:
    """What :func:`create_bolt_app` builds: bolt's ``app`` (served by Socket Mode or HTTP) and the
    :class:`SlackBot` behind its listeners (for shutdown and stats)."""

    app: AsyncApp
    bot: SlackBot


def create_bolt_app(settings: Settings, service: Service, client: AsyncWebClient | None = None, *,
                    update_interval: float = 1.0) -> SlackApp:
    """Build the bolt ``AsyncApp`` for Socket Mode and HTTP mode, with its listeners.

    Args:
        settings: all settings; ``[slack] bot_token`` is required, ``signing_secret`` is used to
            verify HTTP requests (bad signature: 401).
        service: the service the requests go to; its interrupted turns and adopted deliveries
            reach this bot (:func:`listen`).
        client: an ``AsyncWebClient`` to use (tests point it at a stand-in); default: a client
            for ``https://slack.com/api/`` with the bot token.
        update_interval: minimum seconds between two edits of one status message.

    Returns:
        The app and its bot.

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
    listen(bot, service)
    return SlackApp(app, bot)
