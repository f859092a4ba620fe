"""The Discord client: ``/ask`` and ``/new`` slash commands, a thread per request, follow-ups in
the thread, the bot's DM as a conversation, and the Stop button of runs in flight.

What a user sees:

1. ``/ask prompt:<text> [file1..file3]``: the bot defers at once ("is thinking…"), then turns its
   response into a message "<user> asked: …" with a public thread named after the request (or, in
   an existing thread or a DM, works right there); that message says at the end how the run
   ended (:mod:`adapters.discord.ask`). ``/ask`` with neither a prompt nor a file opens a form
   with a File Upload of up to 10 files; the attachment options and the form offer the kinds of
   file the served tasks read (``file_types``, :mod:`adapters.discord.upload`).
2. In the thread: a Components V2 message (a container with the plan's tasks, their models and
   states, and a Stop button), edited at most about once per second (Discord rate limits); then
   generated images in a media gallery and audio/video as files (shrunk to the upload limit,
   never dropped silently), and the answer, split at 2,000 characters
   (:mod:`adapters.discord.delivery`).
3. Any later message in the thread continues the same conversation
   (``ConversationKey("discord", guild, parent channel, thread)``); any message in the bot's DM
   continues the user's DM conversation; ``new`` or ``/new`` starts it over
   (:mod:`adapters.discord.conversation`).
4. Stop: the requester or a member with Manage Messages stops the run; it ends with what
   finished (:mod:`adapters.discord.stop`).

The commands are declared for guild and user installs, in guilds, the bot's DM and private
channels (``allowed_installs`` / ``allowed_contexts``, Discord "integration_types" and
"contexts").

Refusals (not allowed here, rate limited, file too large/unsupported, a missing permission,
shutting down) are ephemeral replies to the command when it has not yet been deferred, and
replies in the thread for follow-up messages. Discord's own checks (:meth:`HuggingGPTBot.precheck`)
come first; access, rate and concurrency are the service's (``Service.handle``, which holds the
admission of ``[discord]``), once per message. A backend failure ends the run with the service's
sentence in the thread.

Rules followed (PLATFORMS.md and the Discord API docs): acknowledge within 3 s; the interaction
token lasts 15 minutes, so everything after the first edit is posted with the bot token into the
thread; slash commands are synced once in :meth:`HuggingGPTBot.setup_hook`, not on reconnects;
events may be replayed, so interaction and message ids are de-duplicated.

Sharding (Discord API docs, "Gateway > Sharding",
https://discord.com/developers/docs/events/gateway#sharding): the bot is a
``discord.AutoShardedClient``; each process runs the shards ``shard_ids`` of ``shard_count``
(default: all the shards ``GET /gateway/bot`` recommends), and Discord sends a guild's events to
shard ``(guild_id >> 22) % shard_count``, DMs to shard 0. Processes share the conversation store,
so a thread keeps its conversation when its process restarts, and every message or interaction is
handed to the service, which claims it in the store before it is acted on
(:meth:`bot.service.Service.handle`): a replay that reaches another process (a shard handover, a
redelivery) is answered once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Optional

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.shard import Shard

from bot.admission import Requester
from bot.limits import SeenKeys
from bot.settings import Settings
from pipeline.errors import HuggingGPTError
from adapters.turn import INTERRUPTED_ELSEWHERE as INTERRUPTED, RESTARTED

from . import ask, conversation, upload
from .delivery import tell_privately
from .policy import REQUIRED_IN_CHANNEL, AttachmentInfo, attachment_refusal, missing_permission
from .render import missing_permission_sentence
from .runs import LiveRun
from .approval import press_plan
from .components import PlanButton, PlanStepSelect
from .stop import StopButton

if TYPE_CHECKING:
    from bot.incoming import ConversationKey
    from bot.service import Service

log = logging.getLogger("hugginggpt.discord")

INTERACTION_TOKEN_LIFETIME = timedelta(minutes=14)
"""Interaction tokens are valid for 15 minutes (Discord API docs, "Interactions"); the bot stops
using one a minute before, and posts only into the thread after that."""
FILE_TYPES_WAIT = 10.0
"""Seconds the start waits for the served tasks to know the ``file_types`` of ``/ask``."""
REFUSAL_QUIET_SECONDS = 600.0
"""After refusing a follow-up, the same refusal to the same member in the same thread stays
silent this long (seconds): told once, not once per message."""


def bot_intents() -> discord.Intents:
    """Gateway intents the bot needs: guilds (channels, threads, roles), guild and direct
    messages, and the privileged message content intent (follow-ups in threads that do not
    mention the bot)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.message_content = True
    intents.dm_messages = True  # the bot's DM is a conversation (DM content needs no privileged intent)
    return intents


