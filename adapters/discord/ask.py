"""``/ask``: defer, open a thread (or use the current thread or DM), run, and say in the channel
how the run ended.

What a user sees:

* in a server channel: "<user> asked: …" with "🧵 Working on it in the thread", a public thread
  named after the request, the run in it; when it ends, the channel message says "✅ Done — see
  the thread", "⏹️ Stopped — see the thread" or "⚠️ Failed: <sentence>". That last edit goes
  through the interaction token while it lives (15 minutes, Discord API docs, "Interactions"),
  else with the bot token on the channel message (the bot's own message);
* in an existing thread: the same, with the run below;
* in the bot's DM (a user install, or a server member writing to the bot): the run right there,
  in the user's DM conversation (``ConversationKey("discord", "dm", <user id>, "dm")``), which
  every later DM continues; in another private channel (a group DM where the user installed the
  app) through the interaction's follow-ups, since the bot cannot post there itself.

A deferred response cannot switch to components (Discord API docs, "Message Components": the
flag must be set on creation), so the progress message is a new message in the thread or DM.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any  # ``bot`` arguments: the HuggingGPTBot (not imported: no import cycle)

import discord

from adapters.sentences import record_error, user_sentence
from bot.incoming import ConversationKey, IncomingFile
from pipeline.errors import HuggingGPTError
from pipeline.types import RunRecord
from adapters.turn import RESTARTED

from .delivery import tell_privately
from .render import missing_permission_sentence, thread_name
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")


def dm_key(user_id: int) -> ConversationKey:
    """The conversation of a user's DMs with the bot (one per user, kept across DMs)."""
    return ConversationKey("discord", "dm", str(user_id), "dm")


def outcome_line(record: RunRecord | None, where: str) -> str:
    """The pointer message's last line once a run ended: "✅ Done — see <where>.",
    "⏹️ Stopped — see <where>." or "⚠️ Failed: <sentence>"."""
    if record is None:
        return "⚠️ Failed: I could not post in the thread; please check my permissions there."
    if record.stopped:
        return f"⏹️ Stopped — see {where}."
    if record.answered:
        return f"✅ Done — see {where}."
    return f"⚠️ Failed: {record_error(record) or 'the run did not finish.'}"


class FollowupChannel:
    """Posts through an interaction's follow-ups, for private channels the bot cannot post in
    with its own token (group DMs of a user install). Works while the token lives (15 minutes)."""

    def __init__(self, interaction: discord.Interaction) -> None:
        self.interaction = interaction
        self.id = interaction.channel_id or 0

    async def send(self, content: str | None = None, **kw: Any) -> discord.WebhookMessage:
        if content is not None:
            kw["content"] = content
        return await self.interaction.followup.send(wait=True, **kw)


async def download(attachments: list[discord.Attachment]) -> list[IncomingFile]:
    """The attachments' bytes (their URLs are signed and expire: read them at once)."""
    return [IncomingFile(data=await a.read(), name=a.filename, declared_mime=a.content_type) for a in attachments]


async def on_ask(bot: Any, interaction: discord.Interaction, prompt: str,
                 attachments: list[discord.Attachment]) -> None:
    """Handle ``/ask``: refuse privately, or defer and start the run in the background."""
    if not bot.seen_events.first_time(("interaction", interaction.id)):
        log.info("ignored replayed interaction %s", interaction.id)
        return
    if not await bot.claim("interaction", interaction.id):  # another process (shard handover) took it
        return
    log.info("took interaction %s in guild %s on %s", interaction.id, interaction.guild_id, bot.shard_summary())
    channel = interaction.channel
    in_guild = interaction.guild_id is not None
    in_thread = isinstance(channel, discord.Thread)
    channel_ids = [interaction.channel_id or 0]
    if in_thread:
        channel_ids.append(channel.parent_id)  # type: ignore[union-attr]
    if not prompt.strip() and not attachments:
        refusal: str | None = "Please tell me what you want in the prompt."
    else:
        refusal = await bot.refusal_for(interaction.guild_id, channel_ids, interaction.user, attachments,
                                     permissions=interaction.app_permissions if in_guild else None, in_thread=in_thread)
    if refusal is not None:
        log.info("refused /%s from user %s in channel %s: %s", bot.cfg.command_name, interaction.user.id,
                 interaction.channel_id, refusal)
        await tell_privately(interaction, refusal)
        return
    try:
        await interaction.response.defer(thinking=True)
    except discord.HTTPException as e:  # e.g. 10062 Unknown interaction: the 3 s passed
        log.warning("could not defer interaction %s: %s", interaction.id, e)
        bot.release_slot(interaction.user.id)
        return
    live = LiveRun(requester=interaction.user.id)
    bot.spawn(_ask_run(bot, interaction, prompt, attachments, live), live)


