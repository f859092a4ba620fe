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

Errors: every storage failure (corrupt or locked database file, full disk, unwritable directory,
media quota) raises :class:`bot.errors.StorageError` whose message names the file; nothing else
escapes.

Sharing: processes on one host may open one data directory at once; the rules are in
:mod:`bot.store.lease` (owners, leases), :mod:`bot.store.retention` and :mod:`bot.store.quota`.
Writers wait up to ``busy_timeout`` seconds for each other (short ``BEGIN IMMEDIATE`` transactions).
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
from . import lease, listing, retention
from .chatlog import TURN_OVERHEAD_TOKENS, TURNS_SQL, select_history, turn_views
from .database import Database
from .lease import INTERRUPTED, RECENT_SECONDS, Owner  # noqa: F401 - INTERRUPTED re-exported
from .migrations import SCHEMA_VERSION
from .quota import Ledger
from .sqlite_extras import SQLiteExtras
from .protocol import MediaWriter, PruneReport, TurnSink
from .text import SUMMARY_CHARS, clip_summary, valid_utf8

__all__ = ["DB_NAME", "SCHEMA_VERSION", "SUMMARY_CHARS", "SQLiteStore", "TURN_OVERHEAD_TOKENS"]

log = logging.getLogger(__name__)

DB_NAME = "conversations.sqlite3"


def _gone(where: str, what: str, path: Path) -> StorageError:
    """The error for a conversation (or turn) deleted while in use."""
    return StorageError("This conversation no longer exists; start a new thread.", f"{where}: unknown {what} in {path}")


