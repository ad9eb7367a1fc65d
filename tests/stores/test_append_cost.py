"""What an ``add()`` reads, counted (not timed): on a store with the
:class:`~chat_memory.backends.base.AppendsWithoutWindow` ability, an add under strategy
``none`` on a long history (3,000 events on every store; 30,000 under ``CHAT_MEMORY_FULL=1``
and in the single-store tests) reads and parses about as many events as it holds (the tool-pair
check and the append look the batch's ids up by index), whether the batch is a user message
and a reply, a tool call, its result, a retry, or a late result of an archived call. The old
path read the whole window (30,000 events) once or twice per add.

Also: the SQL schema migration 3 -> 4 that adds the indexed keys, and the Redis tool-call
index, rebuilt when an older chat-memory left it behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig, open_async_store
from chat_memory.backends.base import AppendsWithoutWindow, CompactionPlan, Snapshot, Store
from chat_memory.backends.sql import SQLStore
from chat_memory.errors import InvalidEventError
from tests.fixtures.reliability import full_size_requested
from tests.support.helpers import fixed_tokens

NONE = MemoryConfig(compaction_strategy="none")
LONG = 30_000
#: What an add may parse or receive from the store, whatever the conversation's length: a
#: few times its batch (the batch's own round trip through JSON, the stored copies back).
BOUND = 12
#: The history of the tests run on every store: 250 times BOUND already tells a read of the
#: batch from a read of the window, at a tenth of LONG's cost (about 150 s of the main run).
EVERY_STORE_LONG = LONG if full_size_requested() else 3_000


def long_history(n: int = LONG) -> list[Event]:
    """``n`` events with their token counts: turns of a user message, a tool call, its result
    and a reply."""
    events: list[Event] = []
    while len(events) < n:
        k = len(events)
        call_id = f"old-{k}"
        events += [
            Event.user(f"question {k}", tokens=2),
            Event.tool_call("lookup", {"k": k}, call_id=call_id, tokens=3),
            Event.tool_result(call_id, f"result {k}", name="lookup", tokens=2),
            Event.assistant(f"answer {k}", tokens=2),
        ]
    return events[:n]


class Reads:
    """Counts the envelopes parsed (``Event.from_json``) and the events the engine receives
    from the store, while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: Any) -> None:
        self.parsed = self.received = 0
        self.active = False
        original = Event.from_json.__func__  # type: ignore[attr-defined]

        def from_json(cls: type[Event], data: Any) -> Event:
            self.parsed += self.active
            return original(cls, data)

        monkeypatch.setattr(Event, "from_json", classmethod(from_json))
        for name in (
            "load",
            "append",
            "append_without_window",
            "find_events",
            "find_tool_events",
            "history",
        ):
            method = getattr(store, name, None)
            if method is not None:
                monkeypatch.setattr(store, name, self._counting(method))

    def _counting(self, method: Any) -> Any:
        def counted(*args: Any) -> Any:
            result = method(*args)
            if self.active:
                self.received += _size(result)
            return result

        return counted

    def add(self, memory: ChatMemory, cid: str, events: list[Event]) -> list[Event]:
        self.parsed = self.received = 0
        self.active = True
        try:
            return memory.add(cid, events)
        finally:
            self.active = False


def _size(result: Any) -> int:
    if isinstance(result, Snapshot):
        return len(result.window.pinned) + len(result.window.active)
    if isinstance(result, tuple):
        return sum(_size(r) for r in result)
    return len(result) if isinstance(result, list) else 0


@pytest.fixture
def lean_store(store: Store) -> Store:
    if not isinstance(store, AppendsWithoutWindow):
        pytest.skip(f"{type(store).__name__} has no append without the window (see docs/stores.md)")
    return store


