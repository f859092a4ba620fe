"""Expert servers registered in the store (table ``expert_servers``, revision 0011): what
``hugginggpt experts launch`` records once the server it started on Hugging Face Jobs answers, and
what every bot process sharing the store adds to ``[inference] experts_url`` without a restart
(:class:`pipeline.catalog.servers.ExpertServers` reads :func:`live` at most every
``[inference] experts_ttl`` seconds).

A record holds the server's base URL, the API key the bot sends it (a secret: it lives only in
this table, is never logged, and only the URL is ever shown), the job running it and when the
record expires: the launch's deadline, after which Hugging Face stops the job anyway. The launch
removes its record when it stops the job; if the launch dies, the record is ignored once expired
(one indexed read: ``expires > now``) and deleted at the next registration.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import bindparam, select

from pipeline.catalog.servers import RegisteredServer

from ...settings import StorageSettings
from .database import Database
from .dialect import insert
from .probes import DB_NAME
from .schema import expert_servers as E

MAX_REGISTERED = 32
"""Registered servers read at most (the newest first): a store holding more is not a reason to ask
more servers per run."""
LIVE = (select(E.c.url, E.c.api_key, E.c.expires).where(E.c.expires > bindparam("p_now"))
        .order_by(E.c.registered.desc()).limit(MAX_REGISTERED))
"""The live records, newest first (on the ``expires`` index)."""


async def register(database: Database, url: str, key: str, job: str, expires: float) -> None:
    """Record (or replace) the server at ``url``: its API key, the job running it and when the
    record expires (epoch seconds); records expired before now are deleted in the same transaction.

    Raises:
        StorageError: the database failed (one sentence naming it; never the key).
    """
    now = time.time()
    async with database.tx("registering an expert server") as conn:
        await conn.execute(E.delete().where(E.c.expires <= now))
        stmt = insert(conn, E).values(url=url, api_key=key, job=job, registered=now, expires=expires)
        await conn.execute(stmt.on_conflict_do_update(index_elements=[E.c.url], set_={
            "api_key": stmt.excluded.api_key, "job": stmt.excluded.job, "registered": stmt.excluded.registered,
            "expires": stmt.excluded.expires}))


async def unregister(database: Database, url: str, job: str) -> bool:
    """Remove the record of ``url`` made for ``job`` (a later launch's record of the same URL stays);
    ``True`` when there was one.

    Raises:
        StorageError: the database failed.
    """
    async with database.tx("removing a registered expert server") as conn:
        gone = await conn.execute(E.delete().where(E.c.url == url, E.c.job == job).returning(E.c.url))
        return gone.first() is not None


async def live(database: Database) -> list[RegisteredServer]:
    """The records not expired now, newest first, at most :data:`MAX_REGISTERED`.

    Raises:
        StorageError: the database failed.
    """
    rows = await database.read("reading the registered expert servers", LIVE, params={"p_now": time.time()})
    return [RegisteredServer(str(url), str(key), float(expires)) for url, key, expires in rows]


def database_of(storage: StorageSettings, *, busy_timeout: float = 5.0) -> Database:
    """The store's database for ``[storage]`` settings, not opened: ``database_url``'s PostgreSQL
    database, else the SQLite file ``data_dir / conversations.sqlite3``."""
    if storage.database_url is not None:
        return Database(url=storage.database_url.get_secret_value())
    return Database(path=Path(storage.data_dir).expanduser().resolve() / DB_NAME, busy_timeout=busy_timeout)


async def read_registered(storage: StorageSettings) -> list[RegisteredServer]:
    """The live records, for a command that keeps no store open (``catalog show``, ``doctor``):
    ``[]`` when there is no SQLite file yet (nothing was registered; none is created).

    Raises:
        StorageError: the database cannot be opened or read (also when it needs migrating:
            nothing is migrated here).
    """
    database = database_of(storage)
    if database.path is not None and not database.path.exists():
        return []
    await database.open(upgrade=False)
    try:
        return await live(database)
    finally:
        await database.close()