INTERRUPTED_ELSEWHERE = f"\u26a0\ufe0f {INTERRUPTED}"
"""Posted in a thread whose turn a dead process left running (found within the lease time)."""


class HuggingGPTBot(discord.AutoShardedClient):
    """The Discord front end on one :class:`bot.service.Service`, running some or all shards.

    Args:
        service: the service (``Service.create(settings)``); the caller closes it after the bot.
        settings: all settings; ``settings.discord`` configures the bot, ``settings.storage``
            limits incoming files.
        upload_limit: bytes per uploaded file when no interaction says it (``None``: the guild's
            limit, ``Guild.filesize_limit``).
        edit_rate: progress message edits per second (default 1).
        shutdown_grace: seconds :meth:`close` lets runs in flight finish before marking them.
        shard_ids: the shards this process runs (each in ``0..shard_count-1``), or ``None`` for all.
        shard_count: the total number of shards of the bot, or ``None`` to use the number ``GET
            /gateway/bot`` recommends (then ``shard_ids`` must be ``None`` too).
        options: further ``discord.AutoShardedClient`` options (e.g. ``guild_ready_timeout``).

    Attributes:
        tree: the application command tree holding ``/<command_name>``.
        command_syncs: how many times the commands were synced (1 after start; never on reconnect).
        interaction_token_lifetime: how long after an interaction its token is still used
            (default 14 minutes; the token dies at 15).
    """

    def __init__(
        self,
        service: Service,
        settings: Settings,
        *,
        upload_limit: int | None = None,
        edit_rate: float = 1.0,
        shutdown_grace: float = 30.0,
        shard_ids: list[int] | None = None,
        shard_count: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__(intents=bot_intents(), allowed_mentions=discord.AllowedMentions(everyone=False, roles=False,
                                                                                          users=False, replied_user=False),
                         shard_ids=shard_ids, shard_count=shard_count, **options)
        self.service = service
        self.settings = settings
        self.cfg = settings.discord
        self.upload_limit = upload_limit
        self.edit_rate = edit_rate
        self.shutdown_grace = shutdown_grace
        self.tree = app_commands.CommandTree(self)
        self.command_syncs = 0
        self.interaction_token_lifetime = INTERACTION_TOKEN_LIFETIME
        self.seen_events = SeenKeys(ttl=3600.0)
        self.quiet_refusals = SeenKeys(ttl=REFUSAL_QUIET_SECONDS)
        self._runs: dict[asyncio.Task[Any], LiveRun] = {}
        self._live: dict[str, LiveRun] = {}  # run id -> run, for Stop presses
        self.conversation_threads: dict[int, int] = {}  # conversation thread id -> upload limit seen there (bytes)
        self._closing = False
        self.start_error: BaseException | None = None  # why the first gateway connection failed
        self._start_failed = asyncio.Event()
        self.forms = upload.Forms()  # the upload forms of /ask open now
        self.ask_command = self._add_command()

    # ------------------------------------------------------------------------------------------
    # setup

    def _add_command(self) -> upload.AskCommand:
        bot = self

        async def ask(
            interaction: discord.Interaction,
            prompt: Optional[str] = None,
            file1: Optional[discord.Attachment] = None,
            file2: Optional[discord.Attachment] = None,
            file3: Optional[discord.Attachment] = None,
        ) -> None:
            await bot.on_ask(interaction, prompt or "", [f for f in (file1, file2, file3) if f is not None])

        command = upload.AskCommand(
            name=self.cfg.command_name,
            description="Ask HuggingGPT: it plans AI tasks, runs Hugging Face models and answers with files.",
            callback=ask,
        )
        app_commands.describe(
            prompt="What you want, e.g. 'describe this photo'; leave it out for a form taking up to 10 files",
            file1="An image, audio or video file", file2="Another file", file3="Another file",
        )(command)

        async def new(interaction: discord.Interaction) -> None:
            await bot.on_new(interaction)

        restart = app_commands.Command(name="new", description="Start a new conversation in my DMs.",
                                       callback=new)
        for cmd in (command, restart):
            # user-installable, and usable in the bot's DM and group DMs (Discord "integration_types", "contexts")
            app_commands.allowed_installs(guilds=True, users=True)(cmd)
            app_commands.allowed_contexts(guilds=True, dms=True, private_channels=True)(cmd)
            self.tree.add_command(cmd)
        return command

    async def setup_hook(self) -> None:
        """Sync the slash command once per process start (``setup_hook`` runs once, before the
        gateway connects; ``on_ready`` runs again after every reconnect)."""
        self.add_dynamic_items(StopButton, PlanButton, PlanStepSelect)  # Stop and plan presses, also on messages from before a restart
        self.service.events.on_interrupted(self._tell_interrupted)  # logged in now: threads of dead processes can be told
        self.ask_command.file_types = tuple(await self._file_types())
        await self.tree.sync()
        self.command_syncs += 1
        log.info("synced /%s", self.cfg.command_name)

    async def _file_types(self) -> list[str]:
        """The ``file_types`` filter of ``/ask`` and its form (:func:`adapters.discord.upload.file_types`)
        from the kinds of file the served tasks read; no filter when they cannot be known within
        :data:`FILE_TYPES_WAIT` seconds (logged)."""
        try:
            kinds = await asyncio.wait_for(self.service.readable_kinds(), FILE_TYPES_WAIT)
        except (asyncio.TimeoutError, HuggingGPTError, OSError) as e:
            log.warning("the served tasks are not known (%r): /%s offers every kind of file", e, self.cfg.command_name)
            kinds = set()
        return upload.file_types(kinds)

    async def _tell_interrupted(self, marked: list[tuple[ConversationKey, int]]) -> None:
        """Tell each Discord thread (or DM) whose turn a dead process left running that it stopped
        (``Service.events``; any process may do it, through the REST API)."""
        for key, _turn in marked:
            if key.platform != "discord":
                continue
            try:
                if key.workspace == "dm":
                    user = await self.fetch_user(int(key.channel))
                    await user.send(INTERRUPTED_ELSEWHERE)
                else:
                    channel = self.get_channel(int(key.thread)) or await self.fetch_channel(int(key.thread))
                    await channel.send(INTERRUPTED_ELSEWHERE)  # type: ignore[union-attr]
            except (discord.HTTPException, ValueError) as e:
                log.warning("could not tell %s about its interrupted turn: %s", key.as_string(), e)

    def dispatch(self, event_name: str, /, *args: Any, **kwargs: Any) -> None:
        # discord.py dispatches "disconnect" inside the ``except`` of its connect loop, then retries
        # for ever: before the first READY that is a failed start, which :meth:`started` reports.
        failure = sys.exc_info()[1] if event_name == "disconnect" and not self.is_ready() else None
        if failure is not None and not isinstance(failure, discord.gateway.ReconnectWebSocket):
            self.start_error = self.start_error or failure
            self._start_failed.set()
        super().dispatch(event_name, *args, **kwargs)

    async def launch_shard(self, gateway: yarl.URL, shard_id: int, *, initial: bool = False) -> None:
        """Connect one shard at start (``AutoShardedClient.launch_shards`` calls this for each).

        Unlike the library, which retries a failed first connection every 5 s for ever, a failure
        here is final: :meth:`started` reports it (a wrong gateway URL, a network that blocks the
        websocket), and the command says it in one sentence. Later reconnects are the library's.
        ``[discord] gateway_url``, when set, wins over the URL ``GET /gateway/bot`` returned (the
        library's reconnects use it too, as ``DiscordWebSocket.DEFAULT_GATEWAY``).

        Raises:
            Exception: what ``DiscordWebSocket.from_client`` raised (``OSError``,
                ``aiohttp.ClientError``, ``asyncio.TimeoutError``, ``discord.ConnectionClosed``...).
        """
        if self.cfg.gateway_url:
            gateway = yarl.URL(self.cfg.gateway_url)
        try:
            ws = await asyncio.wait_for(DiscordWebSocket.from_client(self, initial=initial, gateway=gateway,
                                                                     shard_id=shard_id),
                                        timeout=self.shard_connect_timeout)
        except Exception as e:
            self.start_error = self.start_error or e
            self._start_failed.set()
            raise
        # what the library's launch_shard does after connecting (discord/shard.py, discord.py 2.7)
        shard = Shard(ws, self, self._AutoShardedClient__queue.put_nowait)  # type: ignore[attr-defined]
        self._AutoShardedClient__shards[shard_id] = shard  # type: ignore[attr-defined]
        shard.launch()

    def shard_summary(self) -> str:
        """The shards this process runs, for the log: ``"shards 0-3 of 8"`` or ``"shards 0, 2, 5 of 8"``."""
        ids = sorted(self.shard_ids if self.shard_ids is not None else range(self.shard_count or 1))
        if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
            shown = f"{ids[0]}-{ids[-1]}"
        else:
            shown = ", ".join(str(i) for i in ids)
        return f"shard{'s' if len(ids) != 1 else ''} {shown} of {self.shard_count}"

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

    def precheck(self, attachments: list[Any], *, permissions: discord.Permissions | None = None,
                 in_thread: bool = True, max_files: int | None = None) -> str | None:
        """Discord's own refusals of ``/ask`` and follow-ups, in order, before the service is asked
        (access, rate and concurrency are the service's): shutting down, the bot's permissions
        (``/ask`` in a guild: ``permissions``), the attachments' declared size and type
        (:func:`adapters.discord.policy.attachment_refusal`; at most ``max_files`` files when given
        and lower than ``[storage] max_files``). Returns the user's sentence, or ``None`` when the
        request may go to the service."""
        if self._closing:
            return RESTARTED
        if permissions is not None:
            missing = missing_permission(self._granted(permissions), in_thread=in_thread)
            if missing is not None:
                return missing_permission_sentence(missing, "this thread" if in_thread else "this channel")
        return attachment_refusal([AttachmentInfo(a.filename, a.size, a.content_type) for a in attachments],
                                  max_bytes=self.settings.storage.max_file_bytes,
                                  max_files=min(max_files or self.settings.storage.max_files,
                                                self.settings.storage.max_files))

    @staticmethod
    def requester(user: Any, guild_id: int | None, channel_ids: list[int]) -> Requester:
        """Who asks, for the service's admission: the user, the channel and (in a thread) its
        parent, the guild (``None`` in a DM or group DM, which ``[discord]``'s allow-lists refuse
        when any is set), the member's roles."""
        return Requester("discord", str(user.id), tuple(str(c) for c in channel_ids if c),
                         None if guild_id is None else str(guild_id),
                         tuple(str(r.id) for r in getattr(user, "roles", [])), is_dm=guild_id is None)

    @staticmethod
    def _granted(perms: discord.Permissions) -> set[str]:
        # getattr, not iteration: iteration yields canonical names only ("read_messages", not "view_channel")
        return {name for name in REQUIRED_IN_CHANNEL if getattr(perms, name, False)}

    def is_conversation_thread(self, thread: discord.Thread) -> bool:
        return thread.id in self.conversation_threads or (self.user is not None and thread.owner_id == self.user.id)

    def spawn(self, coro: Any, live: LiveRun) -> asyncio.Task[Any]:
        """Run ``coro`` (one request handed to the service) in the background as ``live``:
        :meth:`drain` waits for it, the Stop button finds it."""
        task = asyncio.create_task(coro)
        live.task = task
        self._runs[task] = live
        self._live[live.run_id] = live

        def done(t: asyncio.Task[Any]) -> None:
            run = self._runs.pop(t, None)
            if run is not None:
                self._live.pop(run.run_id, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("run failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    # ------------------------------------------------------------------------------------------
    # events and runs

    async def on_ask(self, interaction: discord.Interaction, prompt: str, attachments: list[discord.Attachment]) -> None:
        """Handle ``/ask`` (:func:`adapters.discord.ask.on_ask`); without a prompt and files, open
        its upload form (:mod:`adapters.discord.upload`) unless Discord's side refuses first."""
        if prompt.strip() or attachments:
            await ask.on_ask(self, interaction, prompt, attachments)
            return
        if not self.seen_events.first_time(("interaction", interaction.id)):
            return
        refusal = self.precheck([], in_thread=isinstance(interaction.channel, discord.Thread),
                                permissions=interaction.app_permissions if interaction.guild_id is not None else None)
        if refusal is not None:
            await tell_privately(interaction, refusal)
            return
        await self.forms.open(self, interaction, self.ask_command.file_types)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Every interaction (discord.py dispatches them after routing): a submission of an upload
        form the bot no longer holds gets one private sentence (:meth:`adapters.discord.upload.Forms.answer_stale`)."""
        await self.forms.answer_stale(interaction, self.cfg.command_name)

    async def on_new(self, interaction: discord.Interaction) -> None:
        """Handle ``/new``: in the bot's DM, start the DM conversation over; elsewhere say how
        conversations work (one per thread)."""
        if interaction.guild_id is None and isinstance(interaction.channel, discord.DMChannel):
            sentence = await conversation.start_over(self, interaction.user.id)
        else:
            sentence = (f"Each thread is its own conversation: use /{self.cfg.command_name} in a channel to "
                        f"start a new one.")
        await tell_privately(interaction, sentence)

    async def on_message(self, message: discord.Message) -> None:
        """A message in one of the bot's threads or in its DM continues that conversation
        (:func:`adapters.discord.conversation.on_message`)."""
        await conversation.on_message(self, message)

    def remember_thread(self, thread_id: int, upload_limit: int) -> None:
        self.conversation_threads.pop(thread_id, None)
        self.conversation_threads[thread_id] = upload_limit
        while len(self.conversation_threads) > 100_000:  # oldest first (dicts keep insertion order)
            del self.conversation_threads[next(iter(self.conversation_threads))]

    async def on_plan_pressed(self, interaction: discord.Interaction, verb: str, plan_id: str,
                              drop: tuple[int, ...]) -> None:
        """A press on a waiting plan's button or select (:func:`adapters.discord.approval.press_plan`)."""
        await press_plan(self, interaction, verb, plan_id, drop)

    def live_run(self, run_id: str) -> LiveRun | None:
        """The run in flight with id ``run_id``, or ``None`` (ended, or before a restart)."""
        return self._live.get(run_id)

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
