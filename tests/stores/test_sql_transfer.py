"""Fork, dump and restore on the SQL stores (chat_memory.backends.sql.transfer) against real
SQLite and PostgreSQL, sync and native async: the transfer conformance suite, the fork
property test over random traffic, the timeline the compaction and retraction transactions
write (the same as memory://'s), a fork copied in the database (its statements do not grow
with the conversation), a conversation stored before schema version 7, refused dumps, and a
copy SQLite -> PostgreSQL -> memory:// -> SQLite that keeps everything."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.sql import AsyncSQLStore, SQLStore
from chat_memory.backends.timeline import ConversationDump
from chat_memory.errors import ConcurrencyError, InvalidInputError
from chat_memory.lifecycle.keys import Scope, scoped_key
from chat_memory.testing.blocking import run_blocking
from chat_memory.testing.transfer_conformance import (
    TransferConformance,
    _memory,
    _summarize,
    _tokens,
    _traffic,
    _turn,
)
from chat_memory.transfer import copy_store
from tests.support.forks import OPERATIONS, STRATEGIES, summarize
from tests.support.forks import traffic as _random_traffic
from tests.support.helpers import fixed_tokens

URLS = ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
#: a sync store and the native async store on the same database (the fixtures share its URL)
PAIRS = [
    ("sqlite_store", "async_sqlite_store"),
    pytest.param("postgres_store", "async_postgres_store", marks=pytest.mark.postgres),
]


@pytest.fixture(params=URLS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


def _other_url(url: str, tmp_path: Path) -> str:
    """Another empty database of the same kind: a second SQLite file, or another prefix."""
    if url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'second.db'}"
    return f"{url.rsplit('table_prefix=', 1)[0]}table_prefix=t{uuid.uuid4().hex[:12]}_"


@pytest.fixture
def sql(sql_url: str) -> Iterator[SQLStore]:
    store = SQLStore.from_url(sql_url)
    yield store
    store.close()


class TestSQLTransfer(TransferConformance):
    @pytest.fixture
    def store(self, sql: SQLStore) -> SQLStore:
        return sql

    @pytest.fixture
    def second_store(self, sql_url: str, tmp_path: Path) -> Iterator[SQLStore]:
        store = SQLStore.from_url(_other_url(sql_url, tmp_path))
        yield store
        store.close()


@pytest.mark.parametrize(("sync_name", "async_name"), PAIRS)
def test_the_native_async_store_forks_dumps_and_restores_as_the_sync_one(
    request: pytest.FixtureRequest, sync_name: str, async_name: str
) -> None:
    store: SQLStore = request.getfixturevalue(sync_name)
    native: AsyncSQLStore = request.getfixturevalue(async_name)
    memory = _memory(store)
    seen = _traffic(memory, "conv")
    expected = store.dump("conv")
    assert expected is not None

    async def run() -> None:
        async_memory = AsyncChatMemory(native, memory.config, _summarize, _tokens)
        for seq, window in seen.items():
            assert await async_memory.fork("conv", f"async-{seq}", at=seq) == window, seq
        dump = await native.dump("conv")
        assert dump is not None and dump.checksum() == expected.checksum()
        await native.restore(dump.renamed("restored"))
        with pytest.raises(InvalidInputError, match="'restored'"):
            await native.restore(dump.renamed("restored"))
        assert await native.dump("missing") is None

    run_blocking(run())
    assert memory.history("restored", include_retracted=True) == memory.history(
        "conv", include_retracted=True
    )
    assert memory.window("restored") == memory.window("conv")
    restored = store.dump("restored")
    assert restored is not None and restored.checksum() == expected.checksum()


def test_the_transactions_write_the_timeline_memory_writes(sql_url: str) -> None:
    """The same traffic leaves the same timeline on SQL as on memory:// (compactions in the
    append's transaction and in apply, a retraction, a pin the archive cap deleted)."""
    reference = InMemoryStore(max_archived_events=3)
    with SQLStore.from_url(sql_url, max_archived_events=3) as capped:
        for store in (reference, capped):
            memory = _memory(store, "turn_window")
            _traffic(memory, "conv")
            memory.compact("conv", force=True)
        ours, theirs = capped.dump("conv"), reference.dump("conv")
    assert ours is not None and theirs is not None
    assert {entry["kind"] for entry in ours.timeline} == {"compaction", "retraction", "dropped_pin"}
    assert ours.timeline == theirs.timeline and ours.timeline_from == 0
    assert [(e.seq, e.type, e.archived, e.retracted) for e in ours.events] == [
        (e.seq, e.type, e.archived, e.retracted) for e in theirs.events
    ]