def test_an_add_to_a_long_history_reads_its_batch_not_the_history(lean_store, monkeypatch):
    store, n = lean_store, EVERY_STORE_LONG
    store.append("long", long_history(n))
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    reads = Reads(monkeypatch, store)

    turn = [Event.user("one more question"), Event.assistant("one more answer")]
    assert [e.seq for e in reads.add(memory, "long", turn)] == [n + 1, n + 2]
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)

    call = Event.tool_call("lookup", {"q": "new"}, call_id="new-call")
    assert reads.add(memory, "long", [call])[0].seq == n + 3
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)

    result = Event.tool_result("new-call", "found it")  # named after its call, looked up by id
    stored = reads.add(memory, "long", [result])
    assert stored[0].seq == n + 4 and stored[0].tool_name == "lookup"
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)

    again = reads.add(memory, "long", [*turn, call, result])  # a retry: stored once
    assert [e.seq for e in again] == [n + 1, n + 2, n + 3, n + 4]
    assert reads.parsed <= 3 * BOUND and reads.received <= 3 * BOUND, (reads.parsed, reads.received)

    with pytest.raises(InvalidEventError, match="already in the window"):
        reads.add(memory, "long", [Event.tool_call("lookup", {}, call_id=f"old-{n - 4}")])
    with pytest.raises(InvalidEventError, match="second tool_result"):
        reads.add(memory, "long", [Event.tool_result("new-call", "again")])
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)
    assert memory.stats("long").active_events == n + 4


def test_a_late_result_of_an_archived_call_reads_the_call_not_the_archive(lean_store, monkeypatch):
    store, n = lean_store, EVERY_STORE_LONG
    store.append(
        "late", [*long_history(n), Event.tool_call("lookup", {}, call_id="late", tokens=1)]
    )
    store.append("late", [Event.user("next", tokens=1)])
    snapshot = store.load("late")
    plan = CompactionPlan(snapshot.version, archive_through_seq=n + 1, max_archived_events=n + 1)
    assert store.apply("late", plan)
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    reads = Reads(monkeypatch, store)
    stored = reads.add(memory, "late", [Event.tool_result("late", "finally")])
    assert stored[0].tool_name == "lookup" and stored[0].seq == n + 3
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)
    with pytest.raises(InvalidEventError, match=r"second tool_result .* \(seq 3, archived\)"):
        reads.add(memory, "late", [Event.tool_result("old-0", "again")])
    with pytest.raises(InvalidEventError, match="matches no tool_call"):
        reads.add(memory, "late", [Event.tool_result("never-called", "?")])
    assert reads.parsed <= BOUND and reads.received <= BOUND, (reads.parsed, reads.received)


def test_a_redis_add_runs_no_whole_list_read_on_the_server(redis_store):
    """Server side: the lean add's scripts fetch elements by index, never a whole list
    (``LRANGE``/``ZRANGE``, what reading the window or the history takes), as the server's
    own command counters show."""
    store = redis_store
    store.append("long", long_history())
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)

    def whole_reads() -> int:
        stats = store.client.info("commandstats")
        return sum(
            stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("lrange", "zrange")
        )

    before = whole_reads()
    memory.add("long", [Event.user("q"), Event.assistant("a")])
    memory.add("long", [Event.tool_call("lookup", {}, call_id="c"), Event.tool_result("c", "r")])
    assert whole_reads() == before


def test_a_sqlite_add_runs_few_vm_steps_whatever_the_history(sqlite_store):
    """Server side on SQLite: the statements of an add (the id look-ups by index, the insert)
    run 60-180 virtual-machine steps, counted by SQLite's progress handler; reading the
    30,000-event window took 330,000 per read (a tool call or result: two reads)."""
    store = sqlite_store
    store.append("long", long_history())
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    steps = [0]
    counting = [False]

    def tick() -> int:
        steps[0] += counting[0]
        return 0

    @sa.event.listens_for(store.engine, "checkout")
    def _count_steps(dbapi_connection: Any, *_: Any) -> None:
        dbapi_connection.set_progress_handler(tick, 10)

    store.engine.dispose()  # pooled connections come back through checkout, counting
    for batch in (
        [Event.user("q"), Event.assistant("a")],
        [Event.tool_call("lookup", {}, call_id="c")],
        [Event.tool_result("c", "r")],
        [Event.tool_result("old-29996", "late")],
    ):
        steps[0], counting[0] = 0, True
        try:
            memory.add("long", batch)
        except InvalidEventError:
            assert batch[0].tool_call_id == "old-29996"  # answered already: refused
        counting[0] = False
        assert steps[0] * 10 <= 5_000, (batch[0].type, steps[0] * 10)


