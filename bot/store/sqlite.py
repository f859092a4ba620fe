"""The conversation store: threads as multi-turn conversations, and the files in them.

HuggingGPT plans with the chat log in view (Shen et al., NeurIPS 2023, §3.1: the chat history lets
the planner trace resources the user mentioned earlier). This module keeps that log:

* a *conversation* per platform + workspace/guild + channel + thread (:class:`ConversationKey`),
  with a short stable id;
* per *turn*: the user's text and files, the plan, model choices, results, answer, generated files,
  timings and status (the whole :meth:`RunRecord.to_json` document, plus a condensed answer);
* *resources*: every file a user sends and every file a task generates, with a short id unique
  within the conversation (``image-1``, ``audio-1``, ``image-2`` ... numbered per kind), its kind,
  origin (``"user"`` or ``"task:N"``, and the turn) and a one-line description.

All access goes through the :class:`ConversationStore` protocol, so a server database can replace
the default :class:`SQLiteStore` (SQLite in WAL mode via ``aiosqlite`` plus the media directory,
nothing to install) without touching the pipeline or the service. The connections live in
:mod:`bot.store.database`, the schema in :mod:`bot.store.migrations`, deletion rules in
:mod:`bot.store.retention`.

Errors: every storage failure (corrupt or locked database file, full disk, unwritable directory)
raises :class:`bot.errors.StorageError` whose message names the file; nothing else escapes.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import HuggingGPTError
from pipeline.types import MODALITIES, Modality, Resource, ResourceSink, RunRecord, Turn

from ..errors import StorageError
from ..incoming import ConversationKey
from ..tokens import count_json_tokens, count_tokens
from . import retention
from .chatlog import TURN_OVERHEAD_TOKENS, select_history, turn_views
from .database import Database
from .migrations import SCHEMA_VERSION
from .protocol import MediaWriter, PruneReport
from .text import SUMMARY_CHARS, clip_summary, valid_utf8

__all__ = ["DB_NAME", "SCHEMA_VERSION", "SUMMARY_CHARS", "SQLiteStore", "TURN_OVERHEAD_TOKENS"]

log = logging.getLogger(__name__)

DB_NAME = "conversations.sqlite3"
INTERRUPTED = "interrupted"
"""Error recorded on turns a crashed process left running (:meth:`SQLiteStore.mark_interrupted`)."""


def _gone(where: str, what: str, path: Path) -> StorageError:
    """The error for a conversation (or turn) deleted while in use."""
    return StorageError("This conversation no longer exists; start a new thread.", f"{where}: unknown {what} in {path}")


class _TurnSink:
    """:class:`ResourceSink` bound to one turn of one conversation."""

    def __init__(self, store: SQLiteStore, conversation_id: str, turn: int) -> None:
        self._store, self.conversation_id, self.turn = store, conversation_id, turn

    async def add(
        self, data: bytes, *, kind: Modality, mime: str, origin: str, description: str, name: str | None = None
    ) -> Resource:
        return await self._store.add_resource(
            self.conversation_id, self.turn, data, kind=kind, mime=mime, origin=origin,
            description=description, name=name,
        )


class SQLiteStore:
    """:class:`ConversationStore` on one SQLite file (WAL mode) plus a media store.

    The database is ``data_dir / "conversations.sqlite3"``; media files are written through
    ``media.put`` (content-hash names, shared between conversations when identical) and recorded
    relative to ``data_dir`` when inside it. One writer connection (transactions serialised by an
    asyncio lock, ``BEGIN IMMEDIATE`` against other processes) and one read-only connection, so a
    slow media write never delays loading another conversation's context
    (:class:`bot.store.database.Database`).

    Args:
        data_dir: the data directory (``settings.storage.data_dir``); created if missing.
        media: the media store (:class:`bot.store.media.MediaStore`) or anything with its ``put``.
        busy_timeout: seconds to wait for a lock held by another process before
            :class:`StorageError`.
        clock: returns the current time in seconds since the epoch (tests move time with it).

    Attributes:
        database: the :class:`Database` (its ``writer`` connection is for tests and tools).
    """

    def __init__(
        self, data_dir: Path, media: MediaWriter, *, busy_timeout: float = 5.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.path = self.data_dir / DB_NAME
        self.media = media
        self.busy_timeout = busy_timeout
        self._clock = clock
        self.database = Database(self.path, busy_timeout=busy_timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the data directory if needed, then open the database: refuse foreign or newer
        files, switch to WAL mode, apply pending migrations (:mod:`bot.store.migrations`).

        Raises:
            StorageError: the directory cannot be created, the file is corrupt, not SQLite,
                locked by another process beyond ``busy_timeout``, or from a newer version.
        """
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self.database.error(e, "creating the data directory") from None
        await self.database.open()

    async def close(self) -> None:
        """Close both connections (WAL is checkpointed by SQLite); safe to call twice."""
        await self.database.close()

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- conversations -------------------------------------------------------------------------

    async def get_or_create(self, key: ConversationKey) -> str:
        """Return the conversation id (10 hex characters, stable) for ``key``; create it if new.

        Raises:
            StorageError: the database is unusable.
        """
        skey = key.as_string()
        rows = await self.database.read(
            "looking up a conversation", "SELECT id FROM conversations WHERE key=?", (skey,)
        )
        if rows:
            return rows[0][0]
        async with self.database.lock:
            async with self.database.tx("creating a conversation") as db:
                row = await (await db.execute("SELECT id FROM conversations WHERE key=?", (skey,))).fetchone()
                if row:
                    return row[0]
                now = self._clock()
                while True:
                    cid = secrets.token_hex(5)
                    cur = await db.execute(
                        "INSERT OR IGNORE INTO conversations(id, key, created, platform, workspace, channel, thread,"
                        " updated) VALUES (?,?,?,?,?,?,?,?)",
                        (cid, skey, now, key.platform, key.workspace, key.channel, key.thread, now),
                    )
                    if cur.rowcount == 1:
                        return cid

    async def find(self, conversation_id: str) -> ConversationKey | None:
        """Return the :class:`ConversationKey` of ``conversation_id``, or ``None`` if unknown."""
        rows = await self.database.read(
            "looking up a conversation",
            "SELECT platform, workspace, channel, thread FROM conversations WHERE id=?",
            (conversation_id,),
        )
        return ConversationKey(*rows[0]) if rows else None

    # -- turns ---------------------------------------------------------------------------------

    async def begin_turn(self, conversation_id: str, user_text: str, user: str | None) -> int:
        """Record a new turn (status ``"running"``) and return its 0-based index.

        Raises:
            StorageError: unknown conversation (deleted meanwhile) or the database is unusable.
        """
        now = self._clock()
        user_text = valid_utf8(user_text)
        user = valid_utf8(user) if user is not None else None
        tokens = count_tokens(user_text)
        async with self.database.lock:
            async with self.database.tx("starting a turn") as db:
                cur = await db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conversation_id))
                if cur.rowcount != 1:
                    raise _gone("begin_turn", f"conversation {conversation_id!r}", self.path)
                (idx,) = await (
                    await db.execute(
                        "SELECT coalesce(max(idx) + 1, 0) FROM turns WHERE conversation_id=?", (conversation_id,)
                    )
                ).fetchone()
                await db.execute(
                    "INSERT INTO turns(conversation_id, idx, user_text, status, created, user, tokens)"
                    " VALUES (?,?,?,?,?,?,?)",
                    (conversation_id, idx, user_text, "running", now, user, tokens),
                )
        return int(idx)

    async def finish_turn(self, conversation_id: str, turn: int, record: RunRecord) -> None:
        """Store the run's outcome on ``turn``: status (``"ok"``/``"error"``), error sentence,
        full answer, condensed answer (``Turn.answer``, ~300 chars), and ``record.to_json()``
        (plan, selections, results, generated files, timings).

        Raises:
            StorageError: the turn does not exist or the database is unusable.
        """
        doc = valid_utf8(json.dumps(record.to_json(), ensure_ascii=False, default=str))
        summary = valid_utf8(clip_summary(record.response or (record.error or "")))
        response, error = valid_utf8(record.response), valid_utf8(record.error) if record.error is not None else None
        now = self._clock()
        async with self.database.lock:
            async with self.database.tx("saving a turn") as db:
                row = await (
                    await db.execute(
                        "SELECT user_text FROM turns WHERE conversation_id=? AND idx=?", (conversation_id, turn)
                    )
                ).fetchone()
                if row is None:
                    raise _gone("finish_turn", f"turn {conversation_id!r}/{turn}", self.path)
                await db.execute(
                    "UPDATE turns SET summary=?, tokens=?, status=?, error=?, finished=?"
                    " WHERE conversation_id=? AND idx=?",
                    (
                        summary, count_tokens(row[0]) + count_tokens(summary), record.status, error, now,
                        conversation_id, turn,
                    ),
                )
                await db.execute(
                    "INSERT OR REPLACE INTO turn_records(conversation_id, idx, answer, record) VALUES (?,?,?,?)",
                    (conversation_id, turn, response, doc),
                )
                await db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conversation_id))

    async def mark_interrupted(self) -> int:
        """Mark every turn still ``"running"`` (its process crashed or was killed) as
        ``"failed"`` with error ``"interrupted"``. Call once at start, before serving.

        Returns:
            The number of turns marked.
        """
        async with self.database.lock:
            async with self.database.tx("marking interrupted turns") as db:
                cur = await db.execute(
                    "UPDATE turns SET status='failed', error=?, finished=? WHERE status='running'",
                    (INTERRUPTED, self._clock()),
                )
                n = cur.rowcount
        if n:
            log.warning("%s: marked %d interrupted turn(s) as failed", self.path, n)
        return n

    async def turns(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every turn, oldest first, for display or resuming.

        Returns:
            ``[{"index", "user", "user_text", "answer" (full), "summary", "status" ("running" |
            "ok" | "error" | "failed"), "error", "started", "finished" (epoch seconds or None),
            "record" (the RunRecord JSON or None), "resources" ([prompt views with "path"])}]``.
        """
        rows = await self.database.read(
            "reading turns",
            "SELECT t.idx, t.user, t.user_text, coalesce(r.answer, ''), t.summary, t.status, t.error, t.created,"
            " t.finished, r.record FROM turns t LEFT JOIN turn_records r"
            " ON r.conversation_id = t.conversation_id AND r.idx = t.idx"
            " WHERE t.conversation_id=? ORDER BY t.idx",
            (conversation_id,),
        )
        return turn_views(rows, await self.resources(conversation_id))

    # -- resources -----------------------------------------------------------------------------

    def _abs(self, stored: str) -> Path:
        p = Path(stored)
        return p if p.is_absolute() else self.data_dir / p

    def _rel(self, path: Path) -> str:
        path = Path(path)
        try:
            return str(path.resolve().relative_to(self.data_dir.resolve()))
        except ValueError:
            return str(path.resolve())

    _RES_COLS = "id, kind, path, mime, size, origin, description, turn, name"

    def _resource(self, row: Any) -> Resource:
        rid, kind, path, mime, size, origin, description, turn, name = row
        return Resource(rid, kind, self._abs(path), mime, size, origin, description, turn, name)

    async def add_resource(
        self,
        conversation_id: str,
        turn: int,
        data: bytes,
        *,
        kind: Modality,
        mime: str,
        origin: str,
        description: str,
        name: str | None = None,
    ) -> Resource:
        """Write ``data`` through the media store and register it on ``turn``.

        The id is ``f"{kind}-{n}"`` with ``n`` counting that kind within the conversation from 1
        (``image-1``, ``audio-1``, ``image-2``); ids are never reused within a conversation.

        Args:
            conversation_id: the conversation.
            turn: the turn that brought or produced the file.
            data: the file's bytes.
            kind: ``"image" | "audio" | "video" | "text"``.
            mime: the sniffed MIME type.
            origin: ``"user"`` or ``"task:N"``.
            description: one line for prompts (newlines are flattened).
            name: the user's file name, if any.

        Returns:
            The new :class:`Resource` (absolute path, ``turn`` set).

        Raises:
            StorageError: disk full or unwritable while saving the file (nothing is recorded),
                unknown conversation, or the database is unusable.
        """
        if kind not in MODALITIES:
            raise ValueError(f"unknown resource kind {kind!r}")
        description = valid_utf8(" ".join(description.split()))
        name = valid_utf8(name) if name is not None else None
        async with self.database.lock:  # also keeps forget/prune from deleting a file between put and insert
            known = "SELECT 1 FROM conversations WHERE id=?"
            if not await self.database.read("saving a file", known, (conversation_id,)):
                raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
            try:
                path = await self.media.put(data, mime)
            except HuggingGPTError:
                raise
            except OSError as e:
                raise self.database.error(e, "saving a file") from None
            now = self._clock()
            async with self.database.tx("saving a file") as db:
                seq, n = await (
                    await db.execute(
                        "SELECT coalesce(max(CASE WHEN kind=? THEN seq END), 0) + 1, coalesce(max(n), 0) + 1"
                        " FROM resources WHERE conversation_id=?",
                        (kind, conversation_id),
                    )
                ).fetchone()
                res = Resource(f"{kind}-{seq}", kind, Path(path), mime, len(data), origin, description, turn, name)
                try:
                    await db.execute(
                        "INSERT INTO resources(conversation_id, n, id, kind, path, mime, size, origin, description,"
                        " turn, seq, name, tokens, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            conversation_id, n, res.id, kind, self._rel(res.path), mime, res.size, origin,
                            description, turn, seq, name, count_json_tokens(res.prompt_view()), now,
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise _gone("add_resource", f"conversation {conversation_id!r}", self.path) from None
        return Resource(res.id, kind, self._abs(self._rel(res.path)), mime, res.size, origin, description, turn, name)

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """A :class:`pipeline.types.ResourceSink` whose ``add`` calls :meth:`add_resource` on
        ``turn`` of ``conversation_id`` (hand it to task execution for generated files)."""
        return _TurnSink(self, conversation_id, turn)

    async def resources(self, conversation_id: str) -> list[Resource]:
        """All resources of ``conversation_id`` (never another's), oldest first."""
        rows = await self.database.read(
            "reading resources",
            f"SELECT {self._RES_COLS} FROM resources WHERE conversation_id=? ORDER BY n",
            (conversation_id,),
        )
        return [self._resource(r) for r in rows]

    async def context(self, conversation_id: str, budget_tokens: int) -> tuple[list[Turn], list[Resource]]:
        """Chat-log context for planning a new turn (paper §3.1).

        Args:
            conversation_id: the conversation.
            budget_tokens: token budget for the history (``settings.storage.context_tokens``),
                counted with :func:`bot.tokens.count_tokens` (a conservative offline estimate)
                over user text, condensed answer, the turn's resources' prompt views and
                :data:`TURN_OVERHEAD_TOKENS` per turn.

        Returns:
            ``(history, resources)``: finished turns (status ok/error/failed; running ones are
            left out), newest first, stopping at the first turn that no longer fits the budget;
            and every resource of the conversation, oldest first (the current turn's files too).
        """
        turn_rows = await self.database.read(
            "loading the chat log",
            "SELECT idx, user_text, summary, status, tokens FROM turns"
            " WHERE conversation_id=? AND status != 'running' ORDER BY idx DESC",
            (conversation_id,),
        )
        res_rows = await self.database.read(
            "loading the chat log",
            f"SELECT {self._RES_COLS}, tokens FROM resources WHERE conversation_id=? ORDER BY n",
            (conversation_id,),
        )
        with_tokens = [(self._resource(row[:-1]), row[-1]) for row in res_rows]
        return select_history(turn_rows, with_tokens, budget_tokens), [r for r, _ in with_tokens]

    # -- retention (rules in bot.store.retention) ---------------------------------------------

    async def forget(self, conversation_id: str) -> bool:
        """Delete ``conversation_id`` (turns, resource rows) and its media files that no other
        conversation uses.

        Returns:
            ``True`` if the conversation existed.

        Raises:
            StorageError: the database is unusable.
        """
        return await retention.forget(self.database, conversation_id, self._abs)

    async def media_bytes(self) -> int:
        """Bytes of the distinct media files referenced by any conversation."""
        return await retention.media_bytes(self.database)

    async def prune(self, *, max_age_days: float | None, max_media_bytes: int | None) -> PruneReport:
        """Apply retention (``[storage] max_age_days`` and ``max_media_bytes``).

        1. Conversations whose last activity is older than ``max_age_days`` days are deleted.
        2. While the referenced media exceed ``max_media_bytes`` bytes, the least recently
           active conversations are deleted, oldest first.

        Conversations with a running turn are kept. A media file is deleted only when no kept
        conversation refers to it. ``None`` disables a limit.

        Returns:
            A :class:`PruneReport`.

        Raises:
            StorageError: the database is unusable.
        """
        return await retention.prune(
            self.database, now=self._clock(), max_age_days=max_age_days, max_media_bytes=max_media_bytes,
            resolve=self._abs,
        )

