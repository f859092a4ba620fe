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

from adapters.sentences import user_sentence
from bot.incoming import ConversationKey
from pipeline.errors import HuggingGPTError

from .ask import dm_key, download
from .delivery import reply_quietly
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

NEW_WORDS = frozenset({"new", "/new", "start over", "reset"})
"""DM texts (case and surrounding spaces ignored) that start a new DM conversation."""
STARTED_OVER = ("Starting a new conversation: the files and answers of our earlier messages are no longer used. "
                "What would you like to do?")
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
    conversation."""
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
    if not await bot.claim("message", message.id):  # another process (shard handover) took it
        return
    log.info("took message %s in guild %s on %s", message.id, message.guild.id if message.guild else None,
             bot.shard_summary())
    text = message.content.replace(f"<@{bot.user.id}>", "").replace(f"<@!{bot.user.id}>", "").strip()
    if not text and not message.attachments:
        return  # an empty message (e.g. only a mention): nothing to answer
    if in_dm and text.lower() in NEW_WORDS and not message.attachments:
        await reply_quietly(message, await start_over(bot, message.author.id))
        return
    channel_ids = [channel.id] if in_dm else [channel.id, channel.parent_id]  # type: ignore[union-attr]
    refusal = await bot.refusal_for(message.guild.id if message.guild else None, channel_ids, message.author,
                                 message.attachments)
    if refusal is not None:
        log.info("refused follow-up %s from user %s: %s", message.id, message.author.id, refusal)
        if bot.quiet_refusals.first_time(("refused", message.author.id, channel.id, refusal)):
            await reply_quietly(message, refusal)  # told once; the same refusal is then silent a while
        return
    live = LiveRun(requester=message.author.id)
    bot.spawn(_followup_run(bot, message, text, live), live)


async def _followup_run(bot: Any, message: discord.Message, text: str, live: LiveRun) -> None:
    channel = message.channel
    try:
        files = await bot.service.check_files(await download(message.attachments))
    except HuggingGPTError as e:
        log.info("files refused for message %s: %s", message.id, e)
        await reply_quietly(message, user_sentence(e))
        return
    except (discord.HTTPException, OSError) as e:
        log.warning("could not download attachments of message %s: %s", message.id, e)
        await reply_quietly(message, "I could not download your file from Discord; please attach it again.")
        return
    if isinstance(channel, discord.Thread):
        limit = bot.upload_limit or bot.conversation_threads.get(channel.id) or channel.guild.filesize_limit
        if channel.id not in bot.conversation_threads:
            bot.remember_thread(channel.id, limit)
        key = ConversationKey("discord", str(channel.guild.id), str(channel.parent_id), str(channel.id))
    else:  # the bot's DM; Discord's default upload limit applies there
        limit = bot.upload_limit or discord.utils.DEFAULT_FILE_SIZE_LIMIT_BYTES
        key = dm_key(message.author.id)
    await bot.run_in(channel, text, files, key=key, user=str(message.author.id), live=live, upload_limit=limit,
                     reply_to=message)
