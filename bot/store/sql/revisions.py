"""The Alembic revisions this version of the bot ships, as plain constants, so a process whose
database is already current never imports Alembic or SQLAlchemy (about 0.7 s of start-up for
``hugginggpt run`` on SQLite). tests/test_store_scale.py checks them against the revision files.
"""

REVISIONS = ("0005", "0006", "0007")
"""Every shipped revision, oldest first (bot/store/sql/alembic/versions)."""
HEAD = REVISIONS[-1]
"""The revision this bot writes."""
