"""The SQL store's tables, created on first use and checked against the recorded schema version.

Three tables, named with a configurable prefix (default ``chat_memory_``):

- ``<prefix>meta``: ``name``/``value`` pairs; ``schema_version`` says which layout the data uses.
- ``<prefix>conversations``: one row per conversation with its bookkeeping (version, last_seq,
  archived_count, summary_seq, compaction_error). Rows are found by ``conversation_key``, the
  SHA-256 of the id, so that any id is safe whatever the database's collation or key length limit.
- ``<prefix>events``: one row per event keyed by (conversation, seq), with the stored envelope,
  the archived flag, the type, the token count and the case-folded search text. The index on
  (conversation, archived, seq) makes reading the window a range scan that never visits the archive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ...errors import ConfigurationError, SchemaError

SCHEMA_VERSION = "1"
DEFAULT_TABLE_PREFIX = "chat_memory_"
_PREFIX_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,29}|")

# Long texts: TEXT is 64 KiB on MySQL, too small for tool results. Search text is compared
# byte-for-byte there (a *_ci collation would also fold accents, unlike casefold()).
_LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_SEARCH_TEXT = sa.Text().with_variant(mysql.LONGTEXT(collation="utf8mb4_bin"), "mysql", "mariadb")


#: PostgreSQL text cannot hold NUL, and SQLite's LIKE stops at one: the search_text column
#: keeps U+FFFD in place of NUL. Matching stays exact for every term holding neither
#: character (a one-for-one swap of characters cannot create or hide such a match); the
#: store matches the rare other terms in Python (see :func:`pushes_down`).
NUL_STAND_IN = "\ufffd"


def stored_search_text(folded: str | None) -> str | None:
    """The value of the search_text column for an event's folded search text."""
    return folded.replace("\x00", NUL_STAND_IN) if folded is not None else None


#: Longest term matched by LIKE: SQLite refuses patterns over 50,000 bytes (an escaped
#: character takes at most 4).
MAX_PUSHED_DOWN_TERM = 10_000


def pushes_down(term: str) -> bool:
    """True when a LIKE over the search_text column matches ``term`` exactly (and can be run)."""
    return "\x00" not in term and NUL_STAND_IN not in term and len(term) <= MAX_PUSHED_DOWN_TERM


def stored_message(message: str | None) -> str | None:
    """A compaction error as a text column can hold it (a diagnostic: NUL shows as U+FFFD)."""
    return message.replace("\x00", NUL_STAND_IN) if message is not None else None


#: Compaction flips rows out of the window range by UPDATE; vacuum sooner than the default
#: 20% so the dead index entries it leaves behind do not pile up. An ALTER right after the
#: CREATE (same transaction) rather than the ``postgresql_with`` table option, which
#: SQLAlchemy 2.0 does not know.
_EVENTS_STORAGE = sa.DDL(
    "ALTER TABLE %(fullname)s SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)"
).execute_if(dialect="postgresql")


@dataclass(frozen=True)
class Tables:
    """The store's tables under one prefix."""

    prefix: str
    metadata: sa.MetaData
    meta: sa.Table
    conversations: sa.Table
    events: sa.Table


def check_table_prefix(prefix: object) -> str:
    """Return the prefix if it is a safe identifier start (letters, digits, ``_``; at most 30
    characters, so every derived name fits the 63-character limit of PostgreSQL)."""
    if not isinstance(prefix, str) or not _PREFIX_PATTERN.fullmatch(prefix):
        raise ConfigurationError(
            f"table_prefix ({prefix!r}) must be up to 30 letters, digits or underscores, not starting with a digit"
        )
    return prefix


def build_tables(prefix: str = DEFAULT_TABLE_PREFIX) -> Tables:
    """Describe the tables for ``prefix`` (nothing is created here)."""
    prefix = check_table_prefix(prefix)
    metadata = sa.MetaData()
    meta = sa.Table(
        f"{prefix}meta",
        metadata,
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
    )
    conversations = sa.Table(
        f"{prefix}conversations",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("conversation_key", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(1024), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("archived_count", sa.BigInteger(), nullable=False),
        sa.Column("summary_seq", sa.BigInteger(), nullable=True),
        sa.Column("compaction_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("conversation_key", name=f"{prefix}conversations_key_uq"),
    )
    events = sa.Table(
        f"{prefix}events",
        metadata,
        sa.Column(
            "conversation_ref",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(conversations.c.id, ondelete="CASCADE", name=f"{prefix}events_conversation_fk"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("archived", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("search_text", _SEARCH_TEXT, nullable=True),
        sa.Column("body", _LONG_TEXT, nullable=False),
        sa.Index(f"{prefix}events_window_idx", "conversation_ref", "archived", "seq"),
    )
    sa.event.listen(events, "after_create", _EVENTS_STORAGE)
    return Tables(prefix, metadata, meta, conversations, events)


def ensure_schema(connection: sa.Connection, tables: Tables) -> None:
    """Create the tables when none exist, or check that the existing ones are ours and at
    :data:`SCHEMA_VERSION`. Runs inside the caller's (write) transaction."""
    inspector = sa.inspect(connection)
    names = {tables.meta.name, tables.conversations.name, tables.events.name}
    present = {name for name in names if inspector.has_table(name)}
    if not present:
        tables.metadata.create_all(connection, checkfirst=True)
        connection.execute(tables.meta.insert().values(name="schema_version", value=SCHEMA_VERSION))
        return
    if tables.meta.name not in present:
        raise SchemaError(
            f"tables {', '.join(sorted(present))} exist but {tables.meta.name} does not: they were not created by "
            "chat-memory; choose another table_prefix"
        )
    found = connection.execute(
        sa.select(tables.meta.c.value).where(tables.meta.c.name == "schema_version")
    ).scalar_one_or_none()
    if found != SCHEMA_VERSION:
        raise SchemaError(
            f"{tables.meta.name} records schema version {found!r}; this version of chat-memory reads version "
            f"{SCHEMA_VERSION!r} only (upgrade chat-memory, or use another table_prefix)"
        )
    for table in (tables.conversations, tables.events):
        if table.name not in present:
            raise SchemaError(f"table {table.name} is missing although {tables.meta.name} records schema version {found}")
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        missing = sorted(set(table.c.keys()) - columns)
        if missing:
            raise SchemaError(f"table {table.name} lacks the column(s) {', '.join(missing)} of schema version {found}")
