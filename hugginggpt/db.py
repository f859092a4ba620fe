"""``hugginggpt db upgrade``: apply the conversation database's pending migrations (Alembic
revisions, :mod:`bot.store.sql.migrate`, the only schema source) to ``[storage] database_url``
(PostgreSQL) or, without it, to the SQLite file in ``[storage] data_dir`` (a file of any earlier
release, schema version 1 on, is brought forward in place).

Bots apply pending migrations at start too (``[storage] auto_migrate``, on by default); with it
off, run this once per upgrade, before starting the new version. Safe while other processes run:
migrations are serialised by a lock in the database and each runs in one transaction.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from bot.settings import Settings



def add_parser(subparsers: Any) -> None:
    """Add ``db upgrade`` to the command line's subparsers."""
    db = subparsers.add_parser("db", help="conversation database schema")
    sub = db.add_subparsers(dest="db_command", required=True, metavar="{upgrade}")
    sub.add_parser("upgrade", help="apply pending migrations ([storage] database_url, or the SQLite file)")
    db.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """``db upgrade``: print which revisions were applied and the revision now current.

    Returns:
        0 once the database is at the newest revision.

    Raises:
        StorageError: the database URL is wrong, the server unreachable, the credentials refused,
            the database read-only or from a newer version (exit status 8; nothing written).
    """
    from bot.store.sql.database import DB_NAME, Database
    from bot.store.sql.revisions import HEAD

    storage = settings.storage
    if storage.database_url is not None:
        db = Database(url=storage.database_url.get_secret_value())
    else:
        db = Database(path=storage.data_dir.expanduser().resolve() / DB_NAME)
    applied = await db.open(upgrade=True)
    await db.close()
    where = db.name
    if applied:
        print(f"Migrated {where}: applied revision{'s' if len(applied) > 1 else ''} {', '.join(applied)};"
              f" now at {HEAD}.", file=out)
    else:
        print(f"{where} is up to date (revision {HEAD}).", file=out)
    return 0
