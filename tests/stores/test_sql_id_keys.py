"""The SQL store's id keys and the indexes over the events (docs/sql.md, schema version 8).

``event_key`` and ``call_key`` are short digests that may collide: every row a key finds is
checked against the ids in its body. With keys cut to one hex digit (sixteen keys for every
id), random adds, repeated events, tool pairs and retractions leave exactly the history and
window the in-memory store leaves; with one key for every id, the look-ups still find only
what was asked for. And every statement of a turn, a compaction, a tool-pair check and a
retraction reaches the events table by an index (EXPLAIN on SQLite, and on PostgreSQL with
sequential scans priced out, so that a partial index the planner cannot prove usable
shows): each of the window, event_key and call_key indexes serves one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.sql import SQLStore, lookups, operations, rows, schema
from chat_memory.errors import ChatMemoryError, InvalidEventError

SQL_STORES = ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]
TWO_TURNS = MemoryConfig(compaction_strategy="turn_window", max_turns=2)


@pytest.fixture(params=SQL_STORES)
def sql_store(request: pytest.FixtureRequest) -> SQLStore:
    store: SQLStore = request.getfixturevalue(request.param)
    return store


@contextmanager
def keys_cut_to(key: Callable[[str], str]) -> Iterator[None]:
    """Every event and call key the store writes and looks up is ``key`` of the id."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (rows, lookups, operations):  # each module of SQLOperations that keys ids
            patch.setattr(module, "id_key", key)
        yield


def one_digit(text: str) -> str:
    return schema.id_key(text)[:1]


# -- colliding keys ----------------------------------------------------------------------

IDS = [f"e{i}" for i in range(6)]
CALLS = [f"k{i}" for i in range(3)]
step = st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(IDS), min_size=1, max_size=3)),
    st.tuples(st.just("pair"), st.sampled_from(CALLS)),
    st.tuples(st.just("result"), st.sampled_from(CALLS)),
    st.tuples(st.just("retract"), st.sampled_from(IDS + CALLS)),
)


def _run(memory: ChatMemory, events: dict[str, Event], action: str, arg: Any) -> str:
    """One step on ``memory``; what came of it (the error's type when it was refused)."""
    try:
        if action == "add":
            # the same event objects each time: a repeat is the add retried
            return repr([e.seq for e in memory.add("c", [events[i] for i in dict.fromkeys(arg)])])
        if action == "pair":
            return repr(memory.add("c", [events[f"call-{arg}"], events[f"result-{arg}"]]))
        if action == "result":  # a result alone: paired with a stored call, or refused
            return repr(memory.add("c", [events[f"result-{arg}"]]))
        ids = [events[f"call-{arg}"].id] if arg in CALLS else [arg]
        return repr([e.id for e in memory.retract("c", ids)])
    except ChatMemoryError as error:
        return type(error).__name__


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=10))
def test_keys_that_collide_are_told_apart_by_the_ids_in_the_bodies(
    steps: list[tuple[str, Any]],
) -> None:
    events = {i: Event.user(f"text of {i}", id=i) for i in IDS}
    for k in CALLS:
        events[f"call-{k}"] = Event.tool_call("lookup", {"k": k}, call_id=k, id=f"call-{k}")
        events[f"result-{k}"] = Event.tool_result(k, f"found {k}", id=f"result-{k}")
    expected = ChatMemory(open_store("memory://"), TWO_TURNS)
    with keys_cut_to(one_digit), SQLStore.from_url("sqlite://") as store:
        actual = ChatMemory(store, TWO_TURNS)
        for action, arg in steps:
            assert _run(actual, events, action, arg) == _run(expected, events, action, arg)
            assert actual.window("c") == expected.window("c")
        assert actual.history("c", include_retracted=True) == expected.history(
            "c", include_retracted=True
        )