@pytest.mark.parametrize("name", [pytest.param("redis_url", marks=pytest.mark.redis), "sqlite_url"])
def test_the_native_async_stores_add_without_reading_the_window(request, monkeypatch, name):
    parsed = 0
    original = Event.from_json.__func__  # type: ignore[attr-defined]

    def from_json(cls: type[Event], data: Any) -> Event:
        nonlocal parsed
        parsed += 1
        return original(cls, data)

    async def run() -> list[int]:
        nonlocal parsed
        store = open_async_store(request.getfixturevalue(name), threads=False)
        try:
            await store.append("long", long_history(10_000))
            memory = AsyncChatMemory(store, NONE, token_counter=fixed_tokens)
            monkeypatch.setattr(Event, "from_json", classmethod(from_json))
            parsed = 0
            call = Event.tool_call("lookup", {}, call_id="c")
            stored = await memory.add("long", [Event.user("q"), call, Event.tool_result("c", "r")])
            return [e.seq or 0 for e in stored]
        finally:
            await store.aclose()

    assert asyncio.run(run()) == [10_001, 10_002, 10_003]
    assert parsed <= BOUND, parsed


# -- the indexes themselves ---------------------------------------------------------------


@pytest.fixture(params=["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)])
def sql_url(request) -> str:
    return request.getfixturevalue(request.param)


def _as_version_3(store: SQLStore) -> None:
    """Turn the tables back into schema version 3: no event_key, call_key or their indexes."""
    events = store.tables.events
    with store.engine.begin() as connection:
        for index in ("events_event_key_idx", "events_call_key_idx"):
            connection.exec_driver_sql(f"DROP INDEX {store.tables.prefix}{index}")
        for column in ("event_key", "call_key"):
            connection.exec_driver_sql(f"ALTER TABLE {events.name} DROP COLUMN {column}")
        meta = store.tables.meta
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="3"))


def test_a_version_3_database_gets_its_ids_indexed_in_place(sql_url):
    history = long_history(8)
    with SQLStore.from_url(sql_url) as old:
        old.append("c", [*history, Event.tool_call("lookup", {}, call_id="open", tokens=1)])
        assert old.apply("c", CompactionPlan(old.load("c").version, archive_through_seq=4))
        _as_version_3(old)
    with SQLStore.from_url(sql_url) as store:
        memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
        assert [e.seq for e in memory.add("c", [Event.tool_result("open", "done")])] == [10]
        with pytest.raises(InvalidEventError, match=r"second tool_result .* \(seq 3, archived\)"):
            memory.add("c", [Event.tool_result("old-0", "again")])
        retried = history[5]  # in the window: stored before, returned as it was
        assert [e.seq for e in store.append_without_window("c", [retried])] == [6]
        with store.engine.begin() as connection:
            events = store.tables.events
            unkeyed = connection.execute(
                sa.select(sa.func.count()).where(events.c.event_key.is_(None))
            ).scalar_one()
            calls = connection.execute(
                sa.select(sa.func.count()).where(events.c.call_key.is_not(None))
            ).scalar_one()
            recorded = dict(
                connection.execute(
                    sa.select(store.tables.meta.c.name, store.tables.meta.c.value)
                ).all()
            )
        assert unkeyed == 0 and calls == 2 + 2 + 1 + 1  # two pairs, the open call and its result
        assert recorded["schema_version"] == "8" and recorded["migrated_to_4"].endswith(
            "(event_key, call_key)"
        )
        indexes = {index["name"] for index in sa.inspect(store.engine).get_indexes(events.name)}
        assert {
            f"{store.tables.prefix}events_event_key_idx",
            f"{store.tables.prefix}events_call_key_idx",
        } <= indexes


@pytest.fixture(params=["fakeredis_store", pytest.param("redis_store", marks=pytest.mark.redis)])
def any_redis(request) -> Iterator[Any]:
    yield request.getfixturevalue(request.param)