def test_a_fork_is_copied_in_the_database_whatever_the_length(sql: SQLStore) -> None:
    """The statements of a fork at a past seq do not grow with the conversation: the events
    are copied by INSERT … SELECT, not read and written back."""
    memory = _memory(sql, "turn_window")
    counts = []
    for cid, turns in (("short", 8), ("long", 32)):
        for i in range(turns):
            memory.add(cid, _turn(i, call=i % 5 == 1))
        statements: list[str] = []

        def count(*args: Any) -> None:
            statements.append(args[2])

        sa.event.listen(sql.engine, "before_cursor_execute", count)
        try:
            memory.fork(cid, f"{cid}-fork", at=sql.load(cid).last_seq - 3)
        finally:
            sa.event.remove(sql.engine, "before_cursor_execute", count)
        counts.append(len([s for s in statements if s.split()[0] not in ("BEGIN", "COMMIT")]))
    # about 15 (PostgreSQL: two more, the erasure guard's shared advisory locks)
    assert counts[0] == counts[1] <= 18, counts


def _drop_timelines(store: SQLStore) -> None:
    """Make the database look as an older chat-memory (schema version 6) left it: no timeline
    table (its columns on conversations are left: the migration adds only missing ones)."""
    meta = store.tables.meta
    with store.engine.begin() as connection:
        store.tables.timeline.drop(connection)
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="6"))


def test_a_conversation_stored_before_version_7_forks_from_where_its_timeline_starts(
    sql_url: str,
) -> None:
    with SQLStore.from_url(sql_url) as old:
        memory = _memory(old, "turn_window")
        _traffic(memory, "old", turns=5)  # compactions and a retraction
        _memory(old, "none").add("plain", [Event.user("one"), Event.assistant("two")])
        then = memory.window("old"), memory.history("old", include_retracted=True)
        _drop_timelines(old)
    with SQLStore.from_url(sql_url) as store:
        memory = _memory(store, "turn_window")
        dump = store.dump("old")
        assert dump is not None and dump.timeline_from == dump.last_seq
        # what the migration wrote: the state at its last seq, in two entries
        assert [e["kind"] for e in dump.timeline] == ["compaction", "retraction"]
        with pytest.raises(
            InvalidInputError, match=rf"at \(3\) is before.*from seq {dump.last_seq}"
        ):
            memory.fork("old", "f", at=3)
        # later traffic compacts again: the state at timeline_from still rebuilds exactly
        memory.add("old", [Event.user("more"), Event.assistant("ok")])
        memory.add("old", [Event.user("again"), Event.assistant("ok")])
        assert memory.fork("old", "then", at=dump.last_seq) == then[0]
        assert memory.history("then", include_retracted=True) == then[1]
        plain = store.dump("plain")
        assert plain is not None and plain.timeline_from == 2 and not plain.timeline
        # where the timeline starts survives a copy
        target = InMemoryStore()
        copy_store(store, target, conversations=["old"])
        moved, later = target.dump("old"), store.dump("old")
        assert moved is not None and later is not None
        assert moved.timeline_from == dump.last_seq and moved.checksum() == later.checksum()


def test_a_dump_that_is_not_one_conversation_is_refused_naming_it(sql: SQLStore) -> None:
    memory = _memory(sql)
    _traffic(memory, "conv", turns=4)
    dump = sql.dump("conv")
    assert dump is not None
    twice = ConversationDump("twice", dump.last_seq, (*dump.events, dump.events[0]))
    with pytest.raises(InvalidInputError, match=r"'twice'.*seq 1, not a seq of its own"):
        sql.restore(twice)
    summary = next(e for e in dump.events if e.type.value == "summary" and not e.archived)
    other = summary.model_copy(update={"seq": dump.last_seq + 1})
    two = ConversationDump("two", dump.last_seq + 1, (*dump.events, other))
    with pytest.raises(InvalidInputError, match="'two'.*two summaries in force"):
        sql.restore(two)
    odd = ConversationDump("odd", 0, (), timeline=({"kind": "rename"},))
    with pytest.raises(InvalidInputError, match="'odd'.*no known kind"):
        sql.restore(odd)
    assert sorted(sql.conversations()) == ["conv"]
    # a conversation being erased is not created again by a restore or a fork
    sql.erase("conv", 30)
    with pytest.raises(ConcurrencyError, match="'conv' is being erased"):
        sql.restore(dump)


