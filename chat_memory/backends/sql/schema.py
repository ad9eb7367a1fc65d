"""The SQL store's tables, created on first use and checked against the recorded schema version.

Eleven tables, named with a configurable prefix (default ``chat_memory_``):

- ``<prefix>meta``: ``name``/``value`` pairs; ``schema_version`` says which layout the data uses,
  and ``migrated_to_<N>`` records when (and by which step) the tables were upgraded to N.
- ``<prefix>conversations``: one row per conversation with its bookkeeping (version, last_seq,
  archived_count, summary_seq, compaction_error and, since schema version 6,
  compaction_failures: the failed compactions since the last applied one). Rows are found by
  ``conversation_key``, the SHA-256 of the id, so that any id is safe whatever the database's
  collation or key length limit.
- ``<prefix>events``: one row per event keyed by (conversation, seq), with the stored envelope,
  the archived flag, the type, the token count and the case-folded search text (NUL spelled
  :data:`SEARCH_NUL` since schema version 3). The index on (conversation, archived, seq) makes
  reading the window a range scan that never visits the archive. Since schema version 4,
  ``event_key`` (the SHA-256 of the event's id) and ``call_key`` (of its ``tool_call_id``,
  tool events only), each indexed with the conversation: an append's idempotency check and
  the tool-pair check look the batch's ids up instead of reading the window.
- ``<prefix>retracted_events`` (since schema version 5): events taken back by a retraction,
  moved out of ``<prefix>events`` whole (seq, type, body), so that no window, history,
  search or index query of the events table has to leave them out.
- ``<prefix>compactions`` (since schema version 2): the records of a conversation's newest
  compactions (JSON), written in the compaction's own transaction. Older ones are deleted
  now and then, not at every compaction (``SQLOperations._keep_record``): the table may hold
  a few beyond the ones ``compactions()`` returns.
- since schema version 2 too, three for long-term memory (:mod:`chat_memory.longterm.sql`):
  ``<prefix>memory_namespaces`` (one row per namespace: its revision, locked by every commit),
  ``<prefix>memory_files`` (the current files) and ``<prefix>memory_versions`` (every change).
- since schema version 7 (the lifecycle, docs/lifecycle.md and docs/sql.md): on conversations
  ``scope_key`` (the SHA-256 of the scope prefix), ``title``, ``tags``, ``meta`` and
  ``timeline_from``, indexed by (scope_key, updated_at) and by updated_at (``updated_at`` is
  the last activity); on namespaces ``scope_key`` and ``expires_at``;
  ``<prefix>conversation_tags`` (listing by tag), ``<prefix>guards`` (erasure guards, by
  digest) and ``<prefix>conversation_timeline`` (the fork timeline, sql/transfer.py).
- since schema version 8 (fewer pages written an append, docs/sql.md): ``event_key`` and
  ``call_key`` hold 16 hex digits of the SHA-256 (:func:`id_key`), the call_key index leaves
  out the rows without a call id, and the window index the archived rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ...errors import ConfigurationError, SchemaError
from ..migrations import Migration, StoredFormat

#: The schema version this code creates (as recorded in the meta table).
SCHEMA_VERSION = "8"
DEFAULT_TABLE_PREFIX = "chat_memory_"
_PREFIX_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,29}|")

# Long texts: TEXT is 64 KiB on MySQL, too small for tool results. Search text is compared
# byte-for-byte there (a *_ci collation would also fold accents, unlike casefold()).
_LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_SEARCH_TEXT = sa.Text().with_variant(mysql.LONGTEXT(collation="utf8mb4_bin"), "mysql", "mariadb")


#: A NUL as a compaction error message keeps it (a diagnostic: PostgreSQL text cannot hold NUL).
NUL_STAND_IN = "\ufffd"

#: PostgreSQL text cannot hold NUL, and SQLite's LIKE stops at one: the search_text column
#: (since schema version 3) keeps "ß" in place of NUL, and search terms are written the same
#: way. Case-folded text never holds "ß" (it folds to "ss"), so the swap is one-to-one over
#: every text the column and a term can hold, and LIKE matches exactly for every term: a
#: match is never created or hidden. "ß" is no ASCII letter, so SQLite's LIKE does not fold
#: it, and a Unicode-aware LIKE (ICU) folds it to itself. (Version 2 kept U+FFFD, which made
#: NUL and U+FFFD one character: a term with either was matched in Python over the history.)
SEARCH_NUL = "\u00df"


def stored_search_text(folded: str | None) -> str | None:
    """The value of the search_text column for an event's folded search text (or a search
    term: :data:`SEARCH_NUL` for NUL)."""
    return folded.replace("\x00", SEARCH_NUL) if folded is not None else None


#: Longest fragment of JSON body text looked up with LIKE: SQLite refuses patterns over
#: 50,000 bytes (an escaped character takes at most 4).
MAX_PUSHED_DOWN_TERM = 10_000


def pushes_down(fragment: str) -> bool:
    """True when a LIKE over the JSON body column can take ``fragment`` (a piece of an
    envelope: JSON spells NUL ``\\u0000``, and U+FFFD is stored as itself, so the match is exact)."""
    return len(fragment) <= MAX_PUSHED_DOWN_TERM


def row_key(text: str) -> str:
    """The indexed key of a conversation id or a tag (``conversation_key``, ``tag_key``): its
    SHA-256, so that any id is an exact, bounded key whatever the collation or length."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Hex digits of an :func:`id_key`: 64 bits, so that any two ids of a 65,536-event