def test_one_key_for_every_id_still_finds_only_the_ids_asked_for(sql_store: SQLStore) -> None:
    with keys_cut_to(lambda text: "0" * schema.ID_KEY_LENGTH):
        memory = ChatMemory(sql_store)
        first, second = Event.user("first", id="a"), Event.user("second", id="b")
        assert [e.seq for e in memory.add("c", [first, second])] == [1, 2]
        assert [e.seq for e in memory.add("c", [second, Event.assistant("third", id="x")])] == [
            2,
            3,
        ]
        memory.add("c", [Event.tool_call("f", call_id="p"), Event.tool_result("p", "done")])
        memory.add("c", [Event.tool_call("f", call_id="q"), Event.tool_result("q", "done")])
        found = sql_store.find_tool_events("c", ["q"])
        assert [(e.type.value, e.tool_call_id) for e in found] == [
            ("tool_call", "q"),
            ("tool_result", "q"),
        ]
        assert [e.id for e in sql_store.find_events("c", ["b"], [])] == ["b"]
        taken = memory.retract("c", [found[0].id])
        assert [e.tool_call_id for e in taken] == ["q", "q"]
        assert [e.id for e in memory.window("c")][:3] == ["a", "b", "x"]
        assert [e.tool_call_id for e in memory.window("c")[3:]] == ["p", "p"]


# -- the indexes that serve each statement -----------------------------------------------


@contextmanager
def statements(store: SQLStore) -> Iterator[list[tuple[str, Any]]]:
    """The statements run on ``store``'s engine meanwhile, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        seen.append((sql, params[0] if many and params else params))

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)


def _plans(store: SQLStore, seen: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    """Each statement that reads or changes the events table, with its plan."""
    events = store.tables.events.name
    found = []
    with store.engine.connect() as connection:
        raw = connection.connection.driver_connection
        assert raw is not None  # a connected Connection holds its DBAPI connection
        cursor = raw.cursor()
        postgres = connection.dialect.name == "postgresql"
        if postgres:
            cursor.execute("SET enable_seqscan = off")
        for sql, params in seen:
            words = sql.split()
            if events not in words or words[0].upper() not in ("SELECT", "UPDATE", "DELETE"):
                continue
            cursor.execute(("EXPLAIN " if postgres else "EXPLAIN QUERY PLAN ") + sql, params)
            found.append((sql, "\n".join(str(row[0 if postgres else -1]) for row in cursor)))
        connection.rollback()
    return found


def test_every_statement_reaches_the_events_by_an_index(sql_store: SQLStore) -> None:
    memory = ChatMemory(sql_store, TWO_TURNS)
    memory.add("c", Event.system("be brief"))
    # an archive that dwarfs the window, with statistics (PostgreSQL's planner picks among
    # the indexes by them: on empty statistics any index over conversation_ref looks alike)
    sql_store.append("c", [Event.user(f"old {i}") for i in range(1000)])
    version = sql_store.load("c").version
    assert sql_store.apply("c", CompactionPlan(version, archive_through_seq=1001))
    with sql_store.engine.begin() as connection:
        connection.exec_driver_sql(f"ANALYZE {sql_store.tables.events.name}")
    with statements(sql_store) as seen:
        for i in range(4):
            memory.add("c", Event.user(f"question {i}"))
            memory.window("c")
            memory.add(
                "c",
                [
                    Event.tool_call("lookup", {"i": i}, call_id=f"k{i}"),
                    Event.tool_result(f"k{i}", f"result {i}"),
                    Event.assistant(f"answer {i}"),
                ],
            )
        with pytest.raises(InvalidEventError, match="second tool_result"):
            memory.add("c", Event.tool_result("k0", "late"))  # k0 is in the archive
    with statements(sql_store) as later:
        memory.retract("c", [memory.history("c")[2].id])
        sql_store.find_events("c", ["missing"], ["k3"])
    plans = _plans(sql_store, seen + later)
    events = sql_store.tables.events.name
    assert memory.stats("c").archived_events > 0  # compaction ran among them
    for sql, plan in plans:
        assert f"SCAN {events}" not in plan and f"Seq Scan on {events}" not in plan, (sql, plan)
    used = "\n".join(plan for _, plan in plans)
    for index in ("window_idx", "event_key_idx", "call_key_idx"):
        assert f"{events}_{index}" in used, (index, used)