@pytest.mark.postgres
def test_copy_sqlite_to_postgresql_to_memory_to_sqlite_keeps_everything(
    sqlite_store: SQLStore, postgres_store: SQLStore, tmp_path: Path
) -> None:
    memory = _memory(sqlite_store)
    _traffic(memory, "conv")
    sqlite_store.record_compaction_error("conv", "summarizer timed out")
    alice = memory.for_user("alice", app="support")
    _traffic(alice, "chat", turns=3)
    alice.set_metadata("chat", title="First chat", tags=["billing", "vip"], priority="high")
    alice.fork("chat", "chat-retry", at=4)
    back = SQLStore.from_url(f"sqlite:///{tmp_path / 'back.db'}")
    try:
        hops = [sqlite_store, postgres_store, InMemoryStore(), back]
        reports = [copy_store(a, b) for a, b in zip(hops, hops[1:])]
        assert [r.conversations for r in reports] == [3, 3, 3]
        assert reports[0].checksums == reports[1].checksums == reports[2].checksums
        for store in hops[1:]:
            there = _memory(store)
            for cid in sqlite_store.conversations():
                original, copied = sqlite_store.dump(cid), store.dump(cid)
                assert original is not None and copied is not None
                assert (
                    copied.checksum() == original.checksum()
                    and copied.counts() == original.counts()
                )
                assert there.history(cid, include_retracted=True) == memory.history(
                    cid, include_retracted=True
                )
                assert there.window(cid) == memory.window(cid)
                assert there.compactions(cid) == memory.compactions(cid)
            moved = there.for_user("alice", app="support")
            assert moved.conversations() == alice.conversations()
            assert moved.conversations(tag="vip")[0].metadata == {"priority": "high"}
            assert moved.store.load("conv").compaction_error is None  # another user's "conv"
            assert there.store.load("conv").compaction_error == "summarizer timed out"
        copied = back.dump("conv")
        assert copied is not None
        counts = copied.counts()
        assert counts["retracted"] and counts["summaries"] > 1 and counts["records"]
    finally:
        back.close()


# -- the fork property test (tests/engine/test_fork.py) on SQL --------------------------------

SYNC_STORES = ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("name", SYNC_STORES)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    config=st.sampled_from(STRATEGIES),
    operations=OPERATIONS,
    cap=st.sampled_from([None, 4]),
)
def test_a_fork_at_any_seq_shows_exactly_the_window_and_history_then(
    request: pytest.FixtureRequest,
    name: str,
    config: dict[str, Any],
    operations: list[tuple[str, Any, int]],
    cap: int | None,
) -> None:
    """Each example in a scope of its own (one database per test): the forks match the windows
    recorded at every seq, or are refused exactly where memory:// refuses them (the archive
    cap deleted their past), and the timeline and flags are memory://'s for the same traffic."""
    fixture: SQLStore = request.getfixturevalue(name)
    store = SQLStore(fixture.engine, table_prefix=fixture.tables.prefix, max_archived_events=cap)
    user = uuid.uuid4().hex
    memory = ChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens).for_user(user)
    seen = _random_traffic(memory, operations)
    reference_store = InMemoryStore(max_archived_events=cap)
    reference = ChatMemory(reference_store, MemoryConfig(**config), summarize, fixed_tokens)
    _random_traffic(reference, operations)
    for seq, (window, history) in seen.items():
        if not seq:
            continue
        try:
            reference.fork("c", f"fork-{seq}", at=seq)
        except InvalidInputError as refused:
            with pytest.raises(InvalidInputError) as ours:
                memory.fork("c", f"fork-{seq}", at=seq)
            assert str(ours.value) == str(refused)
            continue
        memory.fork("c", f"fork-{seq}", at=seq)
        assert memory.model_window(f"fork-{seq}") == window, seq
        if cap is None:
            assert memory.history(f"fork-{seq}") == history, seq
        else:  # the events the cap deleted since are gone from the history (and from memory://'s)
            assert _shape(memory.history(f"fork-{seq}")) == _shape(reference.history(f"fork-{seq}"))
    # the user's "c" on SQL (the bound memory's store is the scoped view of `store`)
    ours, theirs = store.dump(scoped_key(Scope(user), "c")), reference_store.dump("c")
    if theirs is None:  # nothing was added
        assert ours is None
        return
    assert ours.timeline == theirs.timeline
    assert _shape(ours.events) == _shape(theirs.events)


def _shape(events: Any) -> list[tuple[Any, ...]]:
    """What two stores given the same traffic agree on (ids and times are each run's own)."""
    return [(e.seq, e.type, e.content, e.archived, e.retracted) for e in events]


@pytest.mark.parametrize(("sync_name", "async_name"), PAIRS)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=st.sampled_from(STRATEGIES[1:]), operations=OPERATIONS)
def test_a_native_async_fork_at_any_seq_shows_exactly_the_window_then(
    request: pytest.FixtureRequest,
    sync_name: str,
    async_name: str,
    config: dict[str, Any],
    operations: list[tuple[str, Any, int]],
) -> None:
    store: SQLStore = request.getfixturevalue(sync_name)
    native: AsyncSQLStore = request.getfixturevalue(async_name)
    user = uuid.uuid4().hex
    sync_memory = ChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens)
    seen = _random_traffic(sync_memory.for_user(user), operations)

    async def check() -> None:
        memory = AsyncChatMemory(native, MemoryConfig(**config), summarize, fixed_tokens)
        bound = memory.for_user(user)
        for seq, (window, history) in seen.items():
            if seq:
                await bound.fork("c", f"fork-{seq}", at=seq)
                assert await bound.model_window(f"fork-{seq}") == window, seq
                assert await bound.history(f"fork-{seq}") == history, seq

    run_blocking(check())
