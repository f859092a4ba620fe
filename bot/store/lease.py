"""Who is running what: process owners with a heartbeat lease, so several processes can share one
store (a SQLite data directory, or a PostgreSQL database). The rules, as pure functions; the
statements that apply them: :mod:`bot.store.sql.upkeep`.

Rules (docs/operations.md, "Sharing a data dir", is written from these):

* Every open store (:class:`bot.store.sql.store.SQLStore`) is an *owner*: ``host/pid/random`` (the host
  name, plus the PID namespace on Linux; the process id; 8 random hex digits), registered in the
  ``owners`` table when the store opens and removed when it closes.
* While the store is open, a background task renews the owner's lease every
  :data:`HEARTBEAT_SECONDS` (5 s, a sixth of the lease). An owner is *live* while its last heartbeat is younger than
  :data:`LEASE_SECONDS` (30 s). On the same host (same host name and PID namespace) an owner whose
  process no longer exists is gone at once, without waiting for its lease (after ``kill -9`` the
  next start recovers immediately); an owner on another host, or whose process id was reused, is
  gone when its lease expires.
* A running turn belongs to the owner that began it. Only running turns whose owner is gone are
  marked ``"failed"`` / ``"interrupted"`` (:func:`bot.store.sql.upkeep.mark_orphans`), by the next process that opens the
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

import logging
import os
import secrets
import socket
from collections.abc import Iterable

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
