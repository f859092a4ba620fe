"""One run rendered into a Discord thread: the status message, the generated files, the answer.

Limits from the Discord API docs: ``content`` up to 2,000 characters and up to 10 attachments per
message ("Create Message"); the upload size limit comes from the guild or the interaction.
"""

from __future__ import annotations

import asyncio
import io
import logging
import mimetypes
from collections.abc import Callable
from typing import Any

import discord

from adapters.editor import MessageEditor
from bot.incoming import ConversationKey, IncomingFile
from bot.progress import Progress
from pipeline.errors import HuggingGPTError
from pipeline.types import Done, Resource, RunRecord

from .media import fit_media
from .render import render_progress, split_message

log = logging.getLogger("hugginggpt.discord")

MAX_FILES_PER_MESSAGE = 10
"""Attachments per message (Discord API docs, "Create Message")."""

SHUTDOWN_SENTENCE = "I'm restarting and could not finish this; please send your message again in a minute."
CRASH_SENTENCE = "Something went wrong on my side while answering; the details are in my log. Please try again."


async def run_in_thread(
    service: Any,
    thread: discord.Thread,
    text: str,
    files: list[IncomingFile],
    *,
    key: ConversationKey,
    user: str,
    progress: Progress,
    upload_limit: int,
    edit_rate: float = 1.0,
    on_editor: Callable[[MessageEditor], None] = lambda editor: None,
    reply_to: discord.Message | None = None,
) -> RunRecord | None:
    """Run one turn of ``service`` and render it into ``thread``: a status message edited at most
    ``edit_rate`` times per second (Discord's edit limits), the generated files (fitted to
    ``upload_limit`` bytes each), the answer in chunks of at most 2,000 characters.

    Returns:
        The run's record, or ``None`` when the status message could not be posted.

    Raises:
        asyncio.CancelledError: after marking the status message as stopped (shutdown).
    """
    try:
        if reply_to is not None:
            status = await reply_to.reply(render_progress(progress), mention_author=False)
        else:
            status = await thread.send(render_progress(progress))
    except discord.HTTPException as e:
        log.warning("could not post in thread %s: %s", thread.id, e)
        return None
    editor = MessageEditor(lambda text: status.edit(content=text), status.content, interval=1.0 / edit_rate,
                           name=str(status.id))
    on_editor(editor)
    record: RunRecord | None = None
    try:
        try:
            async for event in service.handle(text, files, key=key, user=user):
                progress.apply(event)
                editor.set(render_progress(progress))
                if isinstance(event, Done):
                    record = event.record
        except HuggingGPTError as e:
            log.info("run in thread %s refused: %s", thread.id, e)
            record = RunRecord(request=text, status="error", error=e.user_message)
            progress.apply(Done(record))
        if record is None:
            record = RunRecord(request=text, status="error", error=CRASH_SENTENCE)
            progress.apply(Done(record))
        await editor.close(render_progress(progress))
        await post_files(thread, record.files, upload_limit)
        if record.answered:
            chunks = split_message(record.response or progress.answer)
            if not chunks and not record.files:
                chunks = ["The run finished without an answer text; please rephrase your request."]
            for chunk in chunks:
                await thread.send(chunk)
        else:
            await thread.send(f"⚠️ {record.error or CRASH_SENTENCE}")
        return record
    except asyncio.CancelledError:
        progress.stop(SHUTDOWN_SENTENCE)
        await asyncio.shield(mark_stopped(editor, progress))
        raise
    except discord.HTTPException as e:
        log.warning("could not post the result in thread %s: %s", thread.id, e)
        return record
    except Exception:
        log.exception("run in thread %s crashed", thread.id)
        progress.stop(CRASH_SENTENCE)
        await mark_stopped(editor, progress)
        return record

async def mark_stopped(editor: MessageEditor, progress: Progress) -> None:
    """Show the stopped run in its status message (waiting at most 5 s)."""
    try:
        await asyncio.wait_for(editor.close(render_progress(progress)), 5)
    except (asyncio.TimeoutError, TimeoutError, discord.HTTPException):
        log.warning("could not mark the status message %s as interrupted", editor.name)

async def post_files(thread: discord.Thread, resources: list[Resource], limit: int) -> None:
    """Upload generated files (shrunk to ``limit`` bytes each) in messages of at most 10 files,
    with a note for every file changed or left out."""
    prepared: list[tuple[bytes, str, str]] = []
    notes: list[str] = []
    for res in resources:
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
            prepared.append((fitted.data, fitted.filename, res.description[:1000]))
    batches: list[list[tuple[bytes, str, str]]] = []
    for item in prepared:
        if not batches or len(batches[-1]) >= MAX_FILES_PER_MESSAGE or sum(len(i[0]) for i in batches[-1]) + len(item[0]) > limit:
            batches.append([])
        batches[-1].append(item)
    note_text = "\n".join(notes)
    for n, batch in enumerate(batches):
        content = note_text[:2000] if n == 0 and note_text else None
        await thread.send(content=content, files=[discord.File(io.BytesIO(d), filename=f, description=desc or None)
                                                  for d, f, desc in batch])
    if not batches and note_text:
        for chunk in split_message(note_text):
            await thread.send(chunk)


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
