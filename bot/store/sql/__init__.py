"""The conversation store on SQLAlchemy Core, for SQLite (the standard library's driver, on
threads) and PostgreSQL (asyncpg).

Modules: :mod:`.store` (:class:`~.store.SQLStore`), :mod:`.database` (the engines, the schema
check at open, errors as one sentence: :mod:`.errors`), :mod:`.threads` (SQLite's reads and
writes on threads), :mod:`.turns` (a turn's two transactions), :mod:`.dialect` (where the two
databases differ), :mod:`.schema` (the tables), :mod:`.migrate` (Alembic, the only schema source; imported
only when a migration is due), :mod:`.revisions` (the shipped revisions, without Alembic),
:mod:`.retention` (prune, forget, the media quota), :mod:`.upkeep` (owners, leases, claims,
shared limits).
"""
