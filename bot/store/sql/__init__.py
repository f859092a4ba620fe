"""The conversation store on a database server (PostgreSQL), with SQLAlchemy Core and asyncpg;
and the Alembic migrations both stores share (:mod:`.migrate`).

Modules: :mod:`.schema` (the tables), :mod:`.database` (the engine, errors as one sentence),
:mod:`.migrate` (Alembic), :mod:`.postgres` (:class:`PostgresStore`), :mod:`.retention` (prune,
forget, the media quota), :mod:`.upkeep` (owners, leases, claims, shared limits).
"""
