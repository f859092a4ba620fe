"""Driver errors of both databases as one sentence for the user naming the database (the SQLite
file, or the PostgreSQL URL without its password); used by :meth:`bot.store.sql.database.Database.error`."""

from __future__ import annotations

import asyncio
import errno
import shutil
import socket
from pathlib import Path
from typing import Any

from sqlalchemy import exc as sa_exc

POOL_TIMEOUT = 60.0
"""Seconds a query waits for a free pooled connection (under a burst, every connection of the
process may be in use for a while) before failing with one sentence."""

_UNREACHABLE = {"ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError", "InterfaceError",
                "PostgresConnectionError"}


def message(db: Any, orig: BaseException, cause: BaseException, detail: str, action: str) -> str:
    """The sentence for an error of ``db`` (a :class:`~bot.store.sql.database.Database`):
    :func:`sqlite_message` or :func:`postgres_message`."""
    if isinstance(orig, sa_exc.TimeoutError):  # the pool: every connection of this process busy
        return (f"The database {db.name} is too busy: no connection of this process came free within"
                f" {POOL_TIMEOUT:g} s while {action}.")
    if db.dialect == "sqlite":
        return sqlite_message(db.name, db.busy_timeout, cause, detail, action)
    return postgres_message(db.name, cause, detail, action)


def sqlite_message(where: str, busy_timeout: float, cause: BaseException, detail: str, action: str) -> str:
    """The sentence for a ``sqlite3.Error`` or ``OSError`` on the file ``where``: disk full,
    locked, corrupt, not writable, or failed while ``action``."""
    low = detail.lower()
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC or "disk is full" in low or (
            "disk i/o error" in low and _no_room(where)):
        return f"The conversation store {where} cannot be written while {action}: the disk is full."
    if "locked" in low or "busy" in low:
        return (f"The conversation database {where} is locked by another process"
                f" (waited {busy_timeout:g} s while {action}).")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"The conversation database {where} is corrupt or not a SQLite database."
    if "unable to open" in low or isinstance(cause, PermissionError) or "readonly" in low:
        return f"The conversation database {where} cannot be opened or written (check the data directory)."
    return f"The conversation database {where} failed while {action}."


FULL_BELOW = 1 << 20
"""Bytes free under which a SQLite "disk I/O error" is taken for a full disk: SQLite reports a
write-ahead log or shared-memory file it cannot grow that way, not as "database or disk is full"."""


def _no_room(where: str) -> bool:
    """Whether the file system of the SQLite file ``where`` has less than :data:`FULL_BELOW` free."""
    try:
        return shutil.disk_usage(Path(where).parent).free < FULL_BELOW
    except OSError:
        return False


def postgres_message(where: str, cause: BaseException, detail: str, action: str) -> str:
    """The sentence for an asyncpg or connection error on the database ``where`` (by SQLSTATE)."""
    kind = type(cause).__name__
    state = str(getattr(cause, "sqlstate", "") or "")
    if kind == "InvalidPasswordError" or state in {"28P01", "28000"}:
        return f"The database {where} refused the user name or password in [storage] database_url."
    if kind == "InvalidCatalogNameError" or state == "3D000":
        return f"The database {where} does not exist on its server; create it (createdb) or fix [storage] database_url."
    if state == "25006" or kind == "ReadOnlySQLTransactionError":
        return f"The database {where} is read-only (a standby, or a read-only user); point [storage] database_url at the primary."
    if state == "42501":
        return f"The database user in [storage] database_url may not write to {where}; grant it the tables' privileges."
    if state == "53100":
        return f"The database server of {where} is out of disk space while {action}."
    if state in {"53300", "57P03"} or "too many clients" in detail:
        return f"The database server of {where} accepts no more connections right now (while {action})."
    if state == "42P01":
        return f"The database {where} has no conversation tables; run `hugginggpt db upgrade` first."
    if isinstance(cause, (OSError, socket.gaierror, asyncio.TimeoutError, TimeoutError)) or kind in _UNREACHABLE:
        return (f"The database {where} cannot be reached while {action}; check that it runs and that the address in"
                " [storage] database_url is right.")
    return f"The database {where} failed while {action}."
