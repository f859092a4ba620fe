"""What reaches the Slack bot when another process sharing the store died: its threads are told
(interrupted turns) and its unstarted events are run here (adopted deliveries). The service calls
these listeners; :func:`listen` connects them where the app is built."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from slack_sdk.errors import SlackApiError

from adapters.turn import INTERRUPTED_ELSEWHERE as INTERRUPTED
from bot.incoming import ConversationKey

from .context import EventContext
from .logic import DM_THREAD

if TYPE_CHECKING:
    from bot.service import Service

    from .handler import SlackBot

log = logging.getLogger("adapters.slack.app")

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
