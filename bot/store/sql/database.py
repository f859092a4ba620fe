"""A PostgreSQL database behind a SQLAlchemy async engine (asyncpg), with driver errors mapped to
one sentence naming the database (never its password).

Used by :class:`bot.store.sql.postgres.PostgresStore`; the schema comes from
:mod:`bot.store.sql.migrate` (Alembic).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ...errors import StorageError
from . import migrate

log = logging.getLogger(__name__)

POOL_TIMEOUT = 60.0
"""Seconds a query waits for a free pooled connection (under a burst, every connection of the
process may be in use for a while) before failing with one sentence."""

SCHEMES = {"postgresql", "postgres", "postgresql+asyncpg"}
"""URL schemes of ``[storage] database_url`` this store takes (``postgres://`` as Heroku writes it)."""


def parse_url(url: str) -> URL:
    """``[storage] database_url`` as a SQLAlchemy URL for the asyncpg driver.

    Raises:
        StorageError: not a URL, or not a PostgreSQL one (one sentence, password hidden).
    """
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise StorageError("[storage] database_url is not a database URL; write it as "
                           "postgresql://USER:PASSWORD@HOST:5432/DATABASE.") from None
    if parsed.drivername not in SCHEMES:
        shown = parsed.render_as_string(hide_password=True)
        raise StorageError(f"[storage] database_url {shown} is not a PostgreSQL URL; write it as "
                           "postgresql://USER:PASSWORD@HOST:5432/DATABASE (or leave it out to use SQLite).")
    if not parsed.database:
        raise StorageError("[storage] database_url names no database; write it as "
                           "postgresql://USER:PASSWORD@HOST:5432/DATABASE.")
    return parsed.set(drivername="postgresql+asyncpg")


def describe(url: URL) -> str:
    """The database as messages name it: ``postgresql://user@host:port/name`` (no password)."""
    return url.set(drivername="postgresql", password=None).render_as_string(hide_password=True)


class SQLDatabase:
    """The conversation database on a PostgreSQL server.

    Args:
        url: ``[storage] database_url`` (``postgresql://user:password@host:port/database``).
        connect_timeout: seconds to wait for a connection (also when the pool is exhausted).
        pool_size: connections kept open per process.

    Attributes:
        name: the database for messages (no password); engine: the SQLAlchemy engine once open.
    """

    def __init__(self, url: str, *, connect_timeout: float = 10.0, pool_size: int = 10) -> None:
        self.url = parse_url(url)
        self.name = describe(self.url)
        self.connect_timeout = connect_timeout
        self.pool_size = pool_size
        self.engine: AsyncEngine | None = None
        self.reader: AsyncEngine | None = None  # the engine in autocommit mode, for reads

    def error(self, exc: BaseException, action: str) -> StorageError:
        """Map a driver or connection error to one sentence naming the database, and log it.

        Args:
            exc: a ``sqlalchemy.exc.DBAPIError`` (the asyncpg error in ``.orig``), an ``OSError``
                or a timeout.
            action: what was being done, as a gerund phrase (``"saving a turn"``).
        """
        orig = getattr(exc, "orig", None) or exc
        cause = getattr(orig, "__cause__", None) or orig
        kind = type(cause).__name__
        sqlstate = str(getattr(cause, "sqlstate", "") or "")
        text = str(cause).replace(self.url.password or "\0", "***") if self.url.password else str(cause)
        where = self.name
        if kind == "InvalidPasswordError" or sqlstate == "28P01" or sqlstate == "28000":
            msg = f"The database {where} refused the user name or password in [storage] database_url."
        elif kind == "InvalidCatalogNameError" or sqlstate == "3D000":
            msg = f"The database {where} does not exist on its server; create it (createdb) or fix [storage] database_url."
        elif sqlstate == "25006" or kind == "ReadOnlySQLTransactionError":
            msg = f"The database {where} is read-only (a standby, or a read-only user); point [storage] database_url at the primary."
        elif sqlstate == "42501":
            msg = f"The database user in [storage] database_url may not write to {where}; grant it the tables' privileges."
        elif sqlstate in {"53100"}:
            msg = f"The database server of {where} is out of disk space while {action}."
        elif isinstance(orig, sa_exc.TimeoutError):  # the pool: every connection of this process busy
            msg = (f"The database {where} is too busy: no connection of this process came free within"
                   f" {POOL_TIMEOUT:g} s while {action}.")
        elif sqlstate in {"53300", "57P03"} or "too many clients" in text:
            msg = f"The database server of {where} accepts no more connections right now (while {action})."
        elif sqlstate == "42P01":
            msg = f"The database {where} has no conversation tables; run `hugginggpt db upgrade` first."
        elif isinstance(cause, (OSError, socket.gaierror, asyncio.TimeoutError, TimeoutError)) or kind in {
            "ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError",
            "InterfaceError", "PostgresConnectionError",
        }:
            msg = f"The database {where} cannot be reached while {action}; check that it runs and that the address in [storage] database_url is right."
        else:
            msg = f"The database {where} failed while {action}."
        log.error("storage error while %s on %s: %s: %s", action, where, kind, text)
        return StorageError(msg, f"{msg} ({kind}: {text})")

    def _engine(self) -> AsyncEngine:
        if self.engine is None:
            raise StorageError(f"The conversation database {self.name} is not open.")
        return self.engine

    @asynccontextmanager
    async def tx(self, action: str) -> AsyncIterator[AsyncConnection]:
        """A transaction (committed on exit, rolled back on any error or cancellation).

        Raises:
            StorageError: the database failed (mapped by :meth:`error`).
        """
        engine = self._engine()
        try:
            async with engine.begin() as conn:
                yield conn
        except (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError, asyncio.TimeoutError) as e:
            raise self.error(e, action) from None

    async def read(self, action: str, *stmts: Any, params: dict[str, Any] | None = None) -> Any:
        """All rows of each query, on one pooled connection in autocommit mode (no transaction: each
        query sees the data committed when it starts).

        A connection the server dropped (a restart, a failover) is noticed by the driver and
        invalidated by SQLAlchemy; the queries are then tried once more on a fresh connection.
        (This replaces ``pool_pre_ping``, whose extra round trip per checkout tripled the time of
        a chat-log load.)

        Args:
            action: what is being done, for the error sentence; stmts: the queries; params:
                values of their ``bindparam`` placeholders (prebuilt statements are compiled once).

        Returns:
            The rows of the one query, or a list of row lists for several.

        Raises:
            StorageError: the database failed (mapped by :meth:`error`).
        """
        self._engine()
        engine = self.reader  # autocommit: no BEGIN/ROLLBACK round trips
        for attempt in (1, 2):
            try:
                async with engine.connect() as conn:
                    out = [list((await conn.execute(stmt, params)).all()) for stmt in stmts]
                    return out[0] if len(out) == 1 else out
            except sa_exc.DBAPIError as e:
                if attempt == 1 and e.connection_invalidated:
                    log.warning("%s: connection lost (%s); retrying on a new one", self.name, type(e.orig).__name__)
                    continue
                raise self.error(e, action) from None
            except (sa_exc.TimeoutError, OSError, asyncio.TimeoutError) as e:
                raise self.error(e, action) from None
        raise AssertionError("unreachable")

    async def open(self, *, upgrade: bool = True) -> list[str]:
        """Connect, refuse a newer schema, and apply pending migrations (``upgrade``) or refuse
        a database that needs them; idempotent.

        Returns:
            The revisions applied (``[]`` when already current).

        Raises:
            StorageError: unreachable, wrong credentials, missing database, read-only, from a
                newer version of the bot, or behind with ``upgrade=False`` (nothing is written).
        """
        if self.engine is not None:
            return []
        engine = create_async_engine(
            self.url, pool_size=self.pool_size, max_overflow=self.pool_size * 2, pool_timeout=POOL_TIMEOUT,
            pool_pre_ping=False, connect_args={"timeout": self.connect_timeout, "server_settings": {"application_name": "hugginggpt"}},
        )
        try:
            async with engine.begin() as conn:
                todo = await conn.run_sync(migrate.pending)
                if todo and not upgrade:
                    raise StorageError(
                        f"The database {self.name} needs migrating to this version of the bot"
                        f" ({', '.join(todo)} pending); run `hugginggpt db upgrade`."
                    )
                applied = await conn.run_sync(migrate.upgrade) if todo else []
        except migrate.NewerSchema as e:
            await engine.dispose()
            raise StorageError(
                f"The database {self.name} was written by a newer version of the bot (revision {e.args[0]},"
                f" this one knows {migrate.HEAD}); upgrade the bot."
            ) from None
        except (sa_exc.DBAPIError, OSError, asyncio.TimeoutError) as e:
            await engine.dispose()
            raise self.error(e, "opening") from None
        except BaseException:
            await engine.dispose()
            raise
        for rev in applied:
            log.info("%s: migrated to revision %s", self.name, rev)
        self.engine = engine
        self.reader = engine.execution_options(isolation_level="AUTOCOMMIT")
        return applied

    async def close(self) -> None:
        """Close every pooled connection; safe to call twice."""
        engine, self.engine, self.reader = self.engine, None, None
        if engine is not None:
            await engine.dispose()
