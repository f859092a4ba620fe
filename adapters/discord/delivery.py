"""One turn handed to the service and rendered into a Discord thread or DM: the progress message
(Components V2, with a Stop button), the generated files (a media gallery), the answer.

Limits from the Discord API docs: ``content`` up to 2,000 characters and up to 10 attachments per
message ("Create Message"); the upload size limit comes from the guild or the interaction.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import time
from typing import Any

import discord

from adapters.editor import MessageEditor
from adapters.progress import Progress
from adapters.progress import record_error
from adapters.turn import CRASHED, Outcome, follow
from bot.approval import ApprovalNeeded
from bot.incoming import Accepted, Message
from pipeline.errors import HuggingGPTError
from pipeline.types import Event, Resource, RunRecord

from .components import MediaItem, media_view, post_plan, progress_texts, progress_view
from .media import fit_media
from .render import split_message
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

MAX_FILES_PER_MESSAGE = 10
"""Attachments per message (Discord API docs, "Create Message")."""


class CannotPost(HuggingGPTError):
    """Discord refused a message that shows the turn (the progress message, the pointer of a
    private ``/ask``); logged, the turn is given up."""

    def __init__(self, detail: str) -> None:
        super().__init__("I could not post in the thread; please check my permissions there.", detail)


async def follow_turn(bot: Any, message: Message, view: DiscordView, *, what: str, guild: int | None) -> Outcome | None:
    """Hand ``message`` to the service once (:meth:`bot.service.Service.handle`: the delivery's
    claim, admission, the files, the turn) and follow it into ``view``
    (:func:`adapters.turn.follow`).

    Args:
        bot: the :class:`adapters.discord.bot_client.HuggingGPTBot`.
        what: the delivery for the log (``"message 123"``, ``"interaction 456"``).
        guild: its guild id, for the log (``None``: a DM).

    Returns:
        The outcome, or ``None`` when another process (or an earlier delivery) took the delivery:
        nothing is said then.

    Raises:
        Exception: what the view raised (an interaction that could not be deferred).
    """
    outcome = await follow(bot.service.handle(message), view, progress=view.live.progress, where=f"discord {what}")
    if outcome.moment == "elsewhere":
        log.info("%s already taken by another process (or an earlier delivery)", what)
        return None
    log.info("took %s in guild %s on %s", what, guild, bot.shard_summary())
    return outcome


class DiscordView:
    """Discord's :class:`adapters.turn.TurnView`: a Components V2 progress message with a Stop
    button, posted by :meth:`show` once the request's files passed (the subclass's
    ``open``, the message's key) and edited at most ``edit_rate`` times per second (Discord's edit
    limits), except its first change (the plan, in most runs), which is sent at once; at the end
    it shows the final state, then the files (a media gallery, fitted to the upload limit), the
    notice and the answer are posted, in that order, in messages of at most 2,000 characters.

    Args:
        live: the run's shared state; ``live.stop`` is the message's stop signal (the Stop
            button sets it) and ``live.progress`` is what the message shows.
        edit_rate: progress message edits per second after the first change.
        title: the request, quoted on top of the progress message.
    """

    def __init__(self, live: LiveRun, edit_rate: float, title: str | None = None) -> None:
        self.live, self.edit_rate, self.title = live, edit_rate, title
        self.run: ChannelRun | None = None
        self.upload_limit = 0
        self._notice: str | None = None
        self.waiting: ApprovalNeeded | None = None

    async def show(self, channel: Any, upload_limit: int, reply_to: discord.Message | None = None) -> None:
        """Post the progress message in ``channel`` (a thread, a DM, or anything with
        ``send(view=...)``), as a reply to ``reply_to`` when given; files go up in ``upload_limit``
        bytes each.

        Raises:
            CannotPost: Discord refused it (logged).
        """
        run = ChannelRun(channel, self.live, self.title, self.edit_rate)
        await run.post_status(reply_to)
        self.run, self.upload_limit = run, upload_limit

    async def accepted(self) -> None:
        """The service admitted the request (:class:`bot.incoming.Accepted`): nothing to do here."""

    async def unshown(self, outcome: Outcome) -> None:
        """The turn ended before the progress message was posted: the subclass says it."""

    async def progress(self, progress: Progress, event: Event | Accepted) -> None:
        """Edit the progress message (the editor skips texts already shown, and paces the edits)."""
        if isinstance(event, Accepted):
            await self.accepted()
        elif isinstance(event, ApprovalNeeded):
            self.waiting = event
        elif self.run is not None:
            self.run.editor.set(self.run.key_text())

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        """Nothing yet: posted after the files (:meth:`end`)."""

    async def files(self, record: RunRecord) -> None:
        """Nothing yet: posted once the progress message shows the final state (:meth:`end`)."""

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """Kept for :meth:`end`: posted just before the answer."""
        self._notice = sentence

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """Show the final state, then post the files, the notice and the answer (or the failure's
        sentence); a cancelled run's message only shows it stopped (at most 5 s). A post Discord
        refuses is logged. Before the progress message was posted: :meth:`unshown`."""
        run = self.run
        if run is None:
            await self.unshown(outcome)
            return
        if outcome.moment == "restarted":
            await mark_stopped(run.editor, run.key_text())
            return
        channel = run.channel
        run.record = outcome.record or RunRecord(request="", status="error", error=outcome.sentence)
        try:
            record = await run.settle()
            if outcome.moment == "awaiting" and self.waiting is not None:
                await post_plan(channel, self.waiting)
                return
            await post_files(channel, record, self.upload_limit)
            if self._notice:  # said before the answer it qualifies; the answer stays the thread's last word
                await channel.send(f"⚠️ {self._notice}", suppress_embeds=True)
            await post_answer(channel, record, progress.answer)
        except discord.HTTPException as e:
            log.warning("could not post the result in channel %s: %s", getattr(channel, "id", "?"), e)


class ChannelRun:
    """The progress message of one run in a channel, and the run's record once it is known.

    Args:
        channel: where the run is shown.
        live: the run's shared state (progress, Stop button, press).
        title: the request, quoted on top of the progress message.
        edit_rate: progress message edits per second after the first change.
    """

    def __init__(self, channel: Any, live: LiveRun, title: str | None, edit_rate: float) -> None:
        self.channel, self.live, self.title, self.edit_rate = channel, live, title, edit_rate
        self.status: discord.Message | None = None
        self.editor: MessageEditor  # set by post_status, which every other step follows
        self.record: RunRecord | None = None
        self.shown_by_press: list[str] = []  # the final state, when the Stop press's interaction showed it

    def view(self) -> Any:
        """The progress message's components (no Stop button once pressed)."""
        live = self.live
        run_id = None if live.stop.is_set() else live.run_id
        return progress_view(live.progress, run_id=run_id, title=self.title, stopped_by=live.stopped_by)

    def key_text(self) -> str:
        """What the editor compares: the texts shown and whether Stop shows."""
        live = self.live
        texts = progress_texts(live.progress, title=self.title, stopped_by=live.stopped_by)
        return "\n".join(texts) + f"|{live.progress.finished or live.stop.is_set()}"

    async def post_status(self, reply_to: discord.Message | None) -> None:
        """Post the progress message (a reply to ``reply_to`` when given).

        Raises:
            CannotPost: Discord refused it (logged).
        """
        try:
            if reply_to is not None:
                self.status = await reply_to.reply(view=self.view(), mention_author=False)
            else:
                self.status = await self.channel.send(view=self.view())
        except discord.HTTPException as e:
            log.warning("could not post in channel %s: %s", getattr(self.channel, "id", "?"), e)
            raise CannotPost(f"progress message in channel {getattr(self.channel, 'id', '?')}: {e}") from None
        self.editor = MessageEditor(self._edit, self.key_text(), interval=0.0, name=str(self.status.id))
        self.live.editor = self.editor

    async def _edit(self, key: str) -> None:
        self.editor.interval = 1.0 / self.edit_rate  # the first change (the plan, usually) goes out at once
        if key not in self.shown_by_press and self.status is not None:
            await self.status.edit(view=self.view())

    async def settle(self) -> RunRecord:
        """Show the final state (through the Stop press when it stopped the run); the record."""
        live, record = self.live, self.record
        assert record is not None, "follow() sets the record"
        if not record.stopped:
            live.stopped_by = None  # pressed too late: the run had finished anyway
        elif live.press is not None:
            await _show_through_press(live, self.view(), self.key_text(), self.shown_by_press)
        await self.editor.close(self.key_text())
        if live.pressed_at is not None:
            log.info("run %s stopped %.0f ms after the press", live.run_id, (time.monotonic() - live.pressed_at) * 1000)
        return record