#: conversation share a key with odds of about 2**-33 (and then cost one more row read).
ID_KEY_LENGTH = 16


def id_key(text: str) -> str:
    """The indexed key of an event id or a ``tool_call_id`` (``event_key``, ``call_key``): the
    first :data:`ID_KEY_LENGTH` hex digits of its SHA-256, an exact, bounded key whatever the
    collation or length. Rows found by key are checked against the id in their body, so keys
    need not be unique, and 16 digits (since schema version 8; 64 before) make the two
    indexes about a third of their size, a page holding three times the entries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:ID_KEY_LENGTH]


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
    compactions: sa.Table
    memory_namespaces: sa.Table
    memory_files: sa.Table
    memory_versions: sa.Table
    retracted: sa.Table
    conversation_tags: sa.Table
    guards: sa.Table
    timeline: sa.Table

    @property
    def checked(self) -> tuple[sa.Table, ...]:
        """The tables whose columns are checked against this schema version."""
        return (
            self.conversations,
            self.events,
            self.compactions,
            self.memory_namespaces,
            self.memory_files,
            self.memory_versions,
            self.retracted,
            self.conversation_tags,
            self.guards,
            self.timeline,
        )


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
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("conversation_key", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(1024), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("archived_count", sa.BigInteger(), nullable=False),
        sa.Column("summary_seq", sa.BigInteger(), nullable=True),
        sa.Column("compaction_error", sa.Text(), nullable=True),
        sa.Column("compaction_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        # the last activity (every write refreshes it): what listing and the sweep order by
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        # since schema version 7: the lifecycle (docs/lifecycle.md) and the fork timeline
        sa.Column("scope_key", sa.String(64), nullable=False, server_default=UNSCOPED_SCOPE_KEY),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("tags", sa.Text(), nullable=True),
        sa.Column("meta", _LONG_TEXT, nullable=True),
        sa.Column("timeline_from", sa.BigInteger(), nullable=False, server_default="0"),
        sa.UniqueConstraint("conversation_key", name=f"{prefix}conversations_key_uq"),
        sa.Index(f"{prefix}conversations_scope_idx", "scope_key", "updated_at"),
        sa.Index(f"{prefix}conversations_active_idx", "updated_at"),
    )
    events = sa.Table(
        f"{prefix}events",
        metadata,
        sa.Column(
            "conversation_ref",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(
                conversations.c.id, ondelete="CASCADE", name=f"{prefix}events_conversation_fk"
            ),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("archived", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("search_text", _SEARCH_TEXT, nullable=True),
        sa.Column("body", _LONG_TEXT, nullable=False),
        # id_key()s: 16 hex digits since schema version 8 (the width stays that of version 4)
        sa.Column("event_key", sa.String(64), nullable=True),
        sa.Column("call_key", sa.String(64), nullable=True),
        sa.Index(f"{prefix}events_event_key_idx", "conversation_ref", "event_key"),
    )
    # Partial where the database has them (SQLite, PostgreSQL; elsewhere they index every
    # row): the window index holds the window, not the archive, and the call_key index the
    # tool events only. Each query they serve names the condition as written here (a literal
    # ``archived = false``; ``call_key IN (…)`` implies ``IS NOT NULL``), or the planner
    # cannot prove the index holds its rows.
    not_archived = events.c.archived == sa.false()
    sa.Index(
        f"{prefix}events_window_idx",
        events.c.conversation_ref,
        events.c.archived,
        events.c.seq,
        sqlite_where=not_archived,
        postgresql_where=not_archived,
    )
    has_call = events.c.call_key.is_not(None)
    sa.Index(
        f"{prefix}events_call_key_idx",
        events.c.conversation_ref,
        events.c.call_key,
        sqlite_where=has_call,
        postgresql_where=has_call,
    )
    compactions = sa.Table(
        f"{prefix}compactions",
        metadata,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column(
            "conversation_ref",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(
                conversations.c.id, ondelete="CASCADE", name=f"{prefix}compactions_conversation_fk"
            ),
            nullable=False,
        ),
        sa.Column("record", _LONG_TEXT, nullable=False),
        sa.Index(f"{prefix}compactions_conversation_idx", "conversation_ref", "id"),
    )
    retracted = sa.Table(
        f"{prefix}retracted_events",
        metadata,
        sa.Column(
            "conversation_ref",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(
                conversations.c.id, ondelete="CASCADE", name=f"{prefix}retracted_conversation_fk"
            ),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("body", _LONG_TEXT, nullable=False),
        sa.Column("retracted_at", sa.DateTime(timezone=True), nullable=False),
    )
    sa.event.listen(events, "after_create", _EVENTS_STORAGE)
    return Tables(
        prefix,
        metadata,
        meta,
        conversations,
        events,
        compactions,
        *_memory_tables(prefix, metadata),
        retracted,
        *_lifecycle_tables(prefix, metadata, conversations),
    )


def scope_key(scope: str) -> str:
    """The indexed key of a scope prefix (``scope_key`` columns): its SHA-256, bounded
    whatever the user and app, and holding neither."""
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()


#: ``scope_key`` of the unscoped conversations (bare ids): the digest of the empty prefix.
UNSCOPED_SCOPE_KEY = scope_key("")


def _lifecycle_tables(
    prefix: str, metadata: sa.MetaData, conversations: sa.Table
) -> tuple[sa.Table, sa.Table, sa.Table]:
    """The tables of schema version 7: a conversation's tags (listing by tag), the erasure
    guards, and the fork timeline (docs/lifecycle.md, "Fork")."""
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    tags = sa.Table(
        f"{prefix}conversation_tags",
        metadata,
        sa.Column(
            "conversation_ref",
            big_id,
            sa.ForeignKey(
                conversations.c.id, ondelete="CASCADE", name=f"{prefix}tags_conversation_fk"
            ),
            primary_key=True,
        ),
        sa.Column("tag_key", sa.String(64), primary_key=True),
        sa.Column("scope_key", sa.String(64), nullable=False),
        sa.Index(f"{prefix}conversation_tags_idx", "scope_key", "tag_key"),
    )
    guards = sa.Table(
        f"{prefix}guards",
        metadata,
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
    )
    timeline = sa.Table(
        f"{prefix}conversation_timeline",
        metadata,
        sa.Column(
            "conversation_ref",
            big_id,
            sa.ForeignKey(
                conversations.c.id, ondelete="CASCADE", name=f"{prefix}timeline_conversation_fk"
            ),
            primary_key=True,
        ),
        sa.Column("n", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("head", sa.BigInteger(), nullable=True),
        sa.Column("through", sa.BigInteger(), nullable=True),
        sa.Column("summary_seq", sa.BigInteger(), nullable=True),
        sa.Column("seqs", _LONG_TEXT, nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("pin_key", sa.Text(), nullable=True),
    )
    return tags, guards, timeline


def _memory_tables(prefix: str, metadata: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table]:
    """The long-term memory tables. Namespaces and paths are keyed by their SHA-256 so any
    text is an exact, bounded key whatever the collation."""
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    namespaces = sa.Table(
        f"{prefix}memory_namespaces",
        metadata,
        sa.Column("namespace_key", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        # since schema version 7: the scope of a scoped namespace (None: a bare one), and
        # when its retention lapses (updated_at + retention; None: kept forever)
        sa.Column("scope_key", sa.String(64), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Index(f"{prefix}memory_namespaces_scope_idx", "scope_key"),
        sa.Index(f"{prefix}memory_namespaces_expiry_idx", "expires_at"),
    )
    files = sa.Table(
        f"{prefix}memory_files",
        metadata,
        sa.Column("namespace_key", sa.String(64), primary_key=True),
        sa.Column("path_key", sa.String(64), primary_key=True),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("content", _LONG_TEXT, nullable=False),
    )
    versions = sa.Table(
        f"{prefix}memory_versions",
        metadata,
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("namespace_key", sa.String(64), nullable=False),
        sa.Column("path_key", sa.String(64), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("content", _LONG_TEXT, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index(f"{prefix}memory_versions_path_idx", "namespace_key", "path_key", "revision"),
    )
    return namespaces, files, versions


def _add_tables_of_version_2(change: SchemaChange) -> None:
    """Version 1 -> 2: the compaction records and the long-term memory tables."""
    tables = change.tables
    for table in (
        tables.compactions,
        tables.memory_namespaces,
        tables.memory_files,
        tables.memory_versions,
    ):
        table.create(change.connection, checkfirst=True)


def _recode_nul_in_search_text(change: SchemaChange) -> None:
    """Version 2 -> 3: search_text keeps :data:`SEARCH_NUL` for NUL, not U+FFFD. Only rows
    whose search text holds U+FFFD can change; each is rewritten from its body (the exact
    envelope), a batch at a time in key order."""
    from ...events import Event
    from ...search import search_text

    events, connection = change.tables.events, change.connection
    key = sa.tuple_(events.c.conversation_ref, events.c.seq)
    affected = (
        sa.select(events.c.conversation_ref, events.c.seq, events.c.body)
        .where(events.c.search_text.contains(NUL_STAND_IN, autoescape=True))
        .order_by(events.c.conversation_ref, events.c.seq)
        .limit(500)
    )
    update = (
        events.update()
        .where(
            events.c.conversation_ref == sa.bindparam("b_ref"),
            events.c.seq == sa.bindparam("b_seq"),
        )
        .values(search_text=sa.bindparam("b_text"))
    )
    after: tuple[int, int] | None = None
    while True:
        rows = connection.execute(
            affected if after is None else affected.where(key > sa.tuple_(*after))
        ).all()
        if not rows:
            return
        connection.execute(
            update,
            [
                {
                    "b_ref": row.conversation_ref,
                    "b_seq": row.seq,
                    "b_text": stored_search_text(search_text(Event.from_json(row.body))),
                }
                for row in rows
            ],
        )
        after = (rows[-1].conversation_ref, rows[-1].seq)


def _index_event_and_call_ids(change: SchemaChange) -> None:
    """Version 3 -> 4: the ``event_key`` and ``call_key`` columns (added when missing), filled
    from each event's body (its JSON envelope), a batch at a time in key order, then their
    indexes. Reads the whole table once, in the one migration transaction."""
    events, connection = change.tables.events, change.connection
    inspector = sa.inspect(connection)
    preparer = connection.dialect.identifier_preparer
    columns = {column["name"] for column in inspector.get_columns(events.name)}
    for column in (events.c.event_key, events.c.call_key):
        if column.name not in columns:
            kind = column.type.compile(dialect=connection.dialect)
            connection.exec_driver_sql(
                f"ALTER TABLE {preparer.format_table(events)} ADD COLUMN {preparer.quote(column.name)} {kind}"
            )
    key = sa.tuple_(events.c.conversation_ref, events.c.seq)
    unkeyed = (
        sa.select(events.c.conversation_ref, events.c.seq, events.c.type, events.c.body)
        .where(events.c.event_key.is_(None))
        .order_by(events.c.conversation_ref, events.c.seq)
        .limit(500)
    )
    update = (
        events.update()
        .where(
            events.c.conversation_ref == sa.bindparam("b_ref"),
            events.c.seq == sa.bindparam("b_seq"),
        )
        .values(event_key=sa.bindparam("b_event_key"), call_key=sa.bindparam("b_call_key"))
    )
    after: tuple[int, int] | None = None
    while True:
        rows = connection.execute(
            unkeyed if after is None else unkeyed.where(key > sa.tuple_(*after))
        ).all()
        if not rows:
            break
        connection.execute(update, [_keys_of_row(row) for row in rows])
        after = (rows[-1].conversation_ref, rows[-1].seq)
    present = {index["name"] for index in inspector.get_indexes(events.name)}
    for index in events.indexes:
        if index.name not in present:
            index.create(connection)


def _add_retracted_table(change: SchemaChange) -> None:
    """Version 4 -> 5: the retracted events' table (nothing to move: no event was retracted)."""
    change.tables.retracted.create(change.connection, checkfirst=True)


