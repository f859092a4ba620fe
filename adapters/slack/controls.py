"""The Slack bot's controls besides requests, as listener functions: the Stop and feedback buttons
(``block_actions``) and the suggested prompts shown when a user opens the bot's DM
(``app_home_opened``). Registered by :func:`adapters.slack.app.register_listeners`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from pipeline.errors import HuggingGPTError

from .live import FEEDBACK_ACTION, STOP_ACTION

if TYPE_CHECKING:
    from .handler import SlackBot

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


async def on_stop(bot: SlackBot, body: dict[str, Any]) -> None:
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


async def on_feedback(bot: SlackBot, body: dict[str, Any]) -> None:
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


async def on_home_opened(client: AsyncWebClient, event: dict[str, Any]) -> None:
    """The bot's DM opened (``app_home_opened``, ``tab == "messages"``): suggested prompts that
    show what it can do with files (``assistant.threads.setSuggestedPrompts``)."""
    if event.get("tab") != "messages" or not event.get("channel"):
        return
    try:
        await client.assistant_threads_setSuggestedPrompts(
            channel_id=event["channel"], title="Attach a file, or just ask:", prompts=SUGGESTED_PROMPTS)
    except SlackApiError as e:
        log.info("suggested prompts refused in %s: %s", event["channel"], e.response.get("error"))


async def whisper(client: AsyncWebClient, channel: str, user: str, text: str) -> None:
    """An ephemeral message to ``user`` in ``channel``; a failure is logged, never raised."""
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text)
    except SlackApiError as e:
        log.warning("cannot answer %s privately in %s: %s", user, channel, e.response.get("error"))
