"""Who is running what: process owners with a heartbeat lease, so several processes can share one
data directory (issue 14).

Rules (the README's "Sharing a data directory" paragraph is written from these):

* Every open :class:`bot.store.sqlite.SQLiteStore` is an *owner*: ``host/pid/random`` (the host
  name, plus the PID namespace on Linux; the process id; 8 random hex digits), registered in the
  ``owners`` table when the store opens and removed when it closes.
* While the store is open, a background task renews the owner's lease every
  :data:`HEARTBEAT_SECONDS` (5 s, a sixth of the lease). An owner is *live* while its last heartbeat is younger than
  :data:`LEASE_SECONDS` (30 s). On the same host (same host name and PID namespace) an owner whose
  process no longer exists is gone at once, without waiting for its lease (after ``kill -9`` the
  next start recovers immediately); an owner on another host, or whose process id was reused, is
  gone when its lease expires.
* A running turn belongs to the owner that began it. Only running turns whose owner is gone are
  marked ``"failed"`` / ``"interrupted"`` (:func:`mark_orphans`), by the next process that opens the
  store and by every open store's heartbeat; the user's text and files are kept.
* A media file written by an owner is *pinned* until its resource row is stored (conversation
  files) or its owner closes (files of ``hugginggpt run``): pruning, the media quota and
  ``forget`` never delete a pinned file of a live owner.
* Automatic deletion (``prune``, the quota) also spares anything used within
  :data:`RECENT_SECONDS` (10 minutes): conversations active that recently (a turn began or ended,
  or the conversation was looked up after 5 idle minutes) and files written or reused that
  recently. ``forget`` refuses a conversation while a live owner runs a turn in it. See
  :mod:`bot.store.retention`.
* Not allowed: sharing a directory between hosts over a network file system without working
  POSIX locks (SQLite's requirement; NFS often lacks them) or with unsynchronised clocks; running
  versions of the bot older than schema version 3 next to newer ones (the newer one migrates the
  file and the older one then refuses it, or its turns, having no owner, count as orphans).

Clocks: times are wall-clock seconds since the epoch (``time.time``), compared between processes.
Writers wait for each other up to ``busy_timeout`` (5 s) per transaction; every transaction is
short, so a handful of processes on one host never see "database is locked" under normal load.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable

import aiosqlite

from ..errors import StorageError
from .database import Database

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
"""An owner whose last heartbeat is older than this is gone (its running turns are orphans)."""
HEARTBEAT_SECONDS = 5.0
"""How often an open store renews its lease and looks for gone owners (a sixth of
:data:`LEASE_SECONDS`: a dead process's turns are marked at most a sixth of the lease after its
lease expires)."""


def configure(lease_seconds: float) -> None:
    """Set this process's lease (``[storage] lease_seconds``; every process sharing a store must
    use the same): an owner silent for longer is gone, and the heartbeat runs every sixth of it."""
    global LEASE_SECONDS, HEARTBEAT_SECONDS
    LEASE_SECONDS, HEARTBEAT_SECONDS = float(lease_seconds), float(lease_seconds) / 6
RECENT_SECONDS = 600.0
"""Conversations and files used within this many seconds are never deleted automatically."""
INTERRUPTED = "interrupted"
"""Error recorded on turns whose owner is gone."""


def host_identity() -> str:
    """This host as owners name it: the host name, plus the PID namespace on Linux (two
    containers with one host name do not see each other's processes)."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}{'|' + ns if ns else ''}"


HOST = host_identity()
"""This process's host identity (computed once; tests of other hosts replace it)."""


def new_owner_id() -> str:
    """A fresh owner id ``"<host>/<pid>/<8 hex digits>"``."""
    return f"{HOST}/{os.getpid()}/{secrets.token_hex(4)}"


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (a zombie counts as existing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, under another user
        return True
    return True


def live_owners(rows: Iterable[tuple[str, str, int, float]], *, now: float, me: str | None) -> set[str]:
    """Which owners are live.

    Args:
        rows: ``(id, host, pid, heartbeat)`` of every registered owner.
        now: the current time, epoch seconds.
        me: this process's owner id (always live), or ``None``.

    Returns:
        Ids whose heartbeat is younger than :data:`LEASE_SECONDS`, minus those on this host
        (same :data:`HOST`) whose process is gone.
    """
    live = set()
    for oid, host, pid, beat in rows:
        if oid == me:
            live.add(oid)
        elif beat >= now - LEASE_SECONDS and not (host == HOST and not pid_alive(int(pid))):
            live.add(oid)
    return live


async def sweep(conn: aiosqlite.Connection, *, now: float, me: str | None) -> set[str]:
    """Remove the rows of owners that are gone (inside the caller's write transaction), so
    ``owner IN (SELECT id FROM owners)`` means "live" for the rest of the transaction.

    Returns:
        The live owner ids.
    """
    rows = await conn.execute_fetchall("SELECT id, host, pid, heartbeat FROM owners")
    live = live_owners(rows, now=now, me=me)
    gone = [(r[0],) for r in rows if r[0] not in live]
    if gone:
        await conn.executemany("DELETE FROM owners WHERE id=?", gone)
    return live


async def mark_orphans(conn: aiosqlite.Connection, *, now: float, me: str | None) -> list[tuple[str, int]]:
    """Mark running turns whose owner is gone (or unknown: turns from before schema version 3)
    as ``"failed"`` with error :data:`INTERRUPTED`; inside the caller's write transaction.

    Returns:
        ``(conversation id, turn index)`` of each turn marked.
    """
    await sweep(conn, now=now, me=me)
    rows = await conn.execute_fetchall(
        "UPDATE turns SET status='failed', error=?, finished=? WHERE status='running'"
        " AND (owner IS NULL OR owner NOT IN (SELECT id FROM owners)) RETURNING conversation_id, idx",
        (INTERRUPTED, now),
    )
    await conn.execute("DELETE FROM run_slots WHERE owner NOT IN (SELECT id FROM owners)")
    return [(r[0], int(r[1])) for r in rows]


class Owner:
    """This process's registration in one database, and its heartbeat task.

    Args:
        database: the open database.
        clock: current time, epoch seconds.

    Attributes:
        id: the owner id (:func:`new_owner_id`).
    """

    def __init__(self, database: Database, clock: Callable[[], float]) -> None:
        self.database = database
        self.clock = clock
        self.host = HOST
        self.id = new_owner_id()
        self._task: asyncio.Task[None] | None = None
        self.on_marked: Callable[[list[tuple[str, int]]], Awaitable[None]] | None = None
        self.on_beat: Callable[[], Awaitable[object]] | None = None  # after each heartbeat's sweep

    async def register(self) -> None:
        """Insert the owner row and start the heartbeat task.

        Raises:
            StorageError: the database is unusable.
        """
        await self.beat(orphans=False)
        self._task = asyncio.create_task(self._run(), name=f"store heartbeat {self.id}")

    async def beat(self, *, orphans: bool = True) -> list[tuple[str, int]]:
        """Renew the lease (re-registering if another process judged this one gone) and, with
        ``orphans``, mark the running turns of gone owners (:func:`mark_orphans`) and tell
        :attr:`on_marked` about them.

        Returns:
            The orphaned turns marked, ``(conversation id, turn index)``.

        Raises:
            StorageError: the database is unusable.
        """
        now = self.clock()
        async with self.database.lock:
            async with self.database.tx("renewing the process lease") as conn:
                await conn.execute(
                    "INSERT INTO owners(id, host, pid, started, heartbeat) VALUES (?,?,?,?,?)"
                    " ON CONFLICT(id) DO UPDATE SET heartbeat=excluded.heartbeat",
                    (self.id, self.host, os.getpid(), now, now),
                )
                marked = await mark_orphans(conn, now=now, me=self.id) if orphans else []
        if marked:
            log.warning("%s: marked %d turn(s) of gone processes as interrupted", self.database.path, len(marked))
            if self.on_marked is not None:
                await self.on_marked(marked)
        if orphans and self.on_beat is not None:
            await self.on_beat()
        return marked

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self.beat()
            except StorageError as e:  # logged by Database.error; try again at the next beat
                log.warning("heartbeat of %s failed: %s", self.id, e)

    async def unregister(self) -> None:
        """Stop the heartbeat; mark this owner's running turns interrupted, release its pins on
        media files and remove its row (best effort: failures are logged)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled on purpose
                pass
        try:
            async with self.database.lock:
                async with self.database.tx("closing the store") as conn:
                    await conn.execute(
                        "UPDATE turns SET status='failed', error=?, finished=? WHERE status='running' AND owner=?",
                        (INTERRUPTED, self.clock(), self.id),
                    )
                    await conn.execute("UPDATE media SET owner=NULL WHERE owner=?", (self.id,))
                    await conn.execute("DELETE FROM run_slots WHERE owner=?", (self.id,))
                    await conn.execute("DELETE FROM owners WHERE id=?", (self.id,))
        except StorageError as e:
            log.warning("could not release owner %s: %s", self.id, e)