def _add_compaction_failures(change: SchemaChange) -> None:
    """Version 5 -> 6: ``conversations.compaction_failures`` (added when missing), 0 on every
    existing row: a count that starts again is what an older chat-memory kept in its process."""
    conversations, connection = change.tables.conversations, change.connection
    columns = {column["name"] for column in sa.inspect(connection).get_columns(conversations.name)}
    if "compaction_failures" not in columns:
        preparer = connection.dialect.identifier_preparer
        kind = conversations.c.compaction_failures.type.compile(dialect=connection.dialect)
        connection.exec_driver_sql(
            f"ALTER TABLE {preparer.format_table(conversations)} ADD COLUMN "
            f"{preparer.quote('compaction_failures')} {kind} DEFAULT 0 NOT NULL"
        )


def _add_lifecycle(change: SchemaChange) -> None:
    """Version 6 -> 7: the lifecycle columns of conversations and namespaces (added when
    missing; ``scope_key`` filled from each scoped id, ``timeline_from`` = ``last_seq``: the
    past of a stored conversation has no timeline), their indexes, and the tags, guards and
    timeline tables. Reads only the rows whose id or namespace is scoped."""
    tables, connection = change.tables, change.connection
    conversations, namespaces = tables.conversations, tables.memory_namespaces
    _add_missing_columns(
        connection,
        conversations,
        {
            "scope_key": f"DEFAULT '{UNSCOPED_SCOPE_KEY}' NOT NULL",
            "title": "",
            "tags": "",
            "meta": "",
            "timeline_from": "DEFAULT 0 NOT NULL",
        },
    )
    _add_missing_columns(connection, namespaces, {"scope_key": "", "expires_at": ""})
    connection.execute(conversations.update().values(timeline_from=conversations.c.last_seq))
    _fill_scope_keys(connection, conversations, conversations.c.id, conversations.c.conversation_id)
    _fill_scope_keys(connection, namespaces, namespaces.c.namespace_key, namespaces.c.namespace)
    inspector = sa.inspect(connection)
    for table in (conversations, namespaces):
        present = {index["name"] for index in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in present:
                index.create(connection)
    for table in (tables.conversation_tags, tables.guards, tables.timeline):
        table.create(connection, checkfirst=True)
    # the fork timeline's entries for the state each conversation is in now (sql/timeline.py)
    from .timeline import write_baseline_timelines

    write_baseline_timelines(connection, tables)


def _narrow_event_indexes(change: SchemaChange) -> None:
    """Version 7 -> 8: ``event_key`` and ``call_key`` cut to their first :data:`ID_KEY_LENGTH`
    hex digits (what :func:`id_key` gives: the keys are SHA-256 digests, so a prefix is the
    key, and no body is read) by one ``UPDATE`` of the rows that still hold longer keys; the
    window and call_key indexes become partial. The three indexes are dropped first and
    created after (by the current definitions): an UPDATE under them would move every entry
    one by one, and indexes already in the new form (tables left at version 8 with an older
    version recorded) are rebuilt the same."""
    events, connection = change.tables.events, change.connection
    names = {
        f"{change.tables.prefix}events_{name}_idx" for name in ("window", "event_key", "call_key")
    }
    present = {index["name"] for index in sa.inspect(connection).get_indexes(events.name)}
    rebuilt = [index for index in events.indexes if index.name in names]
    for index in rebuilt:
        if index.name in present:
            index.drop(connection)
    length = sa.func.length
    connection.execute(
        events.update()
        .where(
            sa.or_(
                length(events.c.event_key) > ID_KEY_LENGTH,
                length(events.c.call_key) > ID_KEY_LENGTH,
            )
        )
        .values(
            event_key=sa.func.substr(events.c.event_key, 1, ID_KEY_LENGTH),
            call_key=sa.func.substr(events.c.call_key, 1, ID_KEY_LENGTH),
        )
    )
    for index in rebuilt:
        index.create(connection)


def _add_missing_columns(
    connection: sa.Connection, table: sa.Table, columns: dict[str, str]
) -> None:
    """``ALTER TABLE … ADD COLUMN`` each of ``columns`` (name -> default and nullability
    clause) the table lacks."""
    present = {column["name"] for column in sa.inspect(connection).get_columns(table.name)}
    preparer = connection.dialect.identifier_preparer
    for name, clause in columns.items():
        if name not in present:
            kind = table.c[name].type.compile(dialect=connection.dialect)
            connection.exec_driver_sql(
                f"ALTER TABLE {preparer.format_table(table)} ADD COLUMN "
                f"{preparer.quote(name)} {kind} {clause}".rstrip()
            )


def _fill_scope_keys(
    connection: sa.Connection, table: sa.Table, key: sa.Column[Any], name: sa.Column[Any]
) -> None:
    """Set ``scope_key`` of the rows of ``table`` whose ``name`` is a scoped key, a batch at
    a time in ``key`` order."""
    from ...lifecycle.keys import SCOPE_PREFIX

    scoped = (
        sa.select(key, name)
        .where(name.startswith(SCOPE_PREFIX, autoescape=True))
        .order_by(key)
        .limit(500)
    )
    update = (
        table.update()
        .where(key == sa.bindparam("b_key"))
        .values(scope_key=sa.bindparam("b_scope_key"))
    )
    after: Any = None
    while True:
        rows = connection.execute(scoped if after is None else scoped.where(key > after)).all()
        if not rows:
            return
        connection.execute(
            update,
            [{"b_key": row[0], "b_scope_key": _scope_key_of(row[1])} for row in rows],
        )
        after = rows[-1][0]


def _scope_key_of(name: str) -> str:
    """The scope key of a stored id or namespace; one that only looks scoped (stored before
    the prefix was reserved) stays unscoped."""
    from ...errors import InvalidInputError
    from ...lifecycle.keys import scope_of_key

    try:
        return scope_key(scope_of_key(name))
    except InvalidInputError:
        return UNSCOPED_SCOPE_KEY


def _keys_of_row(row: Any) -> dict[str, Any]:
    body = json.loads(row.body)
    call_id = body.get("tool_call_id") if row.type in ("tool_call", "tool_result") else None
    return {
        "b_ref": row.conversation_ref,
        "b_seq": row.seq,
        "b_event_key": id_key(body["id"]),
        "b_call_key": id_key(call_id) if isinstance(call_id, str) else None,
    }


@dataclass(frozen=True)
class SchemaChange:
    """What a schema migration works with: the open write transaction and the tables (as
    the current version describes them)."""

    connection: sa.Connection
    tables: Tables


#: The SQL schema's version and its migrations (N -> N+1). Pending ones run when a store
#: first touches the tables: all in the one write transaction that holds the schema lock,
#: so a failed step leaves the tables at their old version (MySQL commits DDL implicitly:
#: there a failed step can leave a partial change behind).


SQL_SCHEMA: StoredFormat[SchemaChange] = StoredFormat(
    "SQL schema",
    current=int(SCHEMA_VERSION),
    migrations=(
        Migration(1, "add the compactions and long-term memory tables", _add_tables_of_version_2),
        Migration(
            2, "search_text keeps NUL as the letter sharp s, not U+FFFD", _recode_nul_in_search_text
        ),
        Migration(
            3,
            "index events by id and by tool_call_id (event_key, call_key)",
            _index_event_and_call_ids,
        ),
        Migration(4, "add the retracted events table", _add_retracted_table),
        Migration(
            5,
            "count failed compactions beside the compaction error",
            _add_compaction_failures,
        ),
        Migration(
            6,
            "scope, metadata, tags, erasure guards and the fork timeline",
            _add_lifecycle,
        ),
        Migration(
            7,
            "16-digit event and call keys, partial window and call_key indexes",
            _narrow_event_indexes,
        ),
    ),
    remedy="upgrade chat-memory, or use another table_prefix",
)


def ensure_schema(connection: sa.Connection, tables: Tables) -> None:
    """Create the tables when none exist, or check that the existing ones are ours and bring
    them up to the current schema version with :data:`SQL_SCHEMA`'s migrations. Runs inside
    the caller's (write) transaction, which holds the schema lock."""
    inspector = sa.inspect(connection)
    names = {tables.meta.name, *(table.name for table in tables.checked)}
    present = {name for name in names if inspector.has_table(name)}
    if not present:
        tables.metadata.create_all(connection, checkfirst=True)
        connection.execute(
            tables.meta.insert().values(name="schema_version", value=str(SQL_SCHEMA.current))
        )
        return
    if tables.meta.name not in present:
        raise SchemaError(
            f"tables {', '.join(sorted(present))} exist but {tables.meta.name} does not: they were not created by "
            "chat-memory; choose another table_prefix"
        )
    recorded = connection.execute(
        sa.select(tables.meta.c.value).where(tables.meta.c.name == "schema_version")
    ).scalar_one_or_none()
    if recorded is None:
        raise SchemaError(
            f"{tables.meta.name} records no schema_version: the tables were not created by chat-memory"
        )
    found = SQL_SCHEMA.parse(recorded, tables.meta.name)
    steps = SQL_SCHEMA.steps(found, tables.meta.name)
    for step in steps:
        _migrate(connection, tables, step)
    if steps:
        inspector = sa.inspect(
            connection
        )  # the inspector caches what it read before the migrations
        present = {name for name in names if inspector.has_table(name)}
    for table in tables.checked:
        if table.name not in present:
            raise SchemaError(
                f"table {table.name} is missing although {tables.meta.name} records schema version {found}"
            )
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        missing = sorted(set(table.c.keys()) - columns)
        if missing:
            raise SchemaError(
                f"table {table.name} lacks the column(s) {', '.join(missing)} of schema version {SQL_SCHEMA.current}"
            )


def _migrate(connection: sa.Connection, tables: Tables, step: Migration[SchemaChange]) -> None:
    """Run one migration and record it: the new schema_version and a ``migrated_to_<N>`` row."""
    meta = tables.meta
    step.upgrade(SchemaChange(connection, tables))
    connection.execute(
        meta.update().where(meta.c.name == "schema_version").values(value=str(step.to_version))
    )
    record = f"migrated_to_{step.to_version}"
    note = f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {step.description}"[:255]
    connection.execute(meta.delete().where(meta.c.name == record))
    connection.execute(meta.insert().values(name=record, value=note))
