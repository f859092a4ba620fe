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
nothing to install) without touching the pipeline or the service.

Errors: every storage failure (corrupt or locked database file, full disk, unwritable directory)
raises :class:`pipeline.errors.StorageError` whose message names the file; nothing else escapes.
"""

from __future__ import annotations

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from pipeline.errors import HuggingGPTError
from pipeline.types import MODALITIES, Modality, Resource, ResourceSink, RunRecord, Turn

from ..errors import StorageError
from ..incoming import ConversationKey
from ..settings import StorageSettings
from ..tokens import count_json_tokens, count_tokens
from .protocol import MediaWriter, PruneReport

log = logging.getLogger(__name__)

DB_NAME = "conversations.sqlite3"
SCHEMA_VERSION = 2
SUMMARY_CHARS = 300
"""Answers enter the chat log condensed to about this many characters (``Turn.answer``)."""
TURN_OVERHEAD_TOKENS = 8
"""Tokens charged per turn in the chat log for its framing (role labels, separators)."""
INTERRUPTED = "interrupted"


# ----------------------------------------------------------------------------------------------
# Helpers


def clip_summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    """Whitespace-collapsed ``text`` cut at a word boundary to at most ``limit`` characters
    (``"…"`` appended when cut)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """``text`` with lone surrogates (undecodable input from some platforms) replaced by U+FFFD,
    so SQLite always receives valid UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def _resource_tokens(view: dict[str, Any]) -> int:
    return count_json_tokens(view)


# ----------------------------------------------------------------------------------------------
# Schema and forward migrations. ``PRAGMA user_version`` holds the version; each migration runs
# in its own transaction and is never edited once released: add a new one instead.

_V1 = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created REAL NOT NULL
);
CREATE TABLE turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    user_text TEXT NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx)
);
CREATE TABLE resources (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    origin TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    turn INTEGER,
    PRIMARY KEY (conversation_id, id)
);
"""


async def _migrate_1(db: aiosqlite.Connection) -> None:
    """v1: conversations, turns (text, answer, status), resources."""
    for statement in _V1.split(";"):
        if statement.strip():
            await db.execute(statement)


_V2_TABLES = """
CREATE TABLE turns_v2 (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    status TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    user_text TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    user TEXT,
    error TEXT,
    created REAL NOT NULL,
    finished REAL,
    PRIMARY KEY (conversation_id, idx)
) WITHOUT ROWID;
CREATE TABLE turn_records (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    record TEXT,
    PRIMARY KEY (conversation_id, idx)
);
CREATE TABLE resources_v2 (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    path TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    origin TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    turn INTEGER,
    name TEXT,
    tokens INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, n),
    UNIQUE (conversation_id, id)
) WITHOUT ROWID
"""


async def _migrate_2(db: aiosqlite.Connection) -> None:
    """v2: key fields and activity time on conversations; turns and resources clustered by
    conversation (``WITHOUT ROWID``, so one conversation's chat log sits on a few adjacent pages
    however threads interleave); condensed answers and token counts precomputed; run records and
    full answers moved to ``turn_records`` (large, read only for display); per-kind resource
    numbers and file names; indexes for retention, crash marking and media sharing checks."""
    for statement in (
        "ALTER TABLE conversations ADD COLUMN platform TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE conversations ADD COLUMN workspace TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE conversations ADD COLUMN channel TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE conversations ADD COLUMN thread TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE conversations ADD COLUMN updated REAL NOT NULL DEFAULT 0",
        *[t for t in _V2_TABLES.split(";") if t.strip()],
    ):
        await db.execute(statement)
    for cid, key, created in await db.execute_fetchall("SELECT id, key, created FROM conversations"):
        parts = (key.split(":", 3) + ["", "", "", ""])[:4]
        await db.execute(
            "UPDATE conversations SET platform=?, workspace=?, channel=?, thread=?,"
            " updated=max(?, coalesce((SELECT max(created) FROM turns WHERE conversation_id=?), 0))"
            " WHERE id=?",
            (*parts, created, cid, cid),
        )
    rows = await db.execute_fetchall("SELECT conversation_id, idx, user_text, answer, status, created FROM turns")
    await db.executemany(
        "INSERT INTO turns_v2(conversation_id, idx, status, tokens, user_text, summary, created, finished)"
        " VALUES (?,?,?,?,?,?,?,?)",
        [
            (c, i, st, count_tokens(u) + count_tokens(clip_summary(a)), u, clip_summary(a), cr,
             None if st == "running" else cr)
            for c, i, u, a, st, cr in rows
        ],
    )
    await db.executemany(
        "INSERT INTO turn_records(conversation_id, idx, answer) VALUES (?,?,?)", [(c, i, a) for c, i, _, a, _, _ in rows]
    )
    rows = await db.execute_fetchall(
        "SELECT r.conversation_id, r.id, r.kind, r.path, r.mime, r.size, r.origin, r.description, r.turn, c.created"
        " FROM resources r JOIN conversations c ON c.id = r.conversation_id ORDER BY r.conversation_id, r.rowid"
    )
    inserts, counters = [], {}
    for cid, rid, kind, path, mime, size, origin, description, turn, created in rows:
        counters[cid] = n = counters.get(cid, 0) + 1
        m = re.fullmatch(r".*?-(\d+)", rid)
        view = Resource(rid, kind, Path(), mime, size, origin, description, turn).prompt_view()
        inserts.append((cid, n, rid, kind, int(m.group(1)) if m else 0, path, mime, size, origin, description, turn,
                        _resource_tokens(view), created))
    await db.executemany(
        "INSERT INTO resources_v2(conversation_id, n, id, kind, seq, path, mime, size, origin, description, turn,"
        " tokens, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        inserts,
    )
    for statement in (
        "DROP TABLE turns",
        "ALTER TABLE turns_v2 RENAME TO turns",
        "DROP TABLE resources",
        "ALTER TABLE resources_v2 RENAME TO resources",
        "CREATE INDEX conversations_updated ON conversations(updated)",
        "CREATE INDEX turns_running ON turns(status) WHERE status = 'running'",
        "CREATE INDEX resources_path ON resources(path, size)",  # covering for media_bytes()
    ):
        await db.execute(statement)


