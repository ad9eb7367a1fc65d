"""The SQL store's statements and transactions per operation, counted on the engine, not timed:
an add of a user message, a window read, a tool call with its result and the reply, a
compacting add (turn window at ratio 1.0 and at the default ratio) and a compaction applied on
its own; on SQLite and PostgreSQL, for SQLStore and the native AsyncSQLStore (the same
transaction bodies). Each test pins a ceiling, so a statement added to a hot path fails here.

Before the statements were prebuilt and merged, a turn at ratio 1.0 took 18 statements on
either database (a compacting add 10, the window 1, the tool turn 7 in two transactions).
Since the tool-pair check runs inside the append (ChecksToolPairs), a tool turn is one
transaction; the hot statements run on the driver's cursor (backends/sql/driver.py) and are
still seen by ``before_cursor_execute``, as counted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from chat_memory import AsyncChatMemory, ChatMemory, Event
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.sql.operations import RECORD_TRIM_EVERY, trims_records
from chat_memory.testing.blocking import run_blocking
from tests.support.helpers import fixed_tokens

STORES = [
    "sqlite_store",
    pytest.param("postgres_store", marks=pytest.mark.postgres),
    "async_sqlite_store",
    pytest.param("async_postgres_store", marks=pytest.mark.postgres),
]
#: The most statements (not counting BEGIN and COMMIT) each operation may take. PostgreSQL
#: takes one more for an append: its row lock and its read are two statements (see
#: SQLOperations._locked); a SQLite write transaction holds the lock from BEGIN IMMEDIATE.
#: A compaction (a compacting add, an apply) also inserts its row of the fork timeline (one
#: INSERT, since schema version 7: docs/lifecycle.md, "Fork"); it was 5, 6 and 4 before.
CEILINGS = {
    "sqlite": {"add": 3, "window": 1, "tool turn": 4, "compacting add": 6, "apply": 5},
    "postgresql": {"add": 4, "window": 1, "tool turn": 5, "compacting add": 7, "apply": 5},
}
#: The record trim, about once in RECORD_TRIM_EVERY compactions: a SELECT and a DELETE.
TRIM = 2
TURN_WINDOW = {"compaction_strategy": "turn_window", "max_turns": 3}


@dataclass
class Count:
    """What one operation sent to the database."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0
    commits: int = 0
    #: BEGIN statements the driver was sent (SQLite: the store sends them itself)
    begins_sent: int = 0

    def updates_of(self, table: sa.Table) -> int:
        return sum(s.startswith(f"UPDATE {table.name} ") for s in self.statements)

    def touches(self, verb: str, table: sa.Table) -> bool:
        return any(s.startswith(verb) and f" {table.name} " in s for s in self.statements)


class Counted:
    """A ChatMemory or AsyncChatMemory on ``store`` whose calls count the engine's statements
    (``before_cursor_execute``, BEGIN and COMMIT left out) and transactions."""

    def __init__(self, store: Any, config: dict[str, Any]) -> None:
        self.store = store
        self.is_async = isinstance(store, AsyncStore)
        self.engine: sa.Engine = store.engine.sync_engine if self.is_async else store.engine
        self.memory: Any = (AsyncChatMemory if self.is_async else ChatMemory)(
            store, config, token_counter=fixed_tokens
        )
        self.count = Count()
        sa.event.listen(self.engine, "before_cursor_execute", self._statement)
        sa.event.listen(self.engine, "begin", self._begin)
        sa.event.listen(self.engine, "commit", self._commit)

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)
        sa.event.remove(self.engine, "begin", self._begin)
        sa.event.remove(self.engine, "commit", self._commit)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        verb = statement.split(None, 1)[0].upper()
        if verb == "BEGIN":
            self.count.begins_sent += 1
        elif verb not in ("COMMIT", "ROLLBACK"):
            self.count.statements.append(" ".join(statement.split()))

    def _begin(self, _conn: Any) -> None:
        self.count.transactions += 1

    def _commit(self, _conn: Any) -> None:
        self.count.commits += 1

    @property
    def ceilings(self) -> dict[str, int]:
        return CEILINGS[self.engine.dialect.name]

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        result = method(*args)
        return run_blocking(result) if self.is_async else result

    def counted(self, method: Callable[..., Any], *args: Any) -> Count:
        return self.counted_with_result(method, *args)[1]

    def counted_with_result(self, method: Callable[..., Any], *args: Any) -> tuple[Any, Count]:
        self.count = Count()
        result = self.call(method, *args)
        return result, self.count


@pytest.fixture(params=STORES)
def sql_store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def counting(sql_store: Any) -> Iterator[Callable[..., Counted]]:
    """Counted memories on the store, with the given settings; schema created already."""
    made: list[Counted] = []

    def make(config: dict[str, Any] | None = None) -> Counted:
        memory = Counted(sql_store, config or {})
        made.append(memory)
        memory.call(memory.memory.add, "warm-up", Event.user("hi"))
        return memory

    yield make
    for memory in made:
        memory.close()


@pytest.fixture
def plain(counting: Callable[..., Counted]) -> Counted:
    """The default settings: no compaction, so an add appends without reading the window."""
    return counting()


def tool_turn(i: int) -> list[Event]:
    call = f"call-{i}"
    return [
        Event.tool_call("lookup", {"n": i}, call_id=call),
        Event.tool_result(call, f"result {i}"),
        Event.assistant(f"answer {i}"),
    ]


