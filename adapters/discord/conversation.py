"""Follow-ups: a message in one of the bot's threads continues that thread's conversation; a
message in the bot's DM continues the user's DM conversation, and ``new`` (or ``/new``) starts
that over.

DM conversations remember like threads: files and results of earlier DMs stay
reachable, so "now make it black and white" works on the previous DM's picture. Starting over
begins a new DM conversation; the earlier one is kept under its id (as on Slack).
"""

from __future__ import annotations

import logging
from typing import Any  # ``bot``: the HuggingGPTBot (not imported: no import cycle)

import discord

from adapters.progress import user_sentence
from adapters.turn import CRASHED, STARTED_OVER, Outcome
from bot.errors import Refused
from bot.incoming import ConversationKey, Delivery, Message
from pipeline.errors import HuggingGPTError

from .ask import dm_key, download_of
from .delivery import CannotPost, DiscordView, follow_turn, reply_quietly
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

NEW_WORDS = frozenset({"new", "/new", "start over", "reset"})
"""DM texts (case and surrounding spaces ignored) that start a new DM conversation."""
NOTHING_TO_FORGET = "We're starting fresh. What would you like to do?"


async def start_over(bot: Any, user_id: int) -> str:
    """Start ``user_id``'s DM conversation over; return the sentence for them. The earlier
    conversation is kept under its id (``Service.start_over``), as on Slack; a run still going in
    it finishes there."""
    try:
        had = await bot.service.start_over(dm_key(user_id))
    except HuggingGPTError as e:
        log.warning("could not start the DM conversation of user %s over: %s", user_id, e)
        return user_sentence(e)
    log.info("user %s started their DM conversation over", user_id)
    return STARTED_OVER if had else NOTHING_TO_FORGET


async def on_message(bot: Any, message: discord.Message) -> None:
    """A message in one of the bot's conversation threads, or in its DM, continues that
    conversation: refused quietly by Discord's own checks (shutting down, the attachments'
    declared size and type), else handed to the service in the background (:func:`_followup_run`)."""
    if message.author.bot or message.webhook_id is not None or bot.user is None:
        return  # our own messages (echoed by the gateway) and other bots
    if message.type not in (discord.MessageType.default, discord.MessageType.reply):
        return
    channel = message.channel
    in_dm = isinstance(channel, discord.DMChannel)
    if not in_dm and (not isinstance(channel, discord.Thread) or not bot.is_conversation_thread(channel)):
        return
    mentioned = bot.user in message.mentions
    if not in_dm and bot.cfg.followups_need_mention and not mentioned:
        return
    if not bot.seen_events.first_time(("message", message.id)):
        log.info("ignored replayed message %s", message.id)
        return
    text = message.content.replace(f"<@{bot.user.id}>", "").replace(f"<@!{bot.user.id}>", "").strip()
    if not text and not message.attachments:
        return  # an empty message (e.g. only a mention): nothing to answer
    if in_dm and text.lower() in NEW_WORDS and not message.attachments:
        await reply_quietly(message, await start_over(bot, message.author.id))
        return
    refusal = bot.precheck(message.attachments)
    if refusal is not None:
        await refuse_once(bot, message, refusal)
        return
    live = LiveRun(requester=message.author.id)
    bot.spawn(_followup_run(bot, message, text, live), live)


async def refuse_once(bot: Any, message: discord.Message, refusal: str) -> None:
    """Reply ``refusal`` to a follow-up, once: the same refusal to the same member in the same
    thread is then silent a while (``bot.quiet_refusals``)."""
    log.info("refused follow-up %s from user %s: %s", message.id, message.author.id, refusal)
    if bot.quiet_refusals.first_time(("refused", message.author.id, message.channel.id, refusal)):
        await reply_quietly(message, refusal)


async def _followup_run(bot: Any, message: discord.Message, text: str, live: LiveRun) -> None:
    """The follow-up, handed to the service once and followed into a :class:`FollowupView`."""
    channel = message.channel
    channel_ids = [channel.id] if isinstance(channel, discord.DMChannel) else [channel.id, channel.parent_id]  # type: ignore[union-attr]
    guild = message.guild.id if message.guild else None
    view = FollowupView(bot, message, live)
    what = f"message {message.id}"
    request = Message(text, download=download_of(message.attachments, what),
                      who=bot.requester(message.author, guild, channel_ids), key=view.open,
                      delivery=Delivery((f"discord:message:{message.id}",)), stop=live.stop, memoryless_fallback=True)
    await follow_turn(bot, request, view, what=what, guild=guild)


class FollowupView(DiscordView):
    """The view of one follow-up: its progress message replies to the user's message, posted once
    the files passed (:meth:`open`); what ends the turn before that is a quiet reply."""

    def __init__(self, bot: Any, message: discord.Message, live: LiveRun) -> None:
        super().__init__(live, bot.edit_rate)
        self.bot, self.message = bot, message

    async def open(self) -> ConversationKey:
        """Post the progress message in the thread or DM; the conversation's key (awaited by the
        service once the files passed).

        Raises:
            CannotPost: Discord refused the progress message (logged).
        """
        bot, channel = self.bot, self.message.channel
        if isinstance(channel, discord.Thread):
            limit = bot.upload_limit or bot.conversation_threads.get(channel.id) or channel.guild.filesize_limit
            if channel.id not in bot.conversation_threads:
                bot.remember_thread(channel.id, limit)
            key = ConversationKey("discord", str(channel.guild.id), str(channel.parent_id), str(channel.id))
        else:  # the bot's DM; Discord's default upload limit applies there
            limit = bot.upload_limit or discord.utils.DEFAULT_FILE_SIZE_LIMIT_BYTES
            key = dm_key(self.message.author.id)
        await self.show(channel, limit, reply_to=self.message)
        return key

    async def unshown(self, outcome: Outcome) -> None:
        """A refusal of the service's is replied once (:func:`refuse_once`), any other sentence
        (a file that cannot be used or downloaded, a restart) every time; nothing when Discord
        refused the progress message."""
        if isinstance(outcome.error, Refused):
            await refuse_once(self.bot, self.message, outcome.sentence or CRASHED)
        elif not isinstance(outcome.error, CannotPost):
            await reply_quietly(self.message, outcome.sentence or CRASHED)