async def post_answer(channel: Any, record: RunRecord, streamed: str) -> None:
    """Post the answer (split at 2,000 characters), or the failure sentence. Link previews are
    suppressed (message flag ``SUPPRESS_EMBEDS``): the links are the controller's, and a preview
    would make Discord's servers fetch whatever URL it wrote."""
    if not record.answered:
        await channel.send(f"⚠️ {record_error(record) or CRASHED}", suppress_embeds=True)
        return
    chunks = split_message(record.response or streamed)
    if not chunks and not record.files:
        chunks = ["The run finished without an answer text; please rephrase your request."]
    for chunk in chunks:
        await channel.send(chunk, suppress_embeds=True)


async def _show_through_press(live: LiveRun, view: Any, key: str, shown: list[str]) -> None:
    """Show the stopped run's final state through the Stop press's interaction (``PATCH
    .../messages/@original``, the message the button is on), at once."""
    try:
        await live.press.edit_original_response(view=view)
        shown.append(key)
    except discord.HTTPException as e:  # the channel edit follows within a second anyway
        log.info("could not show the stopped run %s through the press: %s", live.run_id, e)


async def mark_stopped(editor: MessageEditor, key: str) -> None:
    """Show the stopped run in its progress message (waiting at most 5 s)."""
    try:
        await asyncio.wait_for(editor.close(key), 5)
    except (asyncio.TimeoutError, TimeoutError, discord.HTTPException):
        log.warning("could not mark the status message %s as interrupted", editor.name)