MIGRATIONS: dict[int, Callable[[aiosqlite.Connection], Awaitable[None]]] = {1: _migrate_1, 2: _migrate_2}
"""Target version -> migration from the version before it."""


# ----------------------------------------------------------------------------------------------
# SQLite implementation


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
    slow media write never delays loading another conversation's context.

    Args:
        data_dir: the data directory (``settings.storage.data_dir``); created if missing.
        media: the media store (``pipeline.media.MediaStore``) or anything with its ``put``.
        busy_timeout: seconds to wait for a lock held by another process before
            :class:`StorageError`.
        clock: returns the current time in seconds since the epoch (tests move time with it).
    """

    def __init__(
        self,
        data_dir: Path,
        media: MediaWriter,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.path = self.data_dir / DB_NAME
        self.media = media
        self.busy_timeout = busy_timeout
        self._clock = clock
        self._db: aiosqlite.Connection | None = None
        self._rdb: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    # -- errors --------------------------------------------------------------------------------

    def _error(self, exc: BaseException, action: str) -> StorageError:
        """Map a driver/OS error to one sentence naming the database file."""
        text = str(exc)
        low = text.lower()
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "disk is full" in low:
            msg = f"The conversation store {self.path} cannot be written while {action}: the disk is full."
        elif "locked" in low or "busy" in low:
            msg = (
                f"The conversation database {self.path} is locked by another process"
                f" (waited {self.busy_timeout:g} s while {action})."
            )
        elif "not a database" in low or "malformed" in low or "corrupt" in low:
            msg = f"The conversation database {self.path} is corrupt or not a SQLite database."
        elif "unable to open" in low or isinstance(exc, PermissionError) or "readonly" in low:
            msg = f"The conversation database {self.path} cannot be opened or written (check the data directory)."
        else:
            msg = f"The conversation database {self.path} failed while {action}."
        log.error("storage error while %s on %s: %s: %s", action, self.path, type(exc).__name__, text)
        return StorageError(msg, f"{msg} ({type(exc).__name__}: {text})")

    def _conn(self) -> tuple[aiosqlite.Connection, aiosqlite.Connection]:
        if self._db is None or self._rdb is None:
            raise StorageError(f"The conversation database {self.path} is not open.")
        return self._db, self._rdb

    @asynccontextmanager
    async def _tx(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """A write transaction (caller holds ``self._lock``); rolled back on any error."""
        db, _ = self._conn()
        try:
            await db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise self._error(e, action) from None
        try:
            yield db
            await db.execute("COMMIT")
        except BaseException as e:
            try:
                await asyncio.shield(db.execute("ROLLBACK"))
            except sqlite3.Error:
                pass
            if isinstance(e, sqlite3.Error):
                raise self._error(e, action) from None
            raise

    async def _read(self, action: str, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        _, rdb = self._conn()
        try:
            return list(await rdb.execute_fetchall(sql, args))
        except sqlite3.Error as e:
            raise self._error(e, action) from None

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Create or open the database, switch it to WAL mode and apply pending migrations.

        Raises:
            StorageError: the directory cannot be created, the file is corrupt, not SQLite,
                locked by another process beyond ``busy_timeout``, or from a newer version.
        """
        if self._db is not None:
            return
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._error(e, "creating the data directory") from None
        db = rdb = None
        try:
            db = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            version = await self._check(db)
            (mode,) = await (await db.execute("PRAGMA journal_mode=WAL")).fetchone()
            if str(mode).lower() != "wal":
                log.warning("%s: journal mode is %s, not WAL", self.path, mode)
            await db.execute("PRAGMA synchronous=FULL")
            await db.execute("PRAGMA foreign_keys=ON")
            await self._migrate(db, version)
            rdb = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            await rdb.execute("PRAGMA query_only=ON")
            await rdb.execute_fetchall("SELECT count(*) FROM conversations")
        except BaseException as e:
            for c in (rdb, db):
                if c is not None:
                    try:
                        await c.close()
                    except Exception:  # noqa: BLE001 - already failing
                        pass
            if isinstance(e, sqlite3.Error):
                raise self._error(e, "opening") from None
            raise
        self._db, self._rdb = db, rdb

    async def _check(self, db: aiosqlite.Connection) -> int:
        """Return the file's schema version; refuse other programs' databases and newer schemas
        before anything is written to the file."""
        (version,) = await (await db.execute("PRAGMA user_version")).fetchone()
        if version == 0:
            (tables,) = await (
                await db.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
            ).fetchone()
            if tables:
                raise StorageError(
                    f"The file {self.path} is a SQLite database of another program, not a conversation database."
                )
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"The conversation database {self.path} was written by a newer version of the bot"
                f" (schema {version}, this one knows {SCHEMA_VERSION})."
            )
        return int(version)

    async def _migrate(self, db: aiosqlite.Connection, version: int) -> None:
        """Apply the migrations after ``version``, each in its own transaction."""
        for target in range(version + 1, SCHEMA_VERSION + 1):
            await db.execute("BEGIN IMMEDIATE")
            try:
                (current,) = await (await db.execute("PRAGMA user_version")).fetchone()
                if current >= target:  # another process migrated meanwhile
                    await db.execute("COMMIT")
                    continue
                await MIGRATIONS[target](db)
                await db.execute(f"PRAGMA user_version={target}")
                await db.execute("COMMIT")
            except BaseException:
                try:
                    await db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
            log.info("%s: migrated schema to version %d", self.path, target)

    async def close(self) -> None:
        """Close both connections (WAL is checkpointed by SQLite); safe to call twice."""
        db, rdb, self._db, self._rdb = self._db, self._rdb, None, None
        for c in (rdb, db):
            if c is not None:
                try:
                    await c.close()
                except sqlite3.Error as e:
                    log.warning("closing %s: %s", self.path, e)

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
        rows = await self._read("looking up a conversation", "SELECT id FROM conversations WHERE key=?", (skey,))
        if rows:
            return rows[0][0]
        async with self._lock:
            async with self._tx("creating a conversation") as db:
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
        rows = await self._read(
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
        user_text = _clean(user_text)
        user = _clean(user) if user is not None else None
        tokens = count_tokens(user_text)
        async with self._lock:
            async with self._tx("starting a turn") as db:
                cur = await db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conversation_id))
                if cur.rowcount != 1:
                    raise StorageError(
                        "This conversation no longer exists; start a new thread.",
                        f"begin_turn: unknown conversation {conversation_id!r} in {self.path}",
                    )
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
        doc = _clean(json.dumps(record.to_json(), ensure_ascii=False, default=str))
        summary = _clean(clip_summary(record.response or (record.error or "")))
        response, error = _clean(record.response), _clean(record.error) if record.error is not None else None
        now = self._clock()
        async with self._lock:
            async with self._tx("saving a turn") as db:
                row = await (
                    await db.execute(
                        "SELECT user_text FROM turns WHERE conversation_id=? AND idx=?", (conversation_id, turn)
                    )
                ).fetchone()
                if row is None:
                    raise StorageError(
                        "This conversation no longer exists; start a new thread.",
                        f"finish_turn: unknown turn {conversation_id!r}/{turn} in {self.path}",
                    )
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
        async with self._lock:
            async with self._tx("marking interrupted turns") as db:
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
        rows = await self._read(
            "reading turns",
            "SELECT t.idx, t.user, t.user_text, coalesce(r.answer, ''), t.summary, t.status, t.error, t.created,"
            " t.finished, r.record FROM turns t LEFT JOIN turn_records r"
            " ON r.conversation_id = t.conversation_id AND r.idx = t.idx"
            " WHERE t.conversation_id=? ORDER BY t.idx",
            (conversation_id,),
        )
        by_turn: dict[int | None, list[dict[str, Any]]] = {}
        for r in await self.resources(conversation_id):
            by_turn.setdefault(r.turn, []).append({**r.prompt_view(), "path": str(r.path), "mime": r.mime})
        return [
            {
                "index": idx, "user": user, "user_text": text, "answer": answer, "summary": summary,
                "status": status, "error": error, "started": started, "finished": finished,
                "record": json.loads(record) if record else None, "resources": by_turn.get(idx, []),
            }
            for idx, user, text, answer, summary, status, error, started, finished, record in rows
        ]

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
        description = _clean(" ".join(description.split()))
        name = _clean(name) if name is not None else None
        async with self._lock:  # also keeps forget/prune from deleting a file between put and insert
            if not await self._read("saving a file", "SELECT 1 FROM conversations WHERE id=?", (conversation_id,)):
                raise StorageError(
                    "This conversation no longer exists; start a new thread.",
                    f"add_resource: unknown conversation {conversation_id!r} in {self.path}",
                )
            try:
                path = await self.media.put(data, mime)
            except HuggingGPTError:
                raise
            except OSError as e:
                raise self._error(e, "saving a file") from None
            now = self._clock()
            async with self._tx("saving a file") as db:
                seq, n = await (
                    await db.execute(
                        "SELECT coalesce(max(CASE WHEN kind=? THEN seq END), 0) + 1, coalesce(max(n), 0) + 1"
                        " FROM resources WHERE conversation_id=?",
                        (kind, conversation_id),
                    )
                ).fetchone()
                res = Resource(
                    f"{kind}-{seq}", kind, Path(path), mime, len(data), origin, description, turn, name
                )
                try:
                    await db.execute(
                        "INSERT INTO resources(conversation_id, n, id, kind, path, mime, size, origin, description,"
                        " turn, seq, name, tokens, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            conversation_id, n, res.id, kind, self._rel(res.path), mime, res.size, origin,
                            description, turn, seq, name, _resource_tokens(res.prompt_view()), now,
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise StorageError(
                        "This conversation no longer exists; start a new thread.",
                        f"add_resource: unknown conversation {conversation_id!r} in {self.path}",
                    ) from None
        return Resource(res.id, kind, self._abs(self._rel(res.path)), mime, res.size, origin, description, turn, name)

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """A :class:`pipeline.types.ResourceSink` whose ``add`` calls :meth:`add_resource` on
        ``turn`` of ``conversation_id`` (hand it to task execution for generated files)."""
        return _TurnSink(self, conversation_id, turn)

    async def resources(self, conversation_id: str) -> list[Resource]:
        """All resources of ``conversation_id`` (never another's), oldest first."""
        rows = await self._read(
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
        turn_rows = await self._read(
            "loading the chat log",
            "SELECT idx, user_text, summary, status, tokens FROM turns"
            " WHERE conversation_id=? AND status != 'running' ORDER BY idx DESC",
            (conversation_id,),
        )
        res_rows = await self._read(
            "loading the chat log",
            f"SELECT {self._RES_COLS}, tokens FROM resources WHERE conversation_id=? ORDER BY n",
            (conversation_id,),
        )
        resources: list[Resource] = []
        by_turn: dict[int | None, list[Resource]] = {}
        cost_of_files: dict[int | None, int] = {}
        for row in res_rows:
            r = self._resource(row[:-1])
            resources.append(r)
            by_turn.setdefault(r.turn, []).append(r)
            cost_of_files[r.turn] = cost_of_files.get(r.turn, 0) + row[-1]
        history: list[Turn] = []
        used = 0
        for idx, user_text, summary, status, tokens in turn_rows:
            cost = tokens + cost_of_files.get(idx, 0) + TURN_OVERHEAD_TOKENS
            if used + cost > budget_tokens:
                break
            used += cost
            history.append(Turn(idx, user_text, summary, tuple(by_turn.get(idx, ())), status))
        return history, resources

    # -- retention -----------------------------------------------------------------------------

    async def _delete_conversations(self, ids: list[str]) -> tuple[int, int]:
        """Delete conversations and then their files no other resource refers to.
        Caller holds ``self._lock``. Returns (files deleted, bytes freed)."""
        if not ids:
            return 0, 0
        async with self._tx("deleting conversations") as db:
            marks = ",".join("?" * len(ids))
            paths = await db.execute_fetchall(
                f"SELECT path, max(size) FROM resources WHERE conversation_id IN ({marks}) GROUP BY path", ids
            )
            await db.execute(f"DELETE FROM conversations WHERE id IN ({marks})", ids)
            orphans = []
            for path, size in paths:
                row = await (await db.execute("SELECT 1 FROM resources WHERE path=? LIMIT 1", (path,))).fetchone()
                if row is None:
                    orphans.append((path, size))
        files = freed = 0
        for path, size in orphans:  # after commit: a crash here leaves only unreferenced files
            try:
                self._abs(path).unlink()
                files += 1
                freed += size
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not delete media file %s: %s", path, e)
        return files, freed

    async def forget(self, conversation_id: str) -> bool:
        """Delete ``conversation_id`` (turns, resource rows) and its media files that no other
        conversation uses.

        Returns:
            ``True`` if the conversation existed.

        Raises:
            StorageError: the database is unusable.
        """
        async with self._lock:
            rows = await self._read("forgetting a conversation", "SELECT 1 FROM conversations WHERE id=?",
                                    (conversation_id,))
            if not rows:
                return False
            await self._delete_conversations([conversation_id])
        return True

    async def media_bytes(self) -> int:
        """Bytes of the distinct media files referenced by any conversation."""
        rows = await self._read(
            "measuring media",
            "SELECT coalesce(sum(s), 0) FROM (SELECT max(size) AS s FROM resources GROUP BY path)",
        )
        return int(rows[0][0])

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
        doomed: list[str] = []
        async with self._lock:
            live = await self._read(
                "pruning",
                "SELECT id, updated, EXISTS(SELECT 1 FROM turns t WHERE t.conversation_id = c.id"
                " AND t.status='running') FROM conversations c ORDER BY updated, created",
            )
            candidates = [(cid, updated) for cid, updated, running in live if not running]
            if max_age_days is not None:
                cutoff = self._clock() - max_age_days * 86400.0
                doomed = [cid for cid, updated in candidates if updated < cutoff]
            if max_media_bytes is not None and await self.media_bytes() > max_media_bytes:
                files = await self._read("pruning", "SELECT conversation_id, path, size FROM resources")
                refs: dict[str, set[str]] = {}
                size_of: dict[str, int] = {}
                by_conv: dict[str, set[str]] = {}
                for cid, path, size in files:
                    refs.setdefault(path, set()).add(cid)
                    size_of[path] = max(size, size_of.get(path, 0))
                    by_conv.setdefault(cid, set()).add(path)
                gone = set(doomed)
                for cid in gone:
                    for p in by_conv.get(cid, ()):
                        refs[p].discard(cid)
                total = sum(size_of[p] for p, owners in refs.items() if owners)
                for cid, _ in candidates:
                    if total <= max_media_bytes:
                        break
                    if cid in gone:
                        continue
                    gone.add(cid)
                    doomed.append(cid)
                    for p in by_conv.get(cid, ()):
                        refs[p].discard(cid)
                        if not refs[p]:
                            total -= size_of[p]
            nfiles, freed = await self._delete_conversations(doomed)
        report = PruneReport(len(doomed), nfiles, freed, await self.media_bytes())
        if doomed:
            log.info("pruned %s: %s", self.path, report)
        return report


async def open_store(storage: StorageSettings, media: MediaWriter, *, busy_timeout: float = 5.0) -> SQLiteStore:
    """Open the default store for ``[storage]`` settings, ready to serve.

    Opens (creates/migrates) ``storage.data_dir / "conversations.sqlite3"``, marks turns left
    running by a crashed process as failed (:meth:`SQLiteStore.mark_interrupted`), then applies
    ``storage.max_age_days`` and ``storage.max_media_bytes`` (:meth:`SQLiteStore.prune`) if set.
    Call it once per process at start (``Service.create``); do not share one SQLite file between
    several serving processes (each would mark the other's running turns as interrupted).

    Args:
        storage: the ``[storage]`` settings.
        media: the media store rooted at the same data directory (``MediaStore(data_dir)``).
        busy_timeout: seconds to wait for a lock held by another process.

    Returns:
        The open :class:`SQLiteStore` (close it with :meth:`SQLiteStore.close`).

    Raises:
        StorageError: the database is corrupt, locked, from a newer version, or not writable.
    """
    store = SQLiteStore(storage.data_dir, media, busy_timeout=busy_timeout)
    await store.open()
    try:
        await store.mark_interrupted()
        if storage.max_age_days is not None or storage.max_media_bytes is not None:
            await store.prune(max_age_days=storage.max_age_days, max_media_bytes=storage.max_media_bytes)
    except BaseException:
        await store.close()
        raise
    return store
