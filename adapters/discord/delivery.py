"""One run rendered into a Discord thread or DM: the progress message (Components V2, with a Stop
button), the generated files (a media gallery), the answer.

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
from bot.incoming import ConversationKey, IncomingFile
from pipeline.errors import HuggingGPTError
from pipeline.types import Done, Resource, RunRecord

from .components import MediaItem, media_view, progress_texts, progress_view
from .media import fit_media
from .render import split_message
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

MAX_FILES_PER_MESSAGE = 10
"""Attachments per message (Discord API docs, "Create Message")."""

SHUTDOWN_SENTENCE = "I'm restarting and could not finish this; please send your message again in a minute."
CRASH_SENTENCE = "Something went wrong on my side while answering; the details are in my log. Please try again."


async def run_in_channel(
    service: Any,
    channel: Any,
    text: str,
    files: list[IncomingFile],
    *,
    key: ConversationKey,
    user: str,
    live: LiveRun,
    upload_limit: int,
    title: str | None = None,
    edit_rate: float = 1.0,
    reply_to: discord.Message | None = None,
) -> RunRecord | None:
    """Run one turn of ``service`` and render it into ``channel`` (a thread, a DM, or anything
    with ``send(view=..., files=...)``): a Components V2 progress message with a Stop button,
    posted at once and edited at most ``edit_rate`` times per second (Discord's edit limits),
    except its first change (the plan, in most runs), which is sent at once; then the generated
    files (images in a media gallery, fitted to ``upload_limit`` bytes each) and the answer in
    messages of at most 2,000 characters.

    Args:
        live: the run's shared state; ``live.stop`` is passed to ``Service.handle`` (the Stop
            button sets it) and ``live.progress`` is what the message shows.
        title: the request, quoted on top of the progress message.
        reply_to: the user's message the progress message answers (follow-ups).

    Returns:
        The run's record, or ``None`` when the progress message could not be posted.

    Raises:
        asyncio.CancelledError: after marking the progress message as stopped (shutdown).
    """
    progress = live.progress

    def view() -> Any:
        run_id = None if live.stop.is_set() else live.run_id  # no Stop button once pressed
        return progress_view(progress, run_id=run_id, title=title, stopped_by=live.stopped_by)

    def key_text() -> str:  # what the editor compares: the texts and whether Stop shows
        texts = progress_texts(progress, title=title, stopped_by=live.stopped_by)
        return "\n".join(texts) + f"|{progress.finished or live.stop.is_set()}"

    try:
        if reply_to is not None:
            status = await reply_to.reply(view=view(), mention_author=False)
        else:
            status = await channel.send(view=view())
    except discord.HTTPException as e:
        log.warning("could not post in channel %s: %s", getattr(channel, "id", "?"), e)
        return None
    shown_by_press: list[str] = []  # the final state, when the Stop press's interaction showed it

    async def edit(key: str) -> None:
        editor.interval = 1.0 / edit_rate  # the first change (the plan, usually) goes out at once
        if key not in shown_by_press:
            await status.edit(view=view())

    editor = MessageEditor(edit, key_text(), interval=0.0, name=str(status.id))
    live.editor = editor
    record: RunRecord | None = None
    try:
        try:
            async for event in service.handle(text, files, key=key, user=user, stop=live.stop):
                progress.apply(event)
                editor.set(key_text())  # the editor skips texts already shown
                if isinstance(event, Done):
                    record = event.record
        except HuggingGPTError as e:
            log.info("run in channel %s refused: %s", getattr(channel, "id", "?"), e)
            record = RunRecord(request=text, status="error", error=e.user_message)
            progress.apply(Done(record))
        if record is None:
            record = RunRecord(request=text, status="error", error=CRASH_SENTENCE)
            progress.apply(Done(record))
        if not record.stopped:
            live.stopped_by = None  # pressed too late: the run had finished anyway
        elif live.press is not None:
            await _show_through_press(live, view(), key_text(), shown_by_press)
        await editor.close(key_text())
        if live.pressed_at is not None:
            log.info("run %s stopped %.0f ms after the press", live.run_id, (time.monotonic() - live.pressed_at) * 1000)
        await post_files(channel, record, upload_limit)
        if record.answered:
            chunks = split_message(record.response or progress.answer)
            if not chunks and not record.files:
                chunks = ["The run finished without an answer text; please rephrase your request."]
            for chunk in chunks:
                await channel.send(chunk)
        else:
            await channel.send(f"⚠️ {record.error or CRASH_SENTENCE}")
        return record
    except asyncio.CancelledError:
        progress.stop(SHUTDOWN_SENTENCE)
        await asyncio.shield(mark_stopped(editor, key_text()))
        raise
    except discord.HTTPException as e:
        log.warning("could not post the result in channel %s: %s", getattr(channel, "id", "?"), e)
        return record
    except Exception:
        log.exception("run in channel %s crashed", getattr(channel, "id", "?"))
        progress.stop(CRASH_SENTENCE)
        await mark_stopped(editor, key_text())
        return record


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