def test_a_redis_tool_call_index_left_behind_is_not_trusted_and_is_rebuilt(any_redis):
    """An older chat-memory appends without keeping the index (simulated: the index and its
    mark deleted, as after such a write): the tool-pair check reads the history instead, and
    the next append rebuilds the index from the window and the archive."""
    store = any_redis
    store.append("c", long_history(40))
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=20))
    meta, calls = store._keys("c")[0], store._keys("c")[8]
    store.client.delete(calls)
    store.client.hdel(meta, "calls_indexed")
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    with pytest.raises(InvalidEventError, match=r"second tool_result .* \(seq 3, archived\)"):
        memory.add("c", [Event.tool_result("old-0", "again")])
    with pytest.raises(InvalidEventError, match=r"already in the window .* seq 38"):
        memory.add("c", [Event.tool_call("lookup", {}, call_id="old-36")])
    memory.add("c", [Event.user("after")])
    assert store.client.hlen(calls) == 10 and store.client.hget(meta, "calls_indexed") == b"41"
    assert [e.seq for e in store.find_tool_events("c", ["old-0", "old-36"])] == [2, 3, 38, 39]


def test_the_redis_archive_cap_takes_dropped_events_out_of_the_tool_call_index(any_redis):
    store = any_redis
    store.append("c", long_history(40))
    assert store.apply(
        "c", CompactionPlan(store.load("c").version, archive_through_seq=36, max_archived_events=4)
    )
    calls = store._keys("c")[8]
    assert store.client.hlen(calls) == 2  # old-32 (archived, kept) and old-36 (active)
    assert [e.seq for e in store.find_tool_events("c", ["old-0", "old-32", "old-36"])] == [
        34,
        35,
        38,
        39,
    ]


# -- S3: requests and bytes on the wire ---------------------------------------------------


class S3Traffic:
    """Requests and body bytes (sent and received) of one boto3 client, while active."""

    def __init__(self, client: Any) -> None:
        self.requests = self.sent = self.received = 0
        self.active = False
        client.meta.events.register_first("before-send.s3", self._sent)
        client.meta.events.register("after-call.s3", self._answered)
        client.meta.events.register("after-call-error.s3", self._answered)

    def _sent(self, request: Any, **_: Any) -> None:
        if self.active:
            self.requests += 1
            self.sent += int(request.headers.get("Content-Length") or 0)

    def _answered(self, http_response: Any = None, **_: Any) -> None:
        if self.active and http_response is not None:
            self.received += int(http_response.headers.get("Content-Length") or 0)

    def add(self, memory: ChatMemory, cid: str, events: list[Event]) -> tuple[int, int]:
        """``memory.add`` counted: (requests, bytes sent and received)."""
        self.requests = self.sent = self.received = 0
        self.active = True
        try:
            memory.add(cid, events)
        finally:
            self.active = False
        return self.requests, self.sent + self.received


#: What an S3 add may move at 30,000 events: the head (a tail of at most 256 events and one
#: manifest entry with a Bloom filter per 256 sealed events, 135 KiB here) up and, for an add
#: holding tool events, down (the tool-pair check reads it), plus the window segment (or a
#: rare false positive of a filter) a look-up fetches. Measured: 1 request and 139 KB for a
#: turn, 2-4 requests and 149-288 KB with tool events or a retry. The window every add
#: wrote before is 4.7 MB.
S3_BYTES = 512 * 1024


def test_an_s3_add_at_30_000_events_moves_the_head_not_the_window(s3_server_store):
    store = s3_server_store
    events = long_history()
    store.append("long", events)
    head = store._read_head("long")[0]
    window_bytes = sum(len(e.model_dump_json()) for e in store.load("long").window.active)
    assert len(head.active) <= store.tail_events and len(head.window) == LONG // store.tail_events
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    traffic = S3Traffic(store.client)
    call = Event.tool_call("lookup", {"q": "new"}, call_id="new-call")
    for batch in (
        [Event.user("one more question"), Event.assistant("one more answer")],
        [call],
        [Event.tool_result("new-call", "found it")],
        [call],  # a retry: found in the tail
        [events[5]],  # a retry of an event sealed long ago: found through its segment's filter
    ):
        requests, moved = traffic.add(memory, "long", batch)
        assert requests <= 4 and moved <= S3_BYTES, (batch[0].type, requests, moved)
    assert window_bytes > 8 * S3_BYTES
    assert memory.stats("long").active_events == LONG + 4
