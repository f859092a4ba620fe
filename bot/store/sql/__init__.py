"""The conversation store on SQLAlchemy Core, for SQLite (aiosqlite) and PostgreSQL (asyncpg).

Modules: :mod:`.store` (:class:`~.store.SQLStore`), :mod:`.database` (the engines, the schema
check at open, errors as one sentence: :mod:`.errors`), :mod:`.dialect` (where the two databases
differ), :mod:`.schema` (the tables), :mod:`.migrate` (Alembic, the only schema source; imported
only when a migration is due), :mod:`.revisions` (the shipped revisions, without Alembic),
:mod:`.retention` (prune, forget, the media quota), :mod:`.upkeep` (owners, leases, claims,
shared limits).
"""
