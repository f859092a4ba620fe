"""The Discord client: ``/ask`` slash command, a thread per request, follow-ups in the thread.

What a user sees (issue 4):

1. ``/ask prompt:<text> [file1..file3]``: the bot defers at once ("is thinking…"), then turns its
   response into a message "<user> asked: …" with a public thread named after the request (or, in
   an existing thread, works right there).
2. In the thread: one status message edited as the run progresses (plan, each task's model and
   state), at most about once per second (Discord rate limits); then generated media as files
   (shrunk to the upload limit, never dropped silently) and the answer, split at 2000 characters.
3. Any later message in the thread (with or without images/audio/video) continues the same
   conversation (``ConversationKey("discord", guild, parent channel, thread)``).

Refusals (not allowed here, rate limited, file too large/unsupported, a missing permission,
shutting down) are ephemeral replies to the command when it has not yet been deferred, and
replies in the thread for follow-up messages. A backend failure ends the run with the service's
sentence in the thread.

Rules followed (PLATFORMS.md and the Discord API docs): acknowledge within 3 s; the interaction
token lasts 15 minutes, so everything after the first edit is posted with the bot token into the
thread; slash commands are synced once in :meth:`HuggingGPTBot.setup_hook`, not on reconnects;
events may be replayed, so interaction and message ids are de-duplicated.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

import discord
from discord import app_commands

from bot.settings import Settings
from bot.incoming import ConversationKey, IncomingFile
from pipeline.errors import HuggingGPTError
from pipeline.types import RunRecord

from adapters.editor import MessageEditor
from bot.admission import Admission, Requester
from bot.limits import SeenKeys
from bot.progress import Progress

from .delivery import SHUTDOWN_SENTENCE, reply_quietly, run_in_thread, tell_privately
from .policy import REQUIRED_IN_CHANNEL, AttachmentInfo, attachment_refusal, missing_permission
from .render import missing_permission_sentence, thread_name

log = logging.getLogger("hugginggpt.discord")

INTERACTION_TOKEN_LIFETIME = timedelta(minutes=14)
"""Interaction tokens are valid for 15 minutes (Discord API docs, "Interactions"); the bot stops
using one a minute before, and posts only into the thread after that."""
REFUSAL_QUIET_SECONDS = 600.0
"""After refusing a follow-up, the same refusal to the same member in the same thread stays
silent this long (seconds): told once, not once per message."""


def bot_intents() -> discord.Intents:
    """Gateway intents the bot needs: guilds (channels, threads, roles), guild messages, and the
    privileged message content intent (follow-ups in threads that do not mention the bot)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.message_content = True
    return intents


@dataclass
class _Run:
    """A run in flight (for graceful shutdown)."""

    task: asyncio.Task[Any]
    progress: Progress
    editor: MessageEditor | None = None
    user_id: int = 0
    started: float = field(default_factory=time.monotonic)


