"""Alembic revisions of the conversation database, for SQLite and PostgreSQL alike (run by
:mod:`bot.store.sql.migrate`; there is no ``alembic.ini``)."""
