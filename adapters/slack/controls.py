"""The Slack bot's controls besides requests: the Stop and feedback buttons (``block_actions``),
the suggested prompts shown when a user opens the bot's DM (``app_home_opened``), and what
happens when another process sharing the store died (its threads are told, its unstarted events
are run here). A mixin of :class:`adapters.slack.app.SlackBot`, which provides ``client``,
``runs``, ``slack`` (settings), ``service``, ``tasks``, ``closing``, ``_guarded`` and ``_say``."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.incoming import ConversationKey
from pipeline.errors import HuggingGPTError

from .live import FEEDBACK_ACTION, STOP_ACTION
from .logic import DM_THREAD

log = logging.getLogger("adapters.slack.app")

NOT_YOURS = "Only the person who asked (or a workspace admin of this bot) can stop this run."
ALREADY_ENDED = "This run has already ended."
SUGGESTED_PROMPTS = [
    {"title": "Describe a photo", "message": "Describe this photo in as much detail as you can."},
    {"title": "Transcribe and speak", "message": "Transcribe this recording, then read the text aloud in a clear voice."},
    {"title": "Draw a picture", "message": "Draw a picture of a lighthouse at dawn, then describe what you drew."},
    {"title": "Start over", "message": "new"},
]
"""Shown when a user opens the bot's DM: its file tasks, and how to start a new conversation."""
INTERRUPTED_ELSEWHERE = (":warning: The process working on your last request here stopped unexpectedly before it"
                         " finished; please ask again.")
"""Posted in a thread whose turn a dead process left running (found within the lease time)."""


class Controls:
    """Button and DM-opening handlers (see the module docstring)."""

    client: Any
    runs: dict
    slack: Any
    service: Any
    tasks: set
    closing: bool

    async def _redeliver(self, items: list[tuple[str, str]]) -> None:
        """Run events a gone process took but never started (``Service.events.on_redelivery``)."""
        for key, payload in items:
            try:
                d = json.loads(payload)
                args = (d["body"], d["event"], d.get("bot_user_id"), d.get("bot_id"), bool(d.get("needs_thread_check")))
            except (ValueError, KeyError, TypeError) as e:
                log.error("delivery %s taken over from a gone process is unreadable (%s); dropped", key, e)
                await self.service.settle_delivery(key)
                continue
            log.warning("running delivery %s taken over from a gone process", key)
            if self.closing:
                continue
            if d.get("status_ts"):  # the gone process's "working" message: this run posts its own
                try:
                    await self.client.chat_delete(channel=d["event"]["channel"], ts=d["status_ts"])
                except SlackApiError as e:
                    log.info("could not delete the status message of delivery %s: %s", key, e.response.get("error"))
            task = asyncio.create_task(self._guarded(*args, key), name=f"slack-adopted-{key}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _tell_interrupted(self, marked: list[tuple[ConversationKey, int]]) -> None:
        """Tell the Slack threads whose turn a gone process left running (``Service.events.on_interrupted``)."""
        for key, _turn in marked:
            if key.platform != "slack":
                continue
            thread = None if key.thread == DM_THREAD else key.thread
            await self._say(key.channel, thread, INTERRUPTED_ELSEWHERE)

    async def on_stop(self, body: dict[str, Any]) -> None:
        """The Stop button (``block_actions``): the requester or a ``[slack] admins`` member stops
        the run (it ends with what finished); anyone else, or a run that ended, gets an ephemeral
        sentence."""
        user = (body.get("user") or {}).get("id") or ""
        action = next((a for a in body.get("actions") or [] if a.get("action_id") == STOP_ACTION), {})
        run = self.runs.get(str(action.get("value") or ""))
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or ""
        if run is None:
            await self._whisper(channel, user, ALREADY_ENDED)
            return
        stop, requester = run
        if user != requester and user not in self.slack.admins:
            log.info("stop of run %s by %s refused (requester %s)", action.get("value"), user, requester)
            await self._whisper(channel, user, NOT_YOURS)
            return
        log.info("run %s stopped by %s", action.get("value"), user)
        stop.set()

    async def on_feedback(self, body: dict[str, Any]) -> None:
        """A feedback button on an answer: stored with the run's turn (``good`` / ``bad``)."""
        user = (body.get("user") or {}).get("id") or ""
        action = next((a for a in body.get("actions") or [] if a.get("action_id") == FEEDBACK_ACTION), {})
        verdict, _, ref = str(action.get("value") or "").partition(" ")
        conv, _, turn = ref.partition(":")
        channel = (body.get("channel") or {}).get("id") or ""
        try:
            saved = turn.isdigit() and await self.service.record_feedback(conv, int(turn), verdict, user)
        except HuggingGPTError as e:
            log.warning("feedback on %s not stored: %s", ref, e)
            saved = False
        await self._whisper(channel, user, "Thanks for the feedback." if saved else ALREADY_ENDED)

    async def on_home_opened(self, event: dict[str, Any]) -> None:
        """The bot's DM opened (``app_home_opened``, ``tab == "messages"``): suggested prompts that
        show what it can do with files (``assistant.threads.setSuggestedPrompts``)."""
        if event.get("tab") != "messages" or not event.get("channel"):
            return
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=event["channel"], title="Attach a file, or just ask:", prompts=SUGGESTED_PROMPTS)
        except SlackApiError as e:
            log.info("suggested prompts refused in %s: %s", event["channel"], e.response.get("error"))

    async def _whisper(self, channel: str, user: str, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text)
        except SlackApiError as e:
            log.warning("cannot answer %s privately in %s: %s", user, channel, e.response.get("error"))

