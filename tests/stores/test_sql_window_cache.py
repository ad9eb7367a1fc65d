"""The SQL store's window cache (chat_memory/backends/sql/window_cache.py): a turn reads the
window rows only when they changed, and a cached window is never stale, whichever store (a
process of its own, here a store with a cache of its own on one database) wrote last.
Counted and compared, not timed."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.sql import SQLStore
from chat_memory.backends.sql.window_cache import WindowCache
from chat_memory.errors import InvalidInputError
from chat_memory.events import Window
from chat_memory.testing.blocking import run_blocking
from tests.support.forks import STRATEGIES, summarize
from tests.support.forks import turn as forks_turn
from tests.support.helpers import fixed_tokens, turn

SYNC_STORES = ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]
STORES = [
    *SYNC_STORES,
    "async_sqlite_store",
    pytest.param("async_postgres_store", marks=pytest.mark.postgres),
]
TURN_WINDOW = MemoryConfig(compaction_strategy="turn_window", max_turns=3)
_examples = itertools.count()


def sibling(store: Any, **options: Any) -> SQLStore:
    """Another SQLStore (its own cache, as another process has) on ``store``'s tables: on
    its engine, or on an engine of its own with the sync driver for an async store."""
    if not isinstance(store, AsyncStore):
        return SQLStore(store.engine, table_prefix=store.tables.prefix, **options)
    url = store.engine.url
    if url.get_backend_name() == "sqlite":
        url = url.set(drivername="sqlite")
    address = url.render_as_string(hide_password=False)
    return SQLStore(address, table_prefix=store.tables.prefix, **options)


def uncached(store: Any) -> SQLStore:
    """A store on the same tables that keeps no window: every load reads the rows."""
    fresh = sibling(store)
    fresh.ops.windows = WindowCache(conversations=0)
    return fresh


class WindowRows:
    """Counts the window rows (rows with a body) the store's window statements return, and
    the statements sent to the database."""

    def __init__(self, store: Any) -> None:
        self.ops = store.ops
        self.engine = store.engine.sync_engine if isinstance(store, AsyncStore) else store.engine
        self.rows = self.statements = 0
        window_statements = (self.ops.sql.window_with_state, self.ops.sql.window_unless_cached)
        rows = self.ops.driver.rows

        def counted(connection: Any, statement: Any, params: Any) -> list[Any]:
            found = rows(connection, statement, params)
            if any(statement is s for s in window_statements):
                self.rows += sum(row[9] is not None for row in found)
            return found

        self.ops.driver.rows = counted  # this store's driver only
        sa.event.listen(self.engine, "before_cursor_execute", self._statement)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.split(None, 1)[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
            self.statements += 1

    def take(self) -> tuple[int, int]:
        """(window rows, statements) since the last take."""
        counts = (self.rows, self.statements)
        self.rows = self.statements = 0
        return counts

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def counted(any_store: Any) -> Iterator[tuple[Any, WindowRows]]:
    """A memory (sync or async, called alike) on the store, and its counts."""
    is_async = isinstance(any_store, AsyncStore)
    memory = (AsyncChatMemory if is_async else ChatMemory)(
        any_store, TURN_WINDOW, token_counter=fixed_tokens
    )

    def call(method: str, *args: Any) -> Any:
        result = getattr(memory, method)(*args)
        return run_blocking(result) if is_async else result

    counts = WindowRows(any_store)
    yield call, counts
    counts.close()


def test_a_turn_reads_the_window_rows_only_on_a_miss(counted, any_store):
    """After the first read, every add and window read of the store's own turns finds the
    window cached, compactions included (the window after one is derived): no window row is
    read, and a turn without compaction takes the 7 statements it took before the cache."""
    call, counts = counted
    reference = uncached(any_store)
    call("add", "c", Event.user("hello"))
    call("window", "c")
    compacted = 0
    for i in range(8):
        version = reference.load("c").version
        counts.take()
        call("add", "c", Event.user(f"question {i}"))
        assert call("window", "c")[-1].content == f"question {i}"
        call("add", "c", turn(f"q{i}", tool=True)[1:])
        rows, statements = counts.take()
        assert rows == 0
        if reference.load("c").version == version + 2:  # two appends, no compaction
            assert statements == 7
        else:
            compacted += 1
    assert compacted >= 2  # compactions happened, and were served from the cache too
    reference.close()


def test_a_miss_reads_the_rows_in_the_same_statement(sqlite_store):
    """Another store's write makes this store's entry stale: its next read takes one
    statement, rows included; so does its next append before it writes."""
    memory = ChatMemory(sqlite_store, TURN_WINDOW, token_counter=fixed_tokens)
    other = ChatMemory(sibling(sqlite_store), TURN_WINDOW, token_counter=fixed_tokens)
    memory.add("c", turn("one"))
    counts = WindowRows(sqlite_store)
    other.add("c", turn("two"))
    counts.take()
    assert [e.content for e in memory.window("c")][-1] == "reply to two"
    assert counts.take() == (4, 1)
    assert memory.window("c")[-1].content == "reply to two"
    assert counts.take() == (0, 1)
    other.add("c", Event.user("three"))
    counts.take()
    memory.add("c", Event.assistant("four"))  # read under the lock, then INSERT and UPDATE
    assert counts.take() == (5, 3)
    counts.close()


@pytest.mark.parametrize("name", SYNC_STORES)
def test_a_conversation_erased_and_made_again_to_the_same_version_is_read_again(request, name):
    """SQLite gives the erased row's id to the next row: the id and the version alone would
    take the new conversation for the cached one."""
    store: SQLStore = request.getfixturevalue(name)
    other = sibling(store)
    store.append("c", [Event.user("first")])
    before = store.load("c")
    other.erase("c", 0)
    other.append("c", [Event.user("second")])
    after = uncached(store).load("c")
    assert (after.version, after.window != before.window) == (before.version, True)
    if store.engine.dialect.name == "sqlite":  # the case the row's times are there for
        assert store.ops.windows.peek("c").validator[0] == _row_id(store, "c")
    assert store.load("c") == after


@pytest.mark.parametrize("name", SYNC_STORES)
def test_a_conversation_restored_from_an_older_dump_and_written_again_is_read_again(request, name):
    """A restore writes the dump's version, ``created_at`` and ``updated_at``: the branch
    it starts reaches the cached version again, at other times."""
    store: SQLStore = request.getfixturevalue(name)
    other = sibling(store)
    store.append("c", [Event.user("first")])
    dump = store.dump("c")
    assert dump is not None
    store.append("c", [Event.assistant("on the original")])
    cached = store.load("c")
    other.erase("c", 0)
    other.restore(dump)
    assert store.load("c") == uncached(store).load("c")  # the restored state itself
    other.append("c", [Event.assistant("on the branch")])
    branch = uncached(store).load("c")
    assert branch.version == cached.version and branch.window != cached.window
    if store.engine.dialect.name == "sqlite":  # the same id and created_at as the cached one
        held = store.ops.windows.peek("c")
        assert held is not None and held.validator[0] == _row_id(store, "c")
    assert store.load("c") == branch


def _row_id(store: SQLStore, cid: str) -> int:
    conversations = store.tables.conversations
    with store.engine.connect() as connection:
        return int(
            connection.execute(
                sa.select(conversations.c.id).where(conversations.c.conversation_id == cid)
            ).scalar_one()
        )


class _Text(str):
    """A ``str`` subclass: its JSON reads back as a plain ``str``."""


def test_an_event_given_to_the_store_directly_is_cached_as_a_read_returns_it(sqlite_store):
    # the engine hands the store events that read back alike; a caller of the store may not
    call = Event.tool_call("f", {"pair": (1, 2)}, call_id="c1")
    plain = Event.user(_Text("hello"))
    sqlite_store.append("c", [call, plain])
    cached = sqlite_store.load("c").window.active
    read = SQLStore(sqlite_store.engine, table_prefix=sqlite_store.tables.prefix).load("c")
    assert cached == read.window.active
    assert cached[0].arguments == {"pair": [1, 2]}
    assert type(cached[1].content) is str


def test_a_write_that_does_not_commit_leaves_no_window_behind(sqlite_store):
    """What a write stages is kept only once it commits: an append whose COMMIT fails stages
    the window of version 2, which another store then commits with other events."""
    sqlite_store.append("c", [Event.user("one")])
    assert sqlite_store.load("c").version == 1

    def refuse(_connection: Any) -> None:
        raise RuntimeError("disk gone")

    sa.event.listen(sqlite_store.engine, "commit", refuse)
    try:
        with pytest.raises(RuntimeError, match="disk gone"):
            sqlite_store.append("c", [Event.user("lost")])
    finally:
        sa.event.remove(sqlite_store.engine, "commit", refuse)
    assert sqlite_store.ops.windows.peek("c").validator[3] == 1
    sibling(sqlite_store).append("c", [Event.user("kept")])
    assert [e.content for e in sqlite_store.load("c").window.active] == ["one", "kept"]


def test_stores_in_threads_and_an_async_store_see_each_others_writes(async_sqlite_store):
    """Threads share one sync store's cache; an async store (its own cache) writes between
    them: every load equals a read of the rows."""
    store = sibling(async_sqlite_store)
    memory = ChatMemory(store, TURN_WINDOW, token_counter=fixed_tokens)
    other = AsyncChatMemory(async_sqlite_store, TURN_WINDOW, token_counter=fixed_tokens)
    reference = uncached(store)

    def work(n: int) -> None:
        for i in range(6):
            memory.add(f"c{n % 2}", turn(f"{n}-{i}", tool=i % 2 == 1))
            memory.window(f"c{n % 2}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for i in range(6):  # while the threads write (comparisons wait until they are done)
        run_blocking(other.add("c0", turn(f"async {i}")))
        run_blocking(other.window("c0"))
    for thread in threads:
        thread.join()
    for cid in ("c0", "c1"):
        assert store.load(cid) == reference.load(cid)
        assert run_blocking(async_sqlite_store.load(cid)) == reference.load(cid)
        assert len(reference.load(cid).window.active) > 0
    store.close()
    reference.close()


# -- the bounds ----------------------------------------------------------------------------


def _window(events: int, tokens: int = 1) -> Window:
    made = [Event.user(f"e{i}").stored(seq=i + 1, tokens=tokens) for i in range(events)]
    return Window(active=tuple(made))


def test_the_least_recently_used_conversations_go_first():
    cache = WindowCache(conversations=3)
    for n in range(3):
        cache.put(f"c{n}", (n, "t", "u", 1), _window(2))
    assert cache.get("c0", (0, "t", "u", 1)) is not None  # c0 used: c1 is now the oldest
    cache.put("c3", (3, "t", "u", 1), _window(2))
    assert [cid for cid in ("c0", "c1", "c2", "c3") if cache.peek(cid)] == ["c0", "c2", "c3"]
    assert cache.held() == (3, 6, 6)


def test_the_events_and_tokens_held_stay_within_their_budgets():
    cache = WindowCache(events=10, tokens=100, window_events=6, window_tokens=60)
    cache.put("big", (1, "t", "u", 1), _window(7))  # above window_events: not kept
    cache.put("wordy", (2, "t", "u", 1), _window(2, tokens=40))  # above window_tokens
    assert cache.held() == (0, 0, 0)
    for n in range(4):
        cache.put(f"c{n}", (n, "t", "u", 1), _window(4, tokens=5))
    assert cache.held() == (2, 8, 40)  # the two oldest went for the events' budget
    assert cache.get("c3", (3, "t", "u", 1)) is not None


def test_a_window_is_found_only_under_its_validator_and_a_later_version_stays():
    cache = WindowCache()
    cache.put("c", (1, "t", "u2", 2), _window(2))
    assert cache.get("c", (1, "t", "u2", 2)) is not None
    assert cache.get("c", (1, "t", "u3", 2)) is None  # written again at another time
    cache.put("c", (1, "t", "u1", 1), _window(1))  # a slower writer of the older version
    assert cache.get("c", (1, "t", "u2", 2)) is not None
    cache.put("c", (1, "t2", "u1", 1), _window(1))  # the row made again: taken
    assert cache.get("c", (1, "t2", "u1", 1)) is not None
    with pytest.raises(ValueError, match=r"conversations \(-1\)"):
        WindowCache(conversations=-1)


# -- the differential property: two caching stores against one that reads every time -------

WHO = st.sampled_from([0, 1])
CID = st.sampled_from(["c", "d"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), WHO, CID, st.integers(0, 3)),
        st.tuples(st.just("add"), WHO, CID, st.integers(0, 3)),
        st.tuples(st.just("window"), WHO, CID, st.just(0)),
        st.tuples(st.just("compact"), WHO, CID, st.integers(0, 1)),
        st.tuples(st.just("retract"), WHO, CID, st.integers(0, 30)),
        st.tuples(st.just("clear"), WHO, CID, st.just(0)),
        st.tuples(st.just("erase"), WHO, CID, st.just(0)),
        st.tuples(st.just("dump"), WHO, CID, st.just(0)),
        st.tuples(st.just("restore"), WHO, CID, st.integers(0, 3)),
        st.tuples(st.just("fork"), WHO, CID, st.just(0)),
        st.tuples(st.just("metadata"), WHO, CID, st.just(0)),
        st.tuples(st.just("error"), WHO, CID, st.integers(0, 1)),
    ),
    min_size=1,
    max_size=14,
)


def _step(memory: ChatMemory, step: tuple[str, int, str, int], i: int, dumps: list[Any]) -> None:
    kind, _, cid, n = step
    store: Any = memory.store
    if kind == "add":
        memory.add(cid, forks_turn(i, call=n % 2 == 1, system=n == 2))
    elif kind == "window":
        memory.window(cid)
    elif kind == "compact" and store.load(cid).version:
        memory.compact(cid, force=bool(n))
    elif kind == "retract":
        real = [e for e in memory.history(cid) if e.is_real]
        if real:
            memory.retract(cid, [real[n % len(real)].id])
    elif kind == "clear":
        memory.clear(cid)
    elif kind == "erase":
        store.erase(cid, 0)
    elif kind == "dump":
        dumps.append(store.dump(cid))
    elif kind == "restore" and dumps and dumps[n % len(dumps)] is not None:
        try:
            store.restore(dumps[n % len(dumps)])
        except InvalidInputError:
            pass  # stored already
    elif kind == "fork":
        try:
            memory.fork(cid, "d" if cid == "c" else "c")
        except InvalidInputError:
            pass  # the source is not stored, or the target is
    elif kind == "metadata":
        memory.set_metadata(cid, title=f"title {i}")
    elif kind == "error":
        store.record_compaction_error(cid, "summarizer down" if n else None)


@pytest.mark.parametrize("name", SYNC_STORES)
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=st.sampled_from(STRATEGIES), steps=STEPS, cap=st.sampled_from([None, 3]))
def test_every_cached_load_equals_a_read_of_the_rows(
    request: pytest.FixtureRequest,
    name: str,
    config: dict[str, Any],
    steps: list[tuple[str, int, str, int]],
    cap: int | None,
) -> None:
    """Two stores with caches of their own (two processes) interleave appends (tool pairs,
    pins), compactions, retractions, clears, erasures and re-creations, dumps and restores,
    forks, metadata and compaction errors on one database; after every step each one's
    load() of each conversation equals a store's that reads the rows every time."""
    fixture = request.getfixturevalue(name)
    # tables of the example's own: a conversation made again after an erasure reuses ids
    prefix = f"{fixture.tables.prefix}x{next(_examples)}_"
    stores = [SQLStore(fixture.engine, table_prefix=prefix, max_archived_events=cap)]
    stores.append(sibling(stores[0], max_archived_events=cap))
    reference = uncached(stores[0])
    memories = [
        ChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens) for store in stores
    ]
    dumps: list[Any] = []
    try:
        for i, step in enumerate(steps):
            _step(memories[step[1]], step, i, dumps)
            for cid in ("c", "d"):
                expected = reference.load(cid)
                for store in stores:
                    assert store.load(cid) == expected, (i, step, cid)
    finally:
        for store in (*stores, reference):
            store.ops.windows.clear()
        with fixture.engine.begin() as connection:
            stores[0].tables.meta.metadata.drop_all(connection)
