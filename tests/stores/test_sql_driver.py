"""The SQL store's statements on the driver's cursor (chat_memory/backends/sql/driver.py):
compiled once per dialect with their ``IN`` lists, constants and type processors as
SQLAlchemy would send them, and their driver errors raised as SQLAlchemy raises them, so
that retries and StorageError wrapping behave as they did through ``Connection.execute``."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg

from chat_memory import Event
from chat_memory.backends.sql import SQLStore
from chat_memory.backends.sql.driver import compile_for
from chat_memory.backends.sql.schema import build_tables
from chat_memory.backends.sql.statements import Statements
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError, StorageError

SQL = Statements(build_tables("t_"), compaction_records_kept=20)


def test_in_lists_and_constants_become_the_drivers_parameters():
    params = {"b_ref": 7, "through_seq": 3}
    qmark = compile_for(SQL.archive_through, sqlite.dialect(), params)
    # archived=True and the NOT IN list are the statement's own values, processed for SQLite
    assert qmark.sql.count("?") == 5 and "POSTCOMPILE" not in qmark.sql
    assert list(qmark.parameters(params)) == [1, 7, 3, "system", "summary"]
    named = compile_for(SQL.archive_through, psycopg.dialect(), params)
    assert "%(type_1_1)s, %(type_1_2)s" in named.sql
    assert named.parameters(params) == {
        "archived": True,
        "b_ref": 7,
        "through_seq": 3,
        "type_1_1": "system",
        "type_1_2": "summary",
    }


def test_an_in_list_is_compiled_at_its_length():
    keys = {"b_key": "k", "b_event_keys": ["a", "b", "c"], "b_call_keys": ["d"]}
    compiled = compile_for(SQL.events_by_keys, sqlite.dialect(), keys)
    assert list(compiled.parameters(keys)) == ["k", "a", "b", "c", "k", "d"]
    with pytest.raises(ValueError, match="IN list 'b_call_keys' is empty"):
        compile_for(SQL.events_by_keys, sqlite.dialect(), {**keys, "b_call_keys": []})


def test_column_types_process_the_inserted_values_as_sqlalchemy_does():
    now = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    row = {"conversation_ref": 1, "seq": 2, "archived": False, "created_at": now, "body": "{}"}
    compiled = compile_for(SQL.insert_events, sqlite.dialect(), row, list(row))
    expected = sa.DateTime().dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())
    assert expected is not None
    assert list(compiled.parameters(row)) == [1, 2, 0, expected(now), "{}"]


def test_an_empty_in_list_still_finds_through_sqlalchemy(sqlite_store):
    call = Event.tool_call("lookup", {}, call_id="a")
    sqlite_store.append("c", [Event.user("q"), call])
    assert [e.id for e in sqlite_store.find_events("c", [], ["a"])] == [call.id]
    assert [e.id for e in sqlite_store.find_events("c", [call.id], [])] == [call.id]


def test_a_driver_error_on_the_cursor_is_a_storage_error_from_sqlalchemys(sqlite_store):
    sqlite_store.append("c", [Event.user("q")])
    with sqlite_store.engine.begin() as connection:
        connection.exec_driver_sql(f"DROP TABLE {sqlite_store.tables.events.name}")
    with pytest.raises(StorageError, match="no such table") as raised:
        sqlite_store.load("c")
    cause = raised.value.__cause__
    assert isinstance(cause, sa.exc.OperationalError)
    assert isinstance(cause.orig, sqlite3.OperationalError)


def test_a_locked_database_is_a_lost_race_retried(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    store = SQLStore(url, retry=Backoff(attempts=2, base=0.001), connect_args={"timeout": 0})
    store.append("c", [Event.user("q")])
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held by another connection
        with pytest.raises(ConcurrencyError, match="lost 2 races") as raised:
            store.append("c", [Event.assistant("a")])
        assert isinstance(raised.value.__cause__, sa.exc.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [e.seq for e in store.append_without_window("c", [Event.assistant("a")])] == [2]
    store.close()
