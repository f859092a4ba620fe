"""``/ask``: refuse privately, or hand the request to the service (one ``Service.handle`` call);
once it is admitted, defer; once its files passed, open a thread (or use the current thread or
DM) and run there; say in the channel how the run ended.

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

Refusals are private (ephemeral): Discord's own (shutting down, a missing permission, the
attachments' declared size and type, :mod:`adapters.discord.policy`) before the service is asked;
the service's (access, rate, concurrency) before the deferral, within Discord's 3 s; a file the
service finds unusable after the download, or a thread Discord will not open, replaces the
"thinking" message with a private sentence.

A deferred response cannot switch to components (Discord API docs, "Message Components": the
flag must be set on creation), so the progress message is a new message in the thread or DM.
"""

from __future__ import annotations

import logging
from typing import Any  # ``bot`` arguments: the HuggingGPTBot (not imported: no import cycle)

import discord

from adapters.progress import Progress
from adapters.progress import record_error
from adapters.turn import CRASHED, Outcome
from bot.errors import InputError
from bot.incoming import ConversationKey, Delivery, Download, IncomingFile, Message
from pipeline.errors import HuggingGPTError
from pipeline.types import RunRecord

from .delivery import CannotPost, DiscordView, follow_turn, tell_privately
from .render import missing_permission_sentence, thread_name
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

DOWNLOAD_FAILED = "I could not download your file from Discord; please attach it again."


def dm_key(user_id: int) -> ConversationKey:
    """The conversation of a user's DMs with the bot (one per user, kept across DMs)."""
    return ConversationKey("discord", "dm", str(user_id), "dm")


def outcome_line(record: RunRecord, where: str) -> str:
    """The pointer message's last line once a run ended: "✅ Done — see <where>.",
    "⏹️ Stopped — see <where>." or "⚠️ Failed: <sentence>"."""
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


def download_of(attachments: list[discord.Attachment], what: str) -> Download | None:
    """The attachments as a :class:`bot.incoming.Download` the service fetches once the request is
    admitted (their URLs are signed and expire: read at once then); ``None`` without any. Their
    declared sizes were checked before (:func:`adapters.discord.policy.attachment_refusal`), the
    bytes are checked by the service.

    Args:
        what: the message or interaction, for the log line of a failed download.
    """
    if not attachments:
        return None

    async def fetch(max_bytes: int) -> list[IncomingFile]:
        try:
            return [IncomingFile(data=await a.read(), name=a.filename, declared_mime=a.content_type)
                    for a in attachments]
        except (discord.HTTPException, OSError) as e:
            log.warning("could not download the attachments of %s: %s", what, e)
            raise InputError(DOWNLOAD_FAILED, f"download of the attachments of {what}: {e}") from None

    return Download(len(attachments), fetch)


class NotDeferred(Exception):
    """The interaction could not be deferred (its 3 s passed: 10062 Unknown interaction); logged."""


async def on_ask(bot: Any, interaction: discord.Interaction, prompt: str,
                 attachments: list[discord.Attachment], *, max_files: int | None = None) -> None:
    """Handle ``/ask`` (or its upload form, :mod:`adapters.discord.upload`): refuse privately what
    Discord's side refuses, or start the run in the background (the service admits it,
    :func:`_ask_run`). ``max_files``: a lower count of files than ``[storage] max_files`` (the form's)."""
    if not bot.seen_events.first_time(("interaction", interaction.id)):
        log.info("ignored replayed interaction %s", interaction.id)
        return
    if not prompt.strip() and not attachments:
        refusal: str | None = "Please tell me what you want in the prompt."
    else:
        refusal = bot.precheck(attachments, in_thread=isinstance(interaction.channel, discord.Thread),
                               permissions=interaction.app_permissions if interaction.guild_id is not None else None,
                               max_files=max_files)
    if refusal is not None:
        log.info("refused /%s from user %s in channel %s: %s", bot.cfg.command_name, interaction.user.id,
                 interaction.channel_id, refusal)
        await tell_privately(interaction, refusal)
        return
    live = LiveRun(requester=interaction.user.id)
    bot.spawn(_ask_run(bot, interaction, prompt, attachments, live), live)


async def _ask_run(bot: Any, interaction: discord.Interaction, prompt: str,
                   attachments: list[discord.Attachment], live: LiveRun) -> None:
    """The request, handed to the service once and followed into an :class:`AskView`."""
    channel_ids = [interaction.channel_id or 0]
    if isinstance(interaction.channel, discord.Thread):
        channel_ids.append(interaction.channel.parent_id)
    view = AskView(bot, interaction, prompt, attachments, live)
    what = f"interaction {interaction.id}"
    message = Message(prompt, download=download_of(attachments, what),
                      who=bot.requester(interaction.user, interaction.guild_id, channel_ids), key=view.open,
                      delivery=Delivery((f"discord:interaction:{interaction.id}",)), stop=live.stop,
                      memoryless_fallback=True)
    try:
        await follow_turn(bot, message, view, what=what, guild=interaction.guild_id)
    except NotDeferred:
        return