def test_an_agent_turn_takes_few_statements_and_one_transaction_per_call(plain):
    plain.call(plain.memory.add, "c", Event.user("hello"))  # the conversation's row
    conversations = plain.store.tables.conversations
    for i in range(3):
        add = plain.counted(plain.memory.add, "c", Event.user(f"question {i}"))
        assert len(add.statements) <= plain.ceilings["add"], add.statements
        assert add.updates_of(conversations) == 1
        assert add.transactions == add.commits == 1

        window = plain.counted(plain.memory.window, "c")
        assert len(window.statements) <= plain.ceilings["window"], window.statements
        assert window.transactions == 1
        assert window.begins_sent == 0  # one SELECT: SQLite needs no BEGIN for it

        tools = plain.counted(plain.memory.add, "c", tool_turn(i))
        assert len(tools.statements) <= plain.ceilings["tool turn"], tools.statements
        assert tools.updates_of(conversations) == 1
        # the tool-pair check looks its events up inside the append's own transaction
        assert tools.transactions == tools.commits == 1
        assert tools.begins_sent == add.begins_sent  # the write's BEGIN IMMEDIATE alone


def test_a_compacting_tool_turn_checks_its_pairs_on_the_window_it_locked(counting):
    """With a compaction strategy the append reads the window under its lock; the tool-pair
    check finds the calls it needs there, with no look-up of its own."""
    memory = counting(TURN_WINDOW)
    memory.call(memory.memory.add, "c", Event.user("hello"))
    tools = memory.counted(memory.memory.add, "c", tool_turn(0)[:1])  # the call
    answer = memory.counted(memory.memory.add, "c", [Event.tool_result("call-0", "done")])
    for count in (tools, answer):
        assert count.transactions == count.commits == 1
        assert not any("_events.archived, " in s for s in count.statements), count.statements


def test_a_duplicate_add_writes_nothing(plain):
    event = Event.user("once")
    plain.call(plain.memory.add, "c", event)
    again = plain.counted(plain.memory.add, "c", event)
    assert not any(s.startswith(("INSERT", "UPDATE", "DELETE")) for s in again.statements)


@pytest.mark.parametrize("ratio", [1.0, None], ids=["ratio 1.0", "default ratio"])
def test_a_compacting_add_writes_the_conversation_row_once(sql_store, counting, ratio):
    config = dict(TURN_WINDOW) if ratio is None else {**TURN_WINDOW, "compact_to_ratio": ratio}
    memory = counting(config)
    tables = sql_store.tables
    memory.call(memory.memory.add, "c", tool_turn(-1))  # the conversation's row
    compacting = 0
    for i in range(12):
        add = memory.counted(memory.memory.add, "c", Event.user(f"question {i}"))
        compacted = add.touches("UPDATE", tables.events)
        compacting += compacted
        ceiling = memory.ceilings["compacting add" if compacted else "add"]
        trimmed = add.touches("SELECT", tables.compactions)
        assert len(add.statements) - TRIM * trimmed <= ceiling, add.statements
        # the version, last seq, counters and error of the append and the compaction
        assert add.updates_of(tables.conversations) == 1, add.statements
        assert add.transactions == 1
        memory.call(memory.memory.add, "c", tool_turn(i))
    # nearly every add compacts at ratio 1.0; about every other one at the default
    assert compacting >= (9 if ratio == 1.0 else 4)


def test_a_compaction_applied_alone_reads_the_row_once_and_writes_it_once(sql_store, counting):
    memory = counting()
    memory.call(memory.memory.add, "c", [Event.user("q"), Event.assistant("a")])
    version = memory.call(sql_store.load, "c").version
    plan = CompactionPlan(version, archive_through_seq=1, record={"n": 1})
    applied, count = memory.counted_with_result(sql_store.apply, "c", plan)
    assert applied is True
    assert len(count.statements) <= memory.ceilings["apply"], count.statements
    assert count.updates_of(sql_store.tables.conversations) == 1
    assert sum(s.startswith("SELECT") for s in count.statements) == 1
    snapshot = memory.call(sql_store.load, "c")
    assert (snapshot.version, snapshot.archived_count) == (version + 1, 1)
    assert memory.call(sql_store.apply, "c", plan) is False  # the version moved on


# -- the record trim ---------------------------------------------------------------------


def test_the_record_trim_runs_for_any_pattern_of_writes():
    """About one compaction in RECORD_TRIM_EVERY trims, whatever the step between the
    versions at which a conversation compacts (a rule on the version alone would miss some)."""
    for ref in (1, 2, 7):
        for step in range(1, 2 * RECORD_TRIM_EVERY + 1):
            trims = sum(trims_records(ref, 2 + k * step) for k in range(800))
            assert 800 / RECORD_TRIM_EVERY / 2 < trims < 800 / RECORD_TRIM_EVERY * 2, (ref, step)


def test_compactions_return_the_newest_records_while_the_table_is_trimmed_now_and_then(
    sqlite_store,
):
    kept = sqlite_store.compaction_records_kept
    sqlite_store.append("c", [Event.user("q")])
    records = sqlite_store.tables.compactions
    for n in range(kept + 6 * RECORD_TRIM_EVERY):
        sqlite_store.append("c", [Event.assistant(f"a{n}")])
        version = sqlite_store.load("c").version
        assert sqlite_store.apply("c", CompactionPlan(version, 0, record={"n": n}))
    total = kept + 6 * RECORD_TRIM_EVERY
    assert [r["n"] for r in sqlite_store.compactions("c")] == list(range(total - kept, total))
    with sqlite_store.engine.connect() as connection:
        stored = connection.execute(sa.select(sa.func.count()).select_from(records)).scalar_one()
    assert kept <= stored < total  # trimmed, though not at every compaction
