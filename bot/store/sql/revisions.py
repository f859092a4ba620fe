"""What a process checks at open without importing Alembic: the shipped revisions (as plain
constants; tests/test_store_upgrade.py checks them against the revision files), and the refusals
of databases this bot must not touch.
"""

from __future__ import annotations

REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011")
"""Every shipped revision, oldest first (bot/store/sql/alembic/versions)."""
HEAD = REVISIONS[-1]
"""The revision this bot writes."""
LEGACY_VERSION = 5
"""The last schema version earlier releases wrote as a numbered ``.sql`` file (``PRAGMA user_version``)."""
SQLITE_STATE = (
    "SELECT (SELECT user_version FROM pragma_user_version),"
    " (SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'),"
    " (SELECT count(*) FROM sqlite_master WHERE type='table' AND name='alembic_version')"
)
"""A SQLite file's legacy schema version, table count and whether Alembic versions it, in one
statement (one snapshot: a process creating the file at that moment is seen wholly or not at all)."""


class Refused(Exception):
    """The database must not be touched: ``Refused(why, detail)`` with ``why`` one of
    ``"newer"`` (a revision or schema version this bot does not know), ``"foreign"`` (another
    program's SQLite file) or ``"pending"`` (migrations due and not allowed)."""

    def sentence(self, name: str) -> str:
        """The sentence for the user naming the database ``name``."""
        why, detail = self.args
        if why == "foreign":
            return f"The file {name} is a SQLite database of another program, not a conversation database."
        if why == "pending":
            return (f"The conversation database {name} needs migrating to this version of the bot ({detail} pending);"
                    " run `hugginggpt db upgrade`.")
        return (f"The conversation database {name} was written by a newer version of the bot ({detail}, this one"
                f" knows revision {HEAD}); upgrade the bot.")


def check_sqlite(version: int, tables: int, versioned: bool) -> None:
    """Refuse a SQLite file (the row of :data:`SQLITE_STATE`) with tables but no version (another
    program's) or at a legacy schema version newer than :data:`LEGACY_VERSION`.

    Raises:
        Refused: as said.
    """
    if not versioned and version == 0 and tables:
        raise Refused("foreign", "")
    if not versioned and version > LEGACY_VERSION:
        raise Refused("newer", f"schema {version}")
