"""The SQL schema's migrations (version N -> N+1, 1 to 8) and what runs them.

:func:`ensure_schema` is the one entry point: run by a store in the write transaction that
holds the schema lock, it creates the tables (:func:`.schema.build_tables`) when none exist,
or reads the recorded ``schema_version``, runs the pending steps of :data:`SQL_SCHEMA` and
checks that every table has the columns this version describes. Each step is a function of a
:class:`SchemaChange` (the connection and the current tables), written to be safe on tables
partly in the new form already (columns and indexes are added when missing). The versioning
itself (refusing newer versions, finding the steps) is the generic
:class:`~chat_memory.backends.migrations.StoredFormat` every store shares.

Kept apart from :mod:`.schema` so that the current tables and keys read without eight
versions of history; the steps use the current helpers from there (:func:`.schema.id_key`,
...), so an upgraded table holds what a new one would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ...errors import SchemaError
from ..migrations import Migration, StoredFormat
from .schema import (
    ID_KEY_LENGTH,
    NUL_STAND_IN,
    SCHEMA_VERSION,
    UNSCOPED_SCOPE_KEY,
    Tables,
    id_key,
    scope_key,
    stored_search_text,
)

__all__ = ["SQL_SCHEMA", "SchemaChange", "ensure_schema"]


@dataclass(frozen=True)
class SchemaChange:
    """What a schema migration works with: the open write transaction and the tables (as
    the current version describes them)."""

    connection: sa.Connection
    tables: Tables


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
    """Version 2 -> 3: search_text keeps :data:`.schema.SEARCH_NUL` for NUL, not U+FFFD. Only rows
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
