"""The SQL store's tables and the keys its rows are found by (:func:`row_key`, :func:`id_key`,
:func:`scope_key`, :func:`stored_search_text`). Creating them on first use, checking them
against the recorded schema version and every migration step: :mod:`.schema_migrations`.

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
import re
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ...errors import ConfigurationError

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