class HuggingGPTBot(discord.Client):
    """The Discord front end on one :class:`bot.service.Service`.

    Args:
        service: the service (``Service.create(settings)``); the caller closes it after the bot.
        settings: all settings; ``settings.discord`` configures the bot, ``settings.storage``
            limits incoming files.
        upload_limit: bytes per uploaded file when no interaction says it (``None``: the guild's
            limit, ``Guild.filesize_limit``).
        edit_rate: progress message edits per second (default 1).
        shutdown_grace: seconds :meth:`close` lets runs in flight finish before marking them.

    Attributes:
        tree: the application command tree holding ``/<command_name>``.
        command_syncs: how many times the commands were synced (1 after start; never on reconnect).
        interaction_token_lifetime: how long after an interaction its token is still used
            (default 14 minutes; the token dies at 15).
    """

    def __init__(
        self,
        service: Any,
        settings: Settings,
        *,
        upload_limit: int | None = None,
        edit_rate: float = 1.0,
        shutdown_grace: float = 30.0,
        **options: Any,
    ) -> None:
        super().__init__(intents=bot_intents(), allowed_mentions=discord.AllowedMentions(everyone=False, roles=False,
                                                                                          users=False, replied_user=False),
                         **options)
        self.service = service
        self.settings = settings
        self.cfg = settings.discord
        self.upload_limit = upload_limit
        self.edit_rate = edit_rate
        self.shutdown_grace = shutdown_grace
        self.tree = app_commands.CommandTree(self)
        self.command_syncs = 0
        self.interaction_token_lifetime = INTERACTION_TOKEN_LIFETIME
        self._seen = SeenKeys(ttl=3600.0)
        self._told = SeenKeys(ttl=REFUSAL_QUIET_SECONDS)
        self.admission = Admission(settings, "discord")
        self._runs: dict[asyncio.Task[Any], _Run] = {}
        self._threads: dict[int, int] = {}  # conversation thread id -> upload limit seen there (bytes)
        self._closing = False
        self.start_error: BaseException | None = None  # why the first gateway connection failed
        self._start_failed = asyncio.Event()
        self._add_command()

    # ------------------------------------------------------------------------------------------
    # setup

    def _add_command(self) -> None:
        bot = self

        async def ask(
            interaction: discord.Interaction,
            prompt: str,
            file1: Optional[discord.Attachment] = None,
            file2: Optional[discord.Attachment] = None,
            file3: Optional[discord.Attachment] = None,
        ) -> None:
            await bot.on_ask(interaction, prompt, [f for f in (file1, file2, file3) if f is not None])

        command = app_commands.Command(
            name=self.cfg.command_name,
            description="Ask HuggingGPT: it plans AI tasks, runs Hugging Face models and answers with files.",
            callback=ask,
        )
        app_commands.describe(
            prompt="What you want, e.g. 'describe this photo and read the answer aloud'",
            file1="An image, audio or video file", file2="Another file", file3="Another file",
        )(command)
        app_commands.guild_only()(command)
        self.tree.add_command(command)

    async def setup_hook(self) -> None:
        """Sync the slash command once per process start (``setup_hook`` runs once, before the
        gateway connects; ``on_ready`` runs again after every reconnect)."""
        await self.tree.sync()
        self.command_syncs += 1
        log.info("synced /%s", self.cfg.command_name)

    def dispatch(self, event_name: str, /, *args: Any, **kwargs: Any) -> None:
        # discord.py dispatches "disconnect" inside the ``except`` of its connect loop, then retries
        # for ever: before the first READY that is a failed start, which :meth:`started` reports.
        failure = sys.exc_info()[1] if event_name == "disconnect" and not self.is_ready() else None
        if failure is not None and not isinstance(failure, discord.gateway.ReconnectWebSocket):
            self.start_error = self.start_error or failure
            self._start_failed.set()
        super().dispatch(event_name, *args, **kwargs)

    async def started(self) -> BaseException | None:
        """Wait for the first READY after :meth:`connect` began: ``None`` then, or the exception of
        the first failed gateway connection (``aiohttp.ClientError``, ``OSError``,
        ``discord.ConnectionClosed`` with its close code, ...)."""
        waits = {asyncio.ensure_future(self.wait_until_ready()), asyncio.ensure_future(self._start_failed.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return None if self.is_ready() else self.start_error

    # ------------------------------------------------------------------------------------------
    # helpers

    async def _refusal(self, guild_id: int | None, channel_ids: list[int], user: Any, attachments: list[Any], *,
                       permissions: discord.Permissions | None = None, in_thread: bool = True) -> str | None:
        """The one refusal chain of ``/ask`` and follow-ups, in order: access (``[discord]``
        allow-lists, :class:`bot.admission.Admission`), shutdown, the bot's permissions (``/ask``
        only), the attachments' declared size and type, then the user's rate and concurrency
        budget (consumed only when all else passed; the run slot is given back by :meth:`_spawn`'s
        task or :meth:`_release`). Returns the user's sentence, or ``None`` when it may run."""
        who = Requester("discord", str(user.id), tuple(str(c) for c in channel_ids if c),
                        None if guild_id is None else str(guild_id), tuple(str(r.id) for r in getattr(user, "roles", [])))
        refused = self.admission.access(who)
        refusal = refused.sentence if refused else None
        if refusal is None and self._closing:
            refusal = SHUTDOWN_SENTENCE
        if refusal is None and permissions is not None:
            missing = missing_permission(self._granted(permissions), in_thread=in_thread)
            if missing is not None:
                refusal = missing_permission_sentence(missing, "this thread" if in_thread else "this channel")
        if refusal is None:
            refusal = attachment_refusal(
                [AttachmentInfo(a.filename, a.size, a.content_type) for a in attachments],
                max_bytes=self.settings.storage.max_file_bytes, max_files=self.settings.storage.max_files)
        if refusal is None:
            refused = await self.admission.admit(who)
            refusal = refused.sentence if refused else None
        return refusal

    def _release(self, user_id: int) -> None:
        self.admission.release(Requester("discord", str(user_id)))

    @staticmethod
    def _granted(perms: discord.Permissions) -> set[str]:
        # getattr, not iteration: iteration yields canonical names only ("read_messages", not "view_channel")
        return {name for name in REQUIRED_IN_CHANNEL if getattr(perms, name, False)}

    def _is_conversation_thread(self, thread: discord.Thread) -> bool:
        return thread.id in self._threads or (self.user is not None and thread.owner_id == self.user.id)

    def _spawn(self, coro: Any, progress: Progress, user_id: int) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; the user's run slot (reserved by
        :meth:`_refusal`) is released when it ends."""
        task = asyncio.create_task(coro)
        self._runs[task] = _Run(task, progress, user_id=user_id)

        def done(t: asyncio.Task[Any]) -> None:
            run = self._runs.pop(t, None)
            if run is not None:
                self._release(run.user_id)
            if not t.cancelled() and t.exception() is not None:
                log.error("run failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------------------------------
    # /ask

    async def on_ask(self, interaction: discord.Interaction, prompt: str, attachments: list[discord.Attachment]) -> None:
        """Handle ``/ask``: refuse privately, or defer and start the run in the background."""
        if not self._seen.first_time(("interaction", interaction.id)):
            log.info("ignored replayed interaction %s", interaction.id)
            return
        channel = interaction.channel
        in_thread = isinstance(channel, discord.Thread)
        channel_ids = [interaction.channel_id or 0]
        if in_thread:
            channel_ids.append(channel.parent_id)  # type: ignore[union-attr]
        if not prompt.strip() and not attachments:
            refusal: str | None = "Please tell me what you want in the prompt."
        else:
            refusal = await self._refusal(interaction.guild_id, channel_ids, interaction.user, attachments,
                                          permissions=interaction.app_permissions, in_thread=in_thread)
        if refusal is not None:
            log.info("refused /%s from user %s in channel %s: %s", self.cfg.command_name, interaction.user.id,
                     interaction.channel_id, refusal)
            await tell_privately(interaction, refusal)
            return
        try:
            await interaction.response.defer(thinking=True)
        except discord.HTTPException as e:  # e.g. 10062 Unknown interaction: the 3 s passed
            log.warning("could not defer interaction %s: %s", interaction.id, e)
            self._release(interaction.user.id)
            return
        progress = Progress()
        self._spawn(self._ask_run(interaction, prompt, attachments, progress), progress, interaction.user.id)

    async def _download(self, attachments: list[discord.Attachment]) -> list[IncomingFile]:
        # Attachment URLs are signed and expire: read the bytes now.
        return [IncomingFile(data=await a.read(), name=a.filename, declared_mime=a.content_type) for a in attachments]

    async def _ask_run(self, interaction: discord.Interaction, prompt: str, attachments: list[discord.Attachment],
                       progress: Progress) -> None:
        try:
            opened = await self._open_thread(interaction, prompt, attachments)
        except asyncio.CancelledError:  # shutdown before the thread existed
            await asyncio.shield(tell_privately(interaction, SHUTDOWN_SENTENCE))
            raise
        if opened is not None:
            thread, files, headline = opened
            await self._ask_in_thread(interaction, thread, prompt, files, headline, progress)

    async def _open_thread(self, interaction: discord.Interaction, prompt: str,
                           attachments: list[discord.Attachment]
                           ) -> tuple[discord.Thread, list[IncomingFile], str] | None:
        """Download and check the files, then open the thread (or use the current one).

        Returns the thread, the files and the headline shown in the channel, or ``None`` after
        telling the user (privately) why not."""
        user = interaction.user
        try:
            files = await self._download(attachments)
        except (discord.HTTPException, OSError) as e:
            log.warning("could not download attachments of interaction %s: %s", interaction.id, e)
            await tell_privately(interaction, "I could not download your file from Discord; please attach it again.")
            return None
        try:
            files = await self.service.check_files(files)
        except HuggingGPTError as e:
            log.info("files refused for interaction %s: %s", interaction.id, e)
            await tell_privately(interaction, e.user_message)
            return None

        channel = interaction.channel
        headline = f"**{user.display_name}** asked: {prompt.strip()}"
        if attachments:
            headline += f" ({', '.join(a.filename for a in attachments)})"
        headline = headline if len(headline) <= 1900 else headline[:1899] + "…"
        try:
            if isinstance(channel, discord.Thread):
                thread = channel
                await interaction.edit_original_response(content=f"{headline}\nWorking on it below.")
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
        self._remember_thread(thread.id, self.upload_limit or interaction.filesize_limit)
        return thread, files, headline

    def _remember_thread(self, thread_id: int, upload_limit: int) -> None:
        self._threads.pop(thread_id, None)
        self._threads[thread_id] = upload_limit
        while len(self._threads) > 100_000:  # oldest first (dicts keep insertion order)
            del self._threads[next(iter(self._threads))]

    async def _ask_in_thread(self, interaction: discord.Interaction, thread: discord.Thread, prompt: str,
                             files: list[IncomingFile], headline: str, progress: Progress) -> None:
        user = interaction.user
        channel = interaction.channel
        limit = self._threads.get(thread.id) or self.upload_limit or interaction.filesize_limit
        key = ConversationKey("discord", str(interaction.guild_id), str(thread.parent_id), str(thread.id))
        record = await self._run_in_thread(thread, prompt, files, key=key, user=str(user.id), progress=progress,
                                           upload_limit=limit)
        # The interaction token lasts 15 minutes; past that, the thread already has everything.
        if record is not None and discord.utils.utcnow() - interaction.created_at < self.interaction_token_lifetime:
            mark = "✅ Answered" if record.answered else "⚠️ Stopped"
            where = f" in {thread.mention}" if thread is not channel else " below"
            try:
                await interaction.edit_original_response(content=f"{headline}\n{mark}{where}.")
            except discord.HTTPException as e:
                log.info("could not update the response of interaction %s: %s", interaction.id, e)

    # ------------------------------------------------------------------------------------------
    # follow-ups

    async def on_message(self, message: discord.Message) -> None:
        """A message in one of the bot's conversation threads continues that conversation."""
        if message.author.bot or message.webhook_id is not None or self.user is None:
            return  # our own messages (echoed by the gateway) and other bots
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return
        channel = message.channel
        if not isinstance(channel, discord.Thread) or not self._is_conversation_thread(channel):
            return
        mentioned = self.user in message.mentions
        if self.cfg.followups_need_mention and not mentioned:
            return
        if not self._seen.first_time(("message", message.id)):
            log.info("ignored replayed message %s", message.id)
            return
        text = message.content.replace(f"<@{self.user.id}>", "").replace(f"<@!{self.user.id}>", "").strip()
        if not text and not message.attachments:
            return  # an empty message (e.g. only a mention): nothing to answer
        refusal = await self._refusal(message.guild.id if message.guild else None, [channel.id, channel.parent_id],
                                      message.author, message.attachments)
        if refusal is not None:
            log.info("refused follow-up %s from user %s: %s", message.id, message.author.id, refusal)
            if self._told.first_time(("refused", message.author.id, channel.id, refusal)):
                await reply_quietly(message, refusal)  # told once; the same refusal is then silent a while
            return
        progress = Progress()
        self._spawn(self._followup_run(message, text, progress), progress, message.author.id)

    async def _followup_run(self, message: discord.Message, text: str, progress: Progress) -> None:
        thread = message.channel
        assert isinstance(thread, discord.Thread)
        try:
            files = await self.service.check_files(await self._download(message.attachments))
        except HuggingGPTError as e:
            log.info("files refused for message %s: %s", message.id, e)
            await reply_quietly(message, e.user_message)
            return
        except (discord.HTTPException, OSError) as e:
            log.warning("could not download attachments of message %s: %s", message.id, e)
            await reply_quietly(message, "I could not download your file from Discord; please attach it again.")
            return
        limit = self.upload_limit or self._threads.get(thread.id) or thread.guild.filesize_limit
        if thread.id not in self._threads:
            self._remember_thread(thread.id, limit)
        key = ConversationKey("discord", str(thread.guild.id), str(thread.parent_id), str(thread.id))
        await self._run_in_thread(thread, text, files, key=key, user=str(message.author.id), progress=progress,
                                  upload_limit=limit, reply_to=message)

    # ------------------------------------------------------------------------------------------
    # one run, rendered into a thread

    async def _run_in_thread(self, thread: discord.Thread, text: str, files: list[IncomingFile], **kw: Any) -> RunRecord | None:
        run = self._runs.get(asyncio.current_task())  # type: ignore[arg-type]

        def track(editor: MessageEditor) -> None:
            if run is not None:
                run.editor = editor

        return await run_in_thread(self.service, thread, text, files, edit_rate=self.edit_rate, on_editor=track, **kw)

    # ------------------------------------------------------------------------------------------
    # shutdown

    @property
    def runs_in_flight(self) -> int:
        """Number of runs not yet finished."""
        return len(self._runs)

    async def drain(self, grace: float | None = None) -> None:
        """Refuse new requests, let runs in flight finish for ``grace`` seconds, then cancel the
        rest (their status messages say the bot restarted)."""
        self._closing = True
        grace = self.shutdown_grace if grace is None else grace
        tasks = list(self._runs)
        if not tasks:
            return
        log.info("waiting up to %.0f s for %d runs in flight", grace, len(tasks))
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)
            log.warning("interrupted %d runs at shutdown", len(pending))

    async def close(self) -> None:
        """Drain runs in flight (see :meth:`drain`), then disconnect."""
        if not self._closing:
            await self.drain()
        await super().close()
