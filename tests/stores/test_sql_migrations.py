"""Every older SQL schema version (1 to 7) migrated to the current one with compacted and
retracted conversations stored, then compacted, retracted and forked again, on SQLite and
PostgreSQL. Two layouts per version: the tables as that version really had them, and the
current tables with only the recorded version set back (what a half-finished migration or
a version set back by hand leaves): every step, and the fork timeline's baseline that the
step to version 7 writes, must take what it would add being there already. After either,
every event's keys are its ids' 16-digit keys and the window and call_key indexes are
partial (schema version 8)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import pytest
import sqlalchemy as sa

from chat_memory import Event
from chat_memory.backends.sql import SCHEMA_VERSION, SQLStore
from chat_memory.backends.sql.schema import Tables, id_key
from chat_memory.errors import InvalidInputError
from chat_memory.testing.transfer_conformance import _memory, _traffic, _turn

URLS = ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
OLDER_VERSIONS = range(1, int(SCHEMA_VERSION))
#: the tables as the older version had them, or the current ones with its number recorded
LAYOUTS = ["as_it_was", "current_tables_left"]


@pytest.fixture(params=URLS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


def _drop_columns(connection: sa.Connection, table: sa.Table, columns: Iterable[str]) -> None:
    """Drop ``columns`` of ``table`` and, first, the indexes over them (SQLite refuses to drop
    an indexed column)."""
    names = set(columns)
    for index in table.indexes:
        if any(column.name in names for column in index.columns):
            index.drop(connection)
    for name in sorted(names):
        connection.exec_driver_sql(f"ALTER TABLE {table.name} DROP COLUMN {name}")


def _as_version_7_events(connection: sa.Connection, tables: Tables) -> None:
    """The events' keys and indexes as version 4 to 7 had them: the whole SHA-256 of each id,
    and the window and call_key indexes over every row."""
    events = tables.events
    for index in events.indexes:
        index.drop(connection)
    rows = connection.execute(
        sa.select(events.c.conversation_ref, events.c.seq, events.c.type, events.c.body)
    ).all()
    for row in rows:
        body = json.loads(row.body)
        call_id = body.get("tool_call_id") if row.type in ("tool_call", "tool_result") else None
        connection.execute(
            events.update()
            .where(events.c.conversation_ref == row.conversation_ref, events.c.seq == row.seq)
            .values(event_key=_digest(body["id"]), call_key=call_id and _digest(call_id))
        )
    for name, columns in (
        ("window", "conversation_ref, archived, seq"),
        ("event_key", "conversation_ref, event_key"),
        ("call_key", "conversation_ref, call_key"),
    ):
        connection.exec_driver_sql(
            f"CREATE INDEX {tables.prefix}events_{name}_idx ON {events.name} ({columns})"
        )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _as_version(store: SQLStore, version: int) -> None:
    """Turn the tables into the layout schema ``version`` had: what each later version added
    is dropped or undone (versions 2 and 3 differ only in how search_text spells NUL, which
    the traffic here never holds)."""
    tables = store.tables
    with store.engine.begin() as connection:
        _as_version_7_events(connection, tables)
        if version <= 6:
            for table in (tables.conversation_tags, tables.guards, tables.timeline):
                table.drop(connection)
            _drop_columns(
                connection,
                tables.conversations,
                ("scope_key", "title", "tags", "meta", "timeline_from"),
            )
            _drop_columns(connection, tables.memory_namespaces, ("scope_key", "expires_at"))
        if version <= 5:
            _drop_columns(connection, tables.conversations, ("compaction_failures",))
        if version <= 4:  # no retraction before version 5: the traffic made none
            tables.retracted.drop(connection)
        if version <= 3:
            _drop_columns(connection, tables.events, ("event_key", "call_key"))
        if version <= 1:
            for table in (
                tables.compactions,
                tables.memory_versions,
                tables.memory_files,
                tables.memory_namespaces,
            ):
                table.drop(connection)
    _record_version(store, version)


def _record_version(store: SQLStore, version: int) -> None:
    meta = store.tables.meta
    with store.engine.begin() as connection:
        connection.execute(
            meta.update().where(meta.c.name == "schema_version").values(value=str(version))
        )


def _assert_version_8_events(store: SQLStore) -> None:
    """Every row's keys are :func:`id_key` of the ids in its body, and the window and call_key
    indexes are partial (the event_key index is not)."""
    events = store.tables.events
    with store.engine.connect() as connection:
        rows = connection.execute(
            sa.select(events.c.type, events.c.body, events.c.event_key, events.c.call_key)
        ).all()
        if connection.dialect.name == "sqlite":
            found = connection.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                (events.name,),
            )
        else:
            found = connection.exec_driver_sql(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %(t)s",
                {"t": events.name},
            )
        definitions = {str(name): str(sql) for name, sql in found if sql}
    assert rows
    for kind, body, event_key, call_key in rows:
        event = json.loads(body)
        tool = kind in ("tool_call", "tool_result")
        assert event_key == id_key(event["id"]), body
        assert call_key == (id_key(event["tool_call_id"]) if tool else None), body
    where = {
        name.removeprefix(f"{events.name}_"): sql.partition(" WHERE ")[2]
        for name, sql in definitions.items()
    }
    assert "archived" in where["window_idx"] and "call_key IS NOT NULL" in where["call_key_idx"], (
        where
    )
    assert where["event_key_idx"] == "", where


def _recorded_version(store: SQLStore) -> str:
    meta = store.tables.meta
    with store.engine.connect() as connection:
        return str(
            connection.execute(
                sa.select(meta.c.value).where(meta.c.name == "schema_version")
            ).scalar_one()
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("version", OLDER_VERSIONS)
def test_an_older_database_is_migrated_and_then_compacts_retracts_and_forks(
    sql_url: str, version: int, layout: str
) -> None:
    retracted_before = layout == "current_tables_left" or version >= 5
    old = SQLStore.from_url(sql_url)  # bound here, not by `as`: __enter__ is typed as Store's
    with old:
        memory = _memory(old)
        # 7 turns compact several times and retract once (at the 5th); 4 only compact
        _traffic(memory, "c", turns=7 if retracted_before else 4)
        memory.add("plain", [Event.user("one"), Event.assistant("two")])
        window, history = memory.window("c"), memory.history("c", include_retracted=True)
        assert memory.compactions("c") and any(e.archived for e in history)
        assert any(e.retracted for e in history) == retracted_before
        migrated_at = old.load("c").last_seq
        if layout == "as_it_was":
            _as_version(old, version)
        else:
            _record_version(old, version)
    store = SQLStore.from_url(sql_url)
    with store:
        memory = _memory(store)
        assert memory.window("c") == window
        assert memory.history("c", include_retracted=True) == history
        assert _recorded_version(store) == SCHEMA_VERSION
        _assert_version_8_events(store)
        dump = store.dump("c")
        # a version-7 database has its timeline; the step to 7 writes a baseline instead
        baseline = version <= 6
        assert dump is not None and dump.timeline_from == (migrated_at if baseline else 0)
        # the baseline alone, whatever rows were left: the state at the migration's seq (a
        # version-7 database keeps its own: every compaction and the retraction)
        kinds = ["compaction", "retraction"] if retracted_before else ["compaction"]
        found = [entry["kind"] for entry in dump.timeline]
        if baseline:
            assert found == kinds
        else:
            assert found.count("retraction") == 1 and found.count("compaction") > 1, found
        archived = memory.stats("c").archived_events
        seen: dict[int, list[Event]] = {}
        for i in range(10, 15):
            memory.add("c", _turn(i, call=i == 11))
            if i == 12:
                memory.retract("c", [memory.window("c")[-1].id])
            seen[store.load("c").last_seq] = memory.window("c")
        assert memory.stats("c").archived_events > archived  # compacted again
        # the state the migration found rebuilds exactly, and so does every later one
        assert memory.fork("c", "at-migration", at=migrated_at) == window
        assert memory.history("at-migration", include_retracted=True) == history
        for at, then in seen.items():
            assert memory.fork("c", f"at-{at}", at=at) == then, at
        assert memory.history(f"at-{max(seen)}", include_retracted=True) == memory.history(
            "c", include_retracted=True
        )
        # before it the migration knew no timeline: refused, not guessed
        if baseline:
            with pytest.raises(
                InvalidInputError,
                match=rf"at \({migrated_at - 1}\) is before .* \(from seq {migrated_at}\)",
            ):
                memory.fork("c", "too-early", at=migrated_at - 1)
        else:
            assert memory.fork("c", "earlier", at=migrated_at - 1) != window
        # a fork goes on by itself: what it adds and retracts leaves the source as it was
        memory.add("at-migration", _turn(20, call=True))
        taken = memory.retract("at-migration", [memory.window("at-migration")[-1].id])
        assert [e.content for e in taken] == ["answer 20"]
        assert memory.window("c") == seen[max(seen)]
        assert memory.fork("plain", "plain-fork") == memory.window("plain")
