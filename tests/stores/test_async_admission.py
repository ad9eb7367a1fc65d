"""Admission to the native async stores' connection pools: a burst of concurrent operations
opens no more connections than the pool allows, and the operations waiting for one are served
first come first served (redis-py's blocking pool and SQLAlchemy's queue pool let a newcomer
take a freed connection ahead of the ones waiting). Counted on real servers, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy.pool import AsyncAdaptedQueuePool, NullPool, StaticPool

from chat_memory import AsyncChatMemory, open_async_store
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.sql.aio import AsyncSQLStore, _pool_capacity
from tests.services.redis import free_port
from tests.support.helpers import fixed_tokens, turn

CONFIG = {"compaction_strategy": "turn_window", "max_turns": 2}
# named: SQLAlchemy before 2.0.38 gives a SQLite file no pool of its own (NullPool)
QUEUE = {"poolclass": AsyncAdaptedQueuePool}


async def _rounds(
    load: Callable[[str], Awaitable[object]], conversations: int, rounds: int
) -> list[int]:
    """Each of ``conversations`` coroutines reads its conversation ``rounds`` times in a row,
    all started at once; the coroutines' numbers in the order their reads finished."""
    finished: list[int] = []
    await load("warm-up")  # the schema or layout check is done once, before the burst

    async def reader(c: int) -> None:
        for _ in range(rounds):
            await load(f"c{c}")
            finished.append(c)

    await asyncio.gather(*(reader(c) for c in range(conversations)))
    return finished


def _served_in_turn(finished: list[int], conversations: int) -> bool:
    """Every coroutine's first read finished before any coroutine's second one."""
    return sorted(finished[:conversations]) == list(range(conversations))


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.redis
def test_a_burst_of_conversations_opens_at_most_max_connections_to_redis(redis_server, redis_url):
    import redis.asyncio

    name = f"cm-admission-{free_port()}"
    seen: set[int] = set()  # ids of the store's connections CLIENT LIST showed

    async def main() -> None:
        store = open_async_store(f"{redis_url}&max_connections=8&client_name={name}")
        assert isinstance(store, AsyncRedisStore)
        memory = AsyncChatMemory(store, CONFIG, token_counter=fixed_tokens)
        watcher = redis.asyncio.Redis.from_url(redis_server.url)

        async def watch(stop: asyncio.Event) -> None:
            while not stop.is_set():
                clients = await watcher.client_list()
                seen.update(int(c["id"]) for c in clients if c.get("name") == name)
                await asyncio.sleep(0)

        stop = asyncio.Event()
        watching = asyncio.create_task(watch(stop))

        async def conversation(c: int) -> None:
            for i in range(2):
                await memory.add(f"c{c}", turn(f"q{c}-{i}"))
                await memory.window(f"c{c}")

        await asyncio.gather(*(conversation(c) for c in range(200)))
        stop.set()
        await watching
        assert len(await store.conversations()) == 200
        await memory.aclose()
        await (getattr(watcher, "aclose", None) or watcher.close)()  # aclose from redis 5.0.1

    asyncio.run(main())
    assert 0 < len(seen) <= 8, (
        f"the store opened {len(seen)} connections, more than max_connections=8"
    )


@pytest.mark.redis
def test_redis_operations_waiting_for_a_connection_are_served_first_come_first_served(redis_url):
    async def main() -> list[int]:
        store = open_async_store(f"{redis_url}&max_connections=1")
        try:
            return await _rounds(store.load, 20, 3)
        finally:
            await store.aclose()

    finished = asyncio.run(main())
    assert len(finished) == 60
    assert _served_in_turn(finished, 20), finished[:20]


@pytest.mark.redis_cluster
def test_a_cluster_store_has_no_admission_gate_of_its_own(redis_cluster_url):
    """A cluster client has a pool per node and no blocking pool: nothing to gate."""

    async def main() -> None:
        store = open_async_store(redis_cluster_url)
        assert isinstance(store, AsyncRedisStore)
        await store.load("c")
        assert store._gate is None
        await store.aclose()

    asyncio.run(main())


# -- SQL ---------------------------------------------------------------------------------------


def test_sql_operations_waiting_for_a_connection_are_served_first_come_first_served(sqlite_url):
    async def main() -> list[int]:
        store = AsyncSQLStore(sqlite_url, pool_size=1, max_overflow=0, **QUEUE)
        try:
            return await _rounds(store.load, 20, 3)
        finally:
            await store.aclose()

    finished = asyncio.run(main())
    assert len(finished) == 60
    assert _served_in_turn(finished, 20), finished[:20]


def test_a_burst_on_sql_holds_at_most_the_pools_connections_and_never_waits_in_it(sqlite_url):
    from sqlalchemy import event

    peak = 0

    async def main() -> None:
        nonlocal peak
        # a pool timeout of 1 s: 400 operations queued inside SQLAlchemy's pool would hit it
        store = AsyncSQLStore(sqlite_url, pool_size=2, max_overflow=1, pool_timeout=1, **QUEUE)
        assert store._gate_size == 3
        pool = store.engine.sync_engine.pool

        @event.listens_for(pool, "checkout")
        def count(*_: object) -> None:
            nonlocal peak
            peak = max(peak, pool.checkedout())

        memory = AsyncChatMemory(store, CONFIG, token_counter=fixed_tokens)
        await asyncio.gather(
            *(memory.add(f"c{c}", turn(f"q{c}")) for c in range(200)),
            *(memory.window(f"c{c}") for c in range(200)),
        )
        assert len(await store.conversations()) == 200
        await memory.aclose()

    asyncio.run(main())
    assert 0 < peak <= 3


@pytest.mark.parametrize(
    ("options", "capacity"),
    [
        (QUEUE, 15),  # SQLAlchemy's defaults: 5 and an overflow of 10
        ({**QUEUE, "pool_size": 4, "max_overflow": 0}, 4),
        ({**QUEUE, "max_overflow": -1}, None),  # no bound: nothing to queue for
        ({"poolclass": NullPool}, None),
    ],
)
def test_the_sql_admission_gate_is_the_pools_size_and_overflow(sqlite_url, options, capacity):
    store = AsyncSQLStore(sqlite_url, **options)
    assert store._gate_size == capacity
    asyncio.run(store.aclose())


def test_one_shared_sqlite_connection_has_no_gate_of_its_own():
    assert _pool_capacity(StaticPool(lambda: None)) is None