class SQLiteStore(SQLiteExtras):
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
        max_media_bytes: ``[storage] max_media_bytes``, enforced on every write through
            ``media`` while open when it is a :class:`bot.store.media.MediaStore` (``None``: none).
        max_age_days: ``[storage] max_age_days`` (orders what the quota deletes first).

    Attributes:
        database: the :class:`Database` (its ``writer`` connection is for tests and tools).
    """

    def __init__(
        self, data_dir: Path, media: MediaWriter, *, busy_timeout: float = 5.0, clock: Callable[[], float] = time.time,
        max_media_bytes: int | None = None, max_age_days: float | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.path = self.data_dir / DB_NAME
        self.media = media
        self.busy_timeout = busy_timeout
        self._clock = clock
        self.database = Database(self.path, busy_timeout=busy_timeout)
        self.limits = (max_media_bytes, max_age_days)
        self.owner: Owner | None = None

    async def open(self) -> None:
        """Create the data directory if needed, then open the database: refuse foreign or newer
        files, switch to WAL mode, apply pending migrations (:mod:`bot.store.migrations`); then
        register this process as an owner with its heartbeat (:class:`bot.store.lease.Owner`)
        and, when ``media`` is a :class:`MediaStore`, become its ledger (:mod:`bot.store.quota`).

        Raises:
            StorageError: the directory cannot be created, the file is corrupt, not SQLite,
                locked by another process beyond ``busy_timeout``, or from a newer version.
        """
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self.database.error(e, "creating the data directory") from None
        await self.database.open()
        owner = Owner(self.database, self._clock)
        try:
            await owner.register()
        except BaseException:
            await self.database.close()
            raise
        self.owner = owner
        owner.on_marked = self._tell
        owner.on_beat = self.adopt_deliveries
        if hasattr(self.media, "ledger"):
            self.media.ledger = Ledger(  # type: ignore[attr-defined]
                self.database, owner.id, self._clock, self._rel, self._abs, max_media_bytes=self.limits[0],
                max_age_days=self.limits[1], where=self.data_dir / "media",
            )

    async def close(self) -> None:
        """Stop the heartbeat, mark this process's running turns interrupted, release its file
        pins and owner row, then close both connections (WAL is checkpointed); safe to call twice."""
        if getattr(getattr(self.media, "ledger", None), "db", None) is self.database:
            self.media.ledger = None  # type: ignore[attr-defined]
        owner, self.owner = self.owner, None
        if owner is not None:
            await owner.unregister()
        await self.database.close()

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- conversations -------------------------------------------------------------------------

    async def get_or_create(self, key: ConversationKey) -> str:
        """Return the conversation id (10 hex characters, stable) for ``key``; create it if new.
        Looking up a conversation idle for 5 minutes or more counts as using it (``updated``).

        Raises:
            StorageError: the database is unusable.
        """
        skey = key.as_string()
        sql = "SELECT id, updated FROM conversations WHERE key=?"
        rows = await self.database.read("looking up a conversation", sql, (skey,))
        if rows and rows[0][1] >= self._clock() - RECENT_SECONDS / 2:
            return rows[0][0]
        async with self.database.lock:  # an idle one is marked used: no process prunes it before its turn
            async with self.database.tx("looking up a conversation") as db:
                now = self._clock()
                sql = "UPDATE conversations SET updated=max(updated, ?) WHERE key=? RETURNING id"
                row = await (await db.execute(sql, (now, skey))).fetchone()
                if row:
                    return row[0]
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
        sql = "SELECT platform, workspace, channel, thread FROM conversations WHERE id=?"
        rows = await self.database.read("looking up a conversation", sql, (conversation_id,))
        return ConversationKey(*rows[0]) if rows else None

    # -- turns ---------------------------------------------------------------------------------

    async def begin_turn(self, conversation_id: str, user_text: str, user: str | None, delivery: str | None = None) -> int:
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
                    "INSERT INTO turns(conversation_id, idx, user_text, status, created, user, tokens, owner)"
                    " VALUES (?,?,?,?,?,?,?,?)",
                    (conversation_id, idx, user_text, "running", now, user, tokens, self._me()),
                )
                if delivery is not None:  # the delivery is answered by this turn (bot.store.protocol)
                    await db.execute("UPDATE deliveries SET payload=NULL WHERE key=?", (delivery,))
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
        """Mark the turns left ``"running"`` by a process that is gone (crashed, killed, or
        silent for longer than its lease, :mod:`bot.store.lease`) as ``"failed"`` with error
        ``"interrupted"``; turns of live processes, this one included, are left alone. The user's
        text and files are kept. Called at start (:func:`bot.store.open_store`) and by the
        heartbeat.

        Returns:
            The number of turns marked.

        Raises:
            StorageError: the database is unusable.
        """
        async with self.database.lock, self.database.tx("marking interrupted turns") as db:
            marked = await lease.mark_orphans(db, now=self._clock(), me=self._me())
        if marked:
            log.warning("%s: marked %d interrupted turn(s) as failed", self.path, len(marked))
            await self._tell(marked)
        return len(marked)

    async def turns(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every turn, oldest first, for display or resuming.

        Returns:
            ``[{"index", "user", "user_text", "answer" (full), "summary", "status" ("running" |
            "ok" | "error" | "failed"), "error", "started", "finished" (epoch seconds or None),
            "record" (the RunRecord JSON or None), "resources" ([prompt views with "path"])}]``.
        """
        rows = await self.database.read("reading turns", TURNS_SQL, (conversation_id,))
        return turn_views(rows, await self.resources(conversation_id))

    # -- resources -----------------------------------------------------------------------------

    def _abs(self, stored: str) -> Path:
        p = Path(stored)
        return p if p.is_absolute() else self.data_dir / p

    def _rel(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.data_dir.resolve()))
        except ValueError:
            return str(Path(path).resolve())

    _RES_COLS = "id, kind, path, mime, size, origin, description, turn, name"

    def _resource(self, row: Any) -> Resource:
        rid, kind, path, mime, size, origin, description, turn, name = row
        return Resource(rid, kind, self._abs(path), mime, size, origin, description, turn, name)

    async def add_resource(
        self, conversation_id: str, turn: int, data: bytes, *, kind: Modality, mime: str, origin: str,
        description: str, name: str | None = None,
    ) -> Resource:
        """Write ``data`` through the media store and register it on ``turn``.

        The id is ``f"{kind}-{n}"`` with ``n`` counting that kind within the conversation from 1
        (``image-1``, ``audio-1``, ``image-2``); ids are never reused within a conversation.

        Args:
            conversation_id, turn: the conversation, and the turn that brought or made the file.
            data: the file's bytes; kind: ``"image" | "audio" | "video" | "text"``; mime: the
                sniffed MIME type; origin: ``"user"`` or ``"task:N"``; description: one line
                for prompts (newlines flattened); name: the user's file name, if any.

        Returns:
            The new :class:`Resource` (absolute path, ``turn`` set).

        Raises:
            StorageError: disk full, unwritable or over the media quota while saving the file
                (nothing is recorded), unknown conversation, or the database is unusable.
        """
        if kind not in MODALITIES:
            raise ValueError(f"unknown resource kind {kind!r}")
        description = valid_utf8(" ".join(description.split()))
        name = valid_utf8(name) if name is not None else None
        known = "SELECT 1 FROM conversations WHERE id=?"
        if not await self.database.read("saving a file", known, (conversation_id,)):
            raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
        try:  # the file stays pinned by this process until its row is stored (bot.store.lease)
            path = await self.media.put(data, mime)
        except HuggingGPTError:
            raise
        except OSError as e:
            raise self.database.error(e, "saving a file") from None
        async with self.database.lock:
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
                await db.execute(  # recorded (also from writers without a ledger); referenced now: unpin
                    "INSERT INTO media(path, size, created, used) VALUES (?,?,?,?) ON CONFLICT(path) DO UPDATE"
                    " SET used=excluded.used, owner=CASE WHEN owner=? THEN NULL ELSE owner END",
                    (self._rel(res.path), res.size, now, now, self._me()),
                )
        return Resource(res.id, kind, self._abs(self._rel(res.path)), mime, res.size, origin, description, turn, name)

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """A :class:`pipeline.types.ResourceSink` whose ``add`` calls :meth:`add_resource` on
        ``turn`` of ``conversation_id`` (hand it to task execution for generated files)."""
        return TurnSink(self, conversation_id, turn)

    async def resources(self, conversation_id: str) -> list[Resource]:
        """All resources of ``conversation_id`` (never another's), oldest first."""
        sql = f"SELECT {self._RES_COLS} FROM resources WHERE conversation_id=? ORDER BY n"
        rows = await self.database.read("reading resources", sql, (conversation_id,))
        return [self._resource(r) for r in rows]

    async def files_of(self, platform: str, workspace: str, *, limit: int, order: listing.Order = "desc",
                       after: tuple[str, str] | None = None, origin: listing.Origin | None = None,
                       only: tuple[str, str] | None = None) -> list[listing.StoredFile]:
        """See :meth:`ConversationStore.files_of` (the query: :mod:`bot.store.listing`)."""
        sql, args = listing.sqlite_files_query(platform, workspace, limit=limit, order=order, after=after, origin=origin,
                                                only=only)
        rows = await self.database.read("listing files", sql, args)
        return [listing.StoredFile(r[0], self._resource(r[1:10]), r[10]) for r in rows]

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
        """Delete ``conversation_id`` (turns, resource rows) whatever its age, and its media files
        unless another conversation refers to them or a live process pins them.

        Returns:
            ``True`` if the conversation existed.

        Raises:
            StorageError: a live process is running a turn in it, or the database is unusable.
        """
        return await retention.forget(self.database, conversation_id, self._abs, now=self._clock(), me=self._me())

    async def media_bytes(self) -> int:
        """Bytes of the recorded media files, each counted once (what the quota measures)."""
        return await retention.media_bytes(self.database)

    async def prune(self, *, max_age_days: float | None, max_media_bytes: int | None) -> PruneReport:
        """Apply ``max_age_days`` (days) and ``max_media_bytes`` (bytes); ``None`` disables a
        limit. Running and recently active conversations, and files referenced, pinned or
        recently used, are kept (rules: :mod:`bot.store.retention`).

        Returns:
            A :class:`PruneReport`.

        Raises:
            StorageError: the database is unusable.
        """
        return await retention.prune(self.database, now=self._clock(), max_age_days=max_age_days,
                                     max_media_bytes=max_media_bytes, resolve=self._abs, me=self._me())

    def _me(self) -> str | None:
        return self.owner.id if self.owner is not None else None
