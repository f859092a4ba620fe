"""Forward migrations of the conversation database: numbered ``.sql`` files applied in order.

Each schema version is one file ``NNNN_name.sql`` in this package (shipped as package data, read
with :mod:`importlib.resources`): ``0001_*.sql`` creates version 1, ``0002_*.sql`` upgrades 1 to 2,
and so on; ``PRAGMA user_version`` holds the version of the file last applied. A version whose new
columns need values SQL cannot compute also has a Python post-step
(:data:`bot.store.migrations.backfill.POST_STEPS`) that runs right after its ``.sql`` file.

Each version is applied in its own transaction (``BEGIN IMMEDIATE``; the file's statements; the
post-step; ``PRAGMA user_version = N``; ``COMMIT``), so a failure or a crash leaves the database at
the previous version, and two processes opening the same file never migrate it twice. Released
files are never edited: add a new file instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import sqlite3
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import aiosqlite

from ...errors import StorageError
from .backfill import POST_STEPS, PostStep

log = logging.getLogger(__name__)

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    """One schema version.

    Attributes:
        version: the version this migration produces (1 for the file ``0001_*.sql``).
        name: the file name.
        sql: the file's text (statements separated by ``;``, ``--`` comments allowed).
        post: the Python post-step run after the statements, or ``None``.
    """

    version: int
    name: str
    sql: str
    post: PostStep | None = None

    def statements(self) -> list[str]:
        """The file's statements, in order, each complete (split where
        :func:`sqlite3.complete_statement` says a statement ends, so ``;`` inside strings,
        comments or trigger bodies does not split); comment-only pieces are dropped."""
        out: list[str] = []
        buf = ""
        for piece in self.sql.split(";"):
            buf += piece + ";"
            if sqlite3.complete_statement(buf):
                if _has_code(buf):
                    out.append(buf.strip())
                buf = ""
        if _has_code(buf[:-1]):
            raise ValueError(f"{self.name}: incomplete statement at the end: {buf[:-1].strip()[:60]!r}")
        return out


def _has_code(sql: str) -> bool:
    """Whether ``sql`` holds anything besides whitespace, ``--`` comments and ``;``."""
    lines = (line.split("--", 1)[0] for line in sql.splitlines())
    return any(line.strip(" \t;") for line in lines)


def load(
    root: Traversable | Path | None = None, post_steps: dict[int, PostStep] | None = None
) -> tuple[Migration, ...]:
    """Read the migrations of a directory.

    Args:
        root: the directory of ``NNNN_name.sql`` files (default: this package).
        post_steps: version -> post-step (default :data:`POST_STEPS`).

    Returns:
        The migrations ordered by version.

    Raises:
        ValueError: the versions are not exactly 1, 2, ... N (a gap or a duplicate number), or a
            post-step names a version without a file. These are programming errors.
    """
    root = resources.files(__name__) if root is None else root
    post_steps = POST_STEPS if post_steps is None else post_steps
    found: list[Migration] = []
    for entry in root.iterdir():
        m = _FILE.fullmatch(entry.name)
        if m and entry.is_file():
            version = int(m.group(1))
            found.append(Migration(version, entry.name, entry.read_text(encoding="utf-8"), post_steps.get(version)))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migration files must be numbered 1..N without gaps or duplicates, found {versions}")
    if set(post_steps) - set(versions):
        raise ValueError(f"post-steps for versions without a .sql file: {sorted(set(post_steps) - set(versions))}")
    return tuple(found)


MIGRATIONS = load()
"""The migrations shipped with this version of the bot, ordered by version."""
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this bot writes (``PRAGMA user_version`` after :func:`upgrade`)."""


async def check_version(db: aiosqlite.Connection, path: Path, latest: int = SCHEMA_VERSION) -> int:
    """Return the schema version of an open database; refuse files this bot must not touch.

    Reads only (run it before anything is written to the file).

    Args:
        db: a connection to the file.
        path: the file, for messages.
        latest: the newest version this bot knows.

    Returns:
        The version (``PRAGMA user_version``); 0 for a new, empty file.

    Raises:
        StorageError: the file has tables but no version (another program's database), or its
            version is newer than ``latest`` (written by a newer bot).
        sqlite3.Error: the file is not readable as SQLite (the caller maps it).
    """
    # one statement, so one snapshot: a process creating the file at this moment is seen either
    # not at all or with its version (two statements could see its tables but not yet its version)
    (version, tables) = await (await db.execute(
        "SELECT (SELECT user_version FROM pragma_user_version),"
        " (SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%')")).fetchone()
    if version == 0 and tables:
        raise StorageError(
            f"The file {path} is a SQLite database of another program, not a conversation database."
        )
    if version > latest:
        raise StorageError(
            f"The conversation database {path} was written by a newer version of the bot"
            f" (schema {version}, this one knows {latest})."
        )
    return int(version)


@asynccontextmanager
async def immediate(db: aiosqlite.Connection) -> AsyncIterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction on an autocommit connection: committed when the block
    ends (also by ``continue``/``return``), rolled back on any exception or cancellation."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        try:
            await db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
    await db.execute("COMMIT")


async def upgrade(
    db: aiosqlite.Connection, path: Path, current: int, migrations: tuple[Migration, ...] = MIGRATIONS
) -> int:
    """Apply the migrations after version ``current``, each in its own transaction.

    Args:
        db: a writer connection in autocommit mode (``isolation_level=None``); statements run one
            by one with ``execute`` (``executescript`` would commit in the middle).
        path: the file, for the log.
        current: the version :func:`check_version` returned.
        migrations: the migrations to apply from (default: the shipped ones).

    Returns:
        The version after upgrading (``migrations[-1].version``, or ``current`` if newer).

    Raises:
        sqlite3.Error: a statement failed (that version is rolled back; earlier ones stay).
        Exception: whatever a post-step raises (that version is rolled back).
    """
    for mig in migrations:
        if mig.version <= current:
            continue
        async with immediate(db):
            (now,) = await (await db.execute("PRAGMA user_version")).fetchone()
            if now >= mig.version:  # another process migrated meanwhile
                current = now
                continue
            for statement in mig.statements():
                await db.execute(statement)
            if mig.post is not None:
                await mig.post(db)
            await db.execute(f"PRAGMA user_version={mig.version:d}")
        current = mig.version
        log.info("%s: migrated schema to version %d (%s)", path, mig.version, mig.name)
    return current