def _alt_text(res: Resource, record: RunRecord) -> str:
    """Alt text for a generated file: "<task> output of task <n>" (from ``res.origin``)."""
    tid = res.origin.removeprefix("task:")
    task = next((t for t in record.tasks if str(t.id) == tid), None)
    if task is not None:
        return f"{task.task} output of task {task.id}"
    return res.description or res.kind


async def post_files(channel: Any, record: RunRecord, limit: int) -> None:
    """Upload the run's generated files (shrunk to ``limit`` bytes each) in components messages
    of at most 10 files and ``limit`` bytes: images in a media gallery with alt text, audio and
    video as file components, with a note for every file changed or left out."""
    prepared: list[MediaItem] = []
    notes: list[str] = []
    names: set[str] = set()
    for res in record.files:
        try:
            data = await asyncio.to_thread(res.path.read_bytes)
        except OSError as e:
            log.warning("generated file %s unreadable: %s", res.path, e)
            notes.append(f"📎 A generated file ({res.id}) could not be read, so it is not attached.")
            continue
        ext = mimetypes.guess_extension(res.mime) or ""
        name = res.name or f"{res.id}{ext}"
        fitted = await fit_media(data, filename=name, mime=res.mime, limit=limit)
        if fitted.note:
            notes.append(fitted.note)
        if fitted.data is not None:
            filename = fitted.filename
            while filename in names:  # attachment://name must point at one file
                filename = f"{res.id}-{filename}"
            names.add(filename)
            mime = mimetypes.guess_type(filename)[0] or res.mime
            prepared.append(MediaItem(fitted.data, filename, mime, _alt_text(res, record)))
    batches: list[list[MediaItem]] = []
    for item in prepared:
        if not batches or len(batches[-1]) >= MAX_FILES_PER_MESSAGE or sum(len(i.data) for i in batches[-1]) + len(item.data) > limit:
            batches.append([])
        batches[-1].append(item)
    note_text = "\n".join(notes)
    for n, batch in enumerate(batches):
        view, uploads = media_view(batch, note_text if n == 0 and note_text else None)
        await channel.send(view=view, files=uploads)
    if not batches and note_text:
        for chunk in split_message(note_text):
            await channel.send(chunk)


async def tell_privately(interaction: discord.Interaction, sentence: str) -> None:
    """Tell only the user: an ephemeral response, or (after a deferral) an ephemeral follow-up
    replacing the public "thinking" message."""
    try:
        if not interaction.response.is_done():
            await interaction.response.send_message(sentence, ephemeral=True)
        else:
            try:
                await interaction.delete_original_response()
            except discord.HTTPException:
                pass
            await interaction.followup.send(sentence, ephemeral=True)
    except discord.HTTPException as e:
        log.warning("could not tell user of interaction %s: %s", interaction.id, e)


async def reply_quietly(message: discord.Message, text: str) -> None:
    """Reply to ``message`` without pinging its author; a failure is logged."""
    try:
        await message.reply(text, mention_author=False)
    except discord.HTTPException as e:
        log.warning("could not reply to message %s: %s", message.id, e)
