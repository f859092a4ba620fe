"""The conversation database's tables as SQLAlchemy Core objects: the queries of
:class:`bot.store.sql.store.SQLStore` are built from them, on both databases.

They describe the schema the migrations produce (Alembic revision ``head``, see
:mod:`bot.store.sql.migrate`); they never create it. Columns are those of the SQLite schema
(Alembic revisions 0001-0011, :mod:`bot.store.sql.migrate`), with times as epoch seconds
(double precision) on both databases.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger, CheckConstraint, Column, Float, ForeignKey, Index, Integer, MetaData, PrimaryKeyConstraint, Table, Text,
    UniqueConstraint,
)

metadata = MetaData()


def _conv() -> Column:
    return Column("conversation_id", Text, ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)


conversations = Table(
    "conversations", metadata,
    Column("id", Text, primary_key=True),
    Column("key", Text, nullable=False, unique=True),
    Column("created", Float, nullable=False),
    Column("platform", Text, nullable=False, server_default=""),
    Column("workspace", Text, nullable=False, server_default=""),
    Column("channel", Text, nullable=False, server_default=""),
    Column("thread", Text, nullable=False, server_default=""),
    Column("updated", Float, nullable=False, server_default="0"),
)

turns = Table(
    "turns", metadata,
    _conv(),
    Column("idx", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("tokens", Integer, nullable=False, server_default="0"),
    Column("user_text", Text, nullable=False),
    Column("summary", Text, nullable=False, server_default=""),
    Column("user", Text),
    Column("error", Text),
    Column("created", Float, nullable=False),
    Column("finished", Float),
    Column("owner", Text),
    PrimaryKeyConstraint("conversation_id", "idx"),
)

turn_records = Table(
    "turn_records", metadata,
    _conv(),
    Column("idx", Integer, nullable=False),
    Column("answer", Text, nullable=False, server_default=""),
    Column("record", Text),
    PrimaryKeyConstraint("conversation_id", "idx"),
)

resources = Table(
    "resources", metadata,
    _conv(),
    Column("n", Integer, nullable=False),
    Column("id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("path", Text, nullable=False),
    Column("mime", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("origin", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("turn", Integer),
    Column("name", Text),
    Column("tokens", Integer, nullable=False, server_default="0"),
    Column("created", Float, nullable=False),
    PrimaryKeyConstraint("conversation_id", "n"),
    UniqueConstraint("conversation_id", "id"),
)

owners = Table(
    "owners", metadata,
    Column("id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started", Float, nullable=False),
    Column("heartbeat", Float, nullable=False),
)

media = Table(
    "media", metadata,
    Column("path", Text, primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("created", Float, nullable=False),
    Column("used", Float, nullable=False),
    Column("owner", Text),
)

feedback = Table(
    "feedback", metadata,
    _conv(),
    Column("idx", Integer, nullable=False),
    Column("user", Text, nullable=False),
    Column("verdict", Text, CheckConstraint("verdict IN ('good', 'bad')"), nullable=False),
    Column("at", Float, nullable=False),
    PrimaryKeyConstraint("conversation_id", "idx", "user"),
)

deliveries = Table(
    "deliveries", metadata,
    Column("key", Text, primary_key=True),
    Column("at", Float, nullable=False),
    Column("owner", Text),
    Column("payload", Text),
)
"""Platform deliveries taken (revision 0007: by which owner, and the event while its turn has not
begun)."""

rate_limits = Table(
    "rate_limits", metadata,
    Column("key", Text, primary_key=True),
    Column("tat", Float, nullable=False),
)
"""Shared rate limits (revision 0006): per key, the theoretical arrival time of the next request
(GCRA, the generic cell rate algorithm: ITU-T I.371)."""

run_slots = Table(
    "run_slots", metadata,
    Column("id", Text, primary_key=True),
    Column("key", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("at", Float, nullable=False),
)
"""Shared per-user concurrency (revision 0006): one row per run in flight; rows of gone owners do
not count."""

pending_plans = Table(
    "pending_plans", metadata,
    Column("id", Text, primary_key=True),
    Column("requester", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("created", Float, nullable=False),
    Column("expires", Float, nullable=False),
)
"""Plans waiting for approval (revision 0008): who asked, the plan and request as JSON
(:mod:`bot.approval`), and when it expires (epoch seconds)."""

spend = Table(
    "spend", metadata,
    Column("id", Text, primary_key=True),
    Column("at", Float, nullable=False),
    Column("platform", Text, nullable=False),
    Column("user", Text),
    Column("channel", Text),
    Column("team", Text),
    Column("conversation_id", Text),
    Column("turn", Integer),
    Column("reserved_usd", Float, nullable=False),
    Column("estimate_usd", Float),
    Column("actual_usd", Float),
    Column("charged_usd", Float),
    Index("spend_at", "at"),
)
"""What runs cost (revision 0009; 0010 dropped its per-scope indexes): one row per charged run, its reservation then its actual cost;
it counts against a budget as ``coalesce(charged_usd, reserved_usd)`` (:mod:`bot.store.sql.spend`)."""

spend_total = Table(
    "spend_total", metadata,
    Column("budget", Text, primary_key=True),
    Column("counted_usd", Float, nullable=False),
)
"""What each budget period's runs count in ``spend`` (revision 0010), kept with it: ``budget`` is
``"scope:period:since:key"`` (:func:`bot.store.sql.spend.budget_key`)."""

expert_servers = Table(
    "expert_servers", metadata,
    Column("url", Text, primary_key=True),
    Column("api_key", Text, nullable=False),
    Column("job", Text, nullable=False),
    Column("registered", Float, nullable=False),
    Column("expires", Float, nullable=False),
    Index("expert_servers_expires", "expires"),
)
"""Expert servers ``hugginggpt experts launch`` registered (revision 0011): base URL, the API key
the bot sends it (a secret: never logged or shown), the Jobs job running it, and when the record
expires (epoch seconds; an expired record is ignored, :mod:`bot.store.sql.experts`)."""