async def _ask_run(bot: Any, interaction: discord.Interaction, prompt: str,
                   attachments: list[discord.Attachment], live: LiveRun) -> None:
    try:
        files = await _checked_files(bot, interaction, attachments)
        if files is None:
            return
        headline = f"**{interaction.user.display_name}** asked: {prompt.strip()}"
        if attachments:
            headline += f" ({', '.join(a.filename for a in attachments)})"
        headline = headline if len(headline) <= 1800 else headline[:1799] + "…"
        if interaction.guild_id is None:
            await _ask_in_private(bot, interaction, prompt, files, headline, live)
            return
        opened = await _open_thread(bot, interaction, prompt, headline)
    except asyncio.CancelledError:  # shutdown before the thread existed
        await asyncio.shield(tell_privately(interaction, RESTARTED))
        raise
    if opened is None:
        return
    thread, original = opened
    limit = bot.conversation_threads.get(thread.id) or bot.upload_limit or interaction.filesize_limit
    key = ConversationKey("discord", str(interaction.guild_id), str(thread.parent_id), str(thread.id))
    record = await bot.run_in(thread, prompt, files, key=key, user=str(interaction.user.id), live=live,
                              upload_limit=limit)
    where = thread.mention if thread is not interaction.channel else "below"
    await _say_outcome(bot, interaction, original, f"{headline}\n{outcome_line(record, where)}")


async def _checked_files(bot: Any, interaction: discord.Interaction,
                         attachments: list[discord.Attachment]) -> list[IncomingFile] | None:
    try:
        files = await download(attachments)
    except (discord.HTTPException, OSError) as e:
        log.warning("could not download attachments of interaction %s: %s", interaction.id, e)
        await tell_privately(interaction, "I could not download your file from Discord; please attach it again.")
        return None
    try:
        return await bot.service.check_files(files)
    except HuggingGPTError as e:
        log.info("files refused for interaction %s: %s", interaction.id, e)
        await tell_privately(interaction, user_sentence(e))
        return None


async def _open_thread(bot: Any, interaction: discord.Interaction, prompt: str, headline: str
                       ) -> tuple[discord.Thread, discord.Message | None] | None:
    """Turn the deferred response into the pointer message and open the thread (or use the
    current one). Returns the thread and the pointer message, or ``None`` after telling the user
    (privately) why not."""
    channel = interaction.channel
    try:
        if isinstance(channel, discord.Thread):
            original = await interaction.edit_original_response(content=f"{headline}\nWorking on it below.")
            thread = channel
        else:
            original = await interaction.edit_original_response(content=f"{headline}\n🧵 Working on it in the thread.")
            thread = await original.create_thread(name=thread_name(prompt), auto_archive_duration=1440)
    except discord.Forbidden as e:
        log.warning("no permission to create a thread in channel %s: %s", interaction.channel_id, e)
        await tell_privately(interaction, missing_permission_sentence("create_public_threads"))
        return None
    except discord.HTTPException as e:
        log.warning("could not start thread for interaction %s: %s", interaction.id, e)
        await tell_privately(interaction, "Discord refused to open a thread for this request; please try again.")
        return None
    bot.remember_thread(thread.id, bot.upload_limit or interaction.filesize_limit)
    return thread, original


async def _ask_in_private(bot: Any, interaction: discord.Interaction, prompt: str,
                          files: list[IncomingFile], headline: str, live: LiveRun) -> None:
    """``/ask`` in a DM or group DM: no thread; the run goes right there."""
    channel = interaction.channel
    own_dm = isinstance(channel, discord.DMChannel)
    try:
        original = await interaction.edit_original_response(content=f"{headline}\nWorking on it below.")
    except discord.HTTPException as e:
        log.warning("could not answer interaction %s: %s", interaction.id, e)
        return
    target: Any = channel if own_dm else FollowupChannel(interaction)
    key = dm_key(interaction.user.id) if own_dm else ConversationKey(
        "discord", "private", str(interaction.channel_id), str(interaction.user.id))
    limit = bot.upload_limit or interaction.filesize_limit
    record = await bot.run_in(target, prompt, files, key=key, user=str(interaction.user.id), live=live,
                              upload_limit=limit)
    await _say_outcome(bot, interaction, original, f"{headline}\n{outcome_line(record, 'below')}")


async def _say_outcome(bot: Any, interaction: discord.Interaction, original: discord.Message | None,
                       text: str) -> None:
    """Edit the pointer message: through the interaction while its token lives, else with the
    bot token (the bot's own message in the channel)."""
    try:
        if discord.utils.utcnow() - interaction.created_at < bot.interaction_token_lifetime:
            await interaction.edit_original_response(content=text)
        elif original is not None and interaction.channel is not None:
            await interaction.channel.get_partial_message(original.id).edit(content=text)  # type: ignore[union-attr]
    except discord.HTTPException as e:
        log.info("could not update the response of interaction %s: %s", interaction.id, e)