class AskView(DiscordView):
    """The view of one ``/ask`` (see the module docstring): defers when the service admits the
    request, opens the thread (or uses the current thread or DM) and posts the progress message
    once the files passed (:meth:`open`), and says in the channel how the run ended."""

    def __init__(self, bot: Any, interaction: discord.Interaction, prompt: str,
                 attachments: list[discord.Attachment], live: LiveRun) -> None:
        super().__init__(live, bot.edit_rate)
        self.bot, self.interaction, self.prompt = bot, interaction, prompt
        headline = f"**{interaction.user.display_name}** asked: {prompt.strip()}"
        if attachments:
            headline += f" ({', '.join(a.filename for a in attachments)})"
        self.headline = headline if len(headline) <= 1800 else headline[:1799] + "…"
        self.pointer: discord.Message | None = None  # the channel message saying who asked, once edited
        self.where = "below"

    async def accepted(self) -> None:
        """Defer ("is thinking…"), within Discord's 3 s.

        Raises:
            NotDeferred: Discord refused it (logged); the request is given up.
        """
        try:
            await self.interaction.response.defer(thinking=True)
        except discord.HTTPException as e:  # e.g. 10062 Unknown interaction: the 3 s passed
            log.warning("could not defer interaction %s: %s", self.interaction.id, e)
            raise NotDeferred(str(e)) from None

    async def open(self) -> ConversationKey:
        """Open the thread (or use the current thread or DM) and post the progress message: the
        message's key, awaited by the service once the files passed.

        Raises:
            HuggingGPTError: Discord would not open the thread (said privately).
            CannotPost: the pointer or the progress message could not be posted (logged).
        """
        interaction = self.interaction
        if interaction.guild_id is None:
            return await self._open_private()
        thread = await self._open_thread()
        if thread is not interaction.channel:
            self.where = thread.mention
        limit = self.bot.upload_limit or interaction.filesize_limit
        self.bot.remember_thread(thread.id, limit)
        await self.show(thread, limit)
        return ConversationKey("discord", str(interaction.guild_id), str(thread.parent_id), str(thread.id))

    async def _open_thread(self) -> discord.Thread:
        """Turn the deferred response into the pointer message and open the thread (or use the current one)."""
        interaction, channel = self.interaction, self.interaction.channel
        try:
            if isinstance(channel, discord.Thread):
                self.pointer = await interaction.edit_original_response(content=f"{self.headline}\nWorking on it below.")
                return channel
            self.pointer = await interaction.edit_original_response(
                content=f"{self.headline}\n🧵 Working on it in the thread.")
            return await self.pointer.create_thread(name=thread_name(self.prompt), auto_archive_duration=1440)
        except discord.Forbidden as e:
            log.warning("no permission to create a thread in channel %s: %s", interaction.channel_id, e)
            raise HuggingGPTError(missing_permission_sentence("create_public_threads"), str(e)) from None
        except discord.HTTPException as e:
            log.warning("could not start thread for interaction %s: %s", interaction.id, e)
            raise HuggingGPTError("Discord refused to open a thread for this request; please try again.",
                                  str(e)) from None

    async def _open_private(self) -> ConversationKey:
        """``/ask`` in a DM or group DM: no thread; the run goes right there."""
        interaction, channel = self.interaction, self.interaction.channel
        own_dm = isinstance(channel, discord.DMChannel)
        try:
            self.pointer = await interaction.edit_original_response(content=f"{self.headline}\nWorking on it below.")
        except discord.HTTPException as e:
            log.warning("could not answer interaction %s: %s", interaction.id, e)
            raise CannotPost(f"interaction {interaction.id}: {e}") from None
        limit = self.bot.upload_limit or interaction.filesize_limit
        await self.show(channel if own_dm else FollowupChannel(interaction), limit)
        if own_dm:
            return dm_key(interaction.user.id)
        return ConversationKey("discord", "private", str(interaction.channel_id), str(interaction.user.id))

    async def unshown(self, outcome: Outcome) -> None:
        """Ended before the progress message: say why privately (an ephemeral response, or one
        replacing the "thinking" message); a message Discord refused only fails the pointer."""
        if not isinstance(outcome.error, CannotPost):
            await tell_privately(self.interaction, outcome.sentence or CRASHED)
        elif self.pointer is not None:
            await self._say(f"{self.headline}\n⚠️ Failed: {outcome.sentence}")

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """The run's end in the thread (:meth:`DiscordView.end`), then in the pointer message
        (not after a shutdown: the run was cut off, the progress message says so)."""
        await super().end(outcome, progress)
        if self.run is not None and self.run.record is not None and outcome.moment != "restarted":
            await self._say(f"{self.headline}\n{outcome_line(self.run.record, self.where)}")

    async def _say(self, text: str) -> None:
        """Edit the pointer message: through the interaction while its token lives, else with the
        bot token (the bot's own message in the channel)."""
        interaction, original = self.interaction, self.pointer
        try:
            if discord.utils.utcnow() - interaction.created_at < self.bot.interaction_token_lifetime:
                await interaction.edit_original_response(content=text)
            elif original is not None and interaction.channel is not None:
                await interaction.channel.get_partial_message(original.id).edit(content=text)  # type: ignore[union-attr]
        except discord.HTTPException as e:
            log.info("could not update the response of interaction %s: %s", interaction.id, e)
