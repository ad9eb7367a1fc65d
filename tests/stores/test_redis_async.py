"""The native async Redis store (``redis.asyncio``) on the real redis-server and the real Redis
Cluster: the sync and async stores sharing one prefix both ways, what ``open_async_store``
picks, and its faults (server down, a dropped connection, bad options) with no password in any
message. The store protocol on it is tests/stores/test_async_conformance.py's, the engine's
behaviour over it tests/test_engine*.py's (the ``native`` memory kind)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from chat_memory import (
    ChatMemory,
    Event,
    MemoryConfig,
    ThreadedStore,
    open_async_store,
    open_store,
)
from chat_memory.aio import AsyncChatMemory
from chat_memory.backends.aio import native_store_class
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.errors import ConfigurationError, SchemaError, StorageError
from tests.services.redis import free_port
from tests.support.helpers import fixed_tokens, turn

BACKENDS = [
    pytest.param("redis_url", marks=pytest.mark.redis, id="server"),
    pytest.param("redis_cluster_url", marks=pytest.mark.redis_cluster, id="cluster"),
]
SECRET = "s3cret-Pa55"


@pytest.fixture(params=BACKENDS)
def url(request) -> str:
    """A fresh prefix on the real server, then on the real cluster."""
    return request.getfixturevalue(request.param)


# -- the sync and the async store share data --------------------------------------------------

CONFIG = {"compaction_strategy": "turn_window", "max_turns": 2, "compact_to_ratio": 1.0}


def _seen(history: list[Event]) -> list[tuple[Any, ...]]:
    return [(e.id, e.seq, e.type, e.content, e.archived, e.tool_call_id) for e in history]


def test_sync_writes_async_reads_and_back(url):
    sync_store = RedisStore.from_url(url)
    cid = "shared {conv}"
    try:
        memory = ChatMemory(sync_store, CONFIG, token_counter=fixed_tokens)
        memory.add(cid, [Event.system("be brief"), *turn("Bluefin")])
        for i in range(3):
            memory.add(cid, turn(f"sync {i}", tool=True))
        written, written_history = sync_store.load(cid), sync_store.history(cid)

        async def async_side() -> tuple[Any, ...]:
            store = AsyncRedisStore.from_url(url)
            try:
                amemory = AsyncChatMemory(store, CONFIG, token_counter=fixed_tokens)
                seen = (
                    await store.load(cid),
                    await store.history(cid),
                    (await amemory.search(cid, "bluefin")).total,
                    await store.compactions(cid),
                    await store.conversations(),
                )
                for i in range(3):
                    await amemory.add(cid, turn(f"async {i}"))
                return seen
            finally:
                await store.aclose()

        snapshot, history, found, records, ids = asyncio.run(async_side())
        assert (
            snapshot == written and _seen(history) == _seen(written_history) and found == 2
        )  # question and reply, archived
        assert len(records) == 2 and ids == [cid]
        after = memory.history(cid)
        assert [e.seq for e in after] == list(range(1, len(after) + 1))
        assert [e.content for e in memory.window(cid) if e.type.value == "user"] == [
            "async 1",
            "async 2",
        ]
        assert len(memory.compactions(cid)) == 5 and memory.search(cid, "async 0").total == 2
    finally:
        sync_store.close()


def test_async_writes_are_what_sync_reads(url):
    async def write() -> tuple[Any, Any]:
        store = AsyncRedisStore.from_url(url, max_archived_events=3)
        try:
            amemory = AsyncChatMemory(store, CONFIG, token_counter=fixed_tokens)
            for i in range(4):
                await amemory.add("c", turn(f"q{i}"))
            await store.record_compaction_error("c", "summarizer down")
            return await store.load("c"), await store.history("c")
        finally:
            await store.aclose()

    snapshot, history = asyncio.run(write())
    sync_store = RedisStore.from_url(url, max_archived_events=3)
    try:
        assert sync_store.load("c") == snapshot and snapshot.compaction_error == "summarizer down"
        assert _seen(sync_store.history("c")) == _seen(history) and snapshot.archived_count == 3
        assert sync_store.apply(
            "c", CompactionPlan(snapshot.version, archive_through_seq=6)
        )  # the same version counter
    finally:
        sync_store.close()


# -- what open_async_store picks, and what the store says when it cannot work -----------------


def test_open_async_store_picks_the_native_store_and_threads_on_demand(redis_server):
    for scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        assert native_store_class(scheme) is AsyncRedisStore
    store = open_async_store(
        f"{redis_server.url}?prefix=app:&max_archived_events=none", ttl_seconds=60
    )
    assert isinstance(store, AsyncRedisStore) and store.native and not store.cluster
    assert (store.prefix, store.default_max_archived_events, store.ttl_seconds) == (
        "app:",
        None,
        60,
    )
    threaded = open_async_store(redis_server.url, threads=True)
    assert (
        isinstance(threaded, ThreadedStore)
        and isinstance(threaded.store, RedisStore)
        and not threaded.native
    )
    assert isinstance(open_async_store(redis_server.url, threads=False), AsyncRedisStore)
    for opened in (store, threaded):
        asyncio.run(opened.aclose())


@pytest.mark.parametrize(
    "option",
    ["ttl_seconds=0", "max_archived_events=many", "prefix=a{b}", "ttl_seconds=1&ttl_seconds=2"],
)
def test_a_bad_url_option_is_named(option):
    with pytest.raises(ConfigurationError, match=option.split("=")[0]) as failure:
        open_async_store(f"redis://:{SECRET}@127.0.0.1:6379/0?{option}")
    assert SECRET not in str(failure.value)


def test_keyword_options_are_checked_too():
    with pytest.raises(ConfigurationError, match="max_archived_events"):
        open_async_store("redis://127.0.0.1:6379/0", max_archived_events=-1)


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_a_server_that_is_down_gives_a_storage_error_without_the_password(scheme):
    async def run() -> None:
        store = open_async_store(
            f"{scheme}://user:{SECRET}@127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"
        )
        assert SECRET not in repr(store)
        try:
            with pytest.raises(
                StorageError, match=r"AsyncRedisStore\.load failed: .*(Connect|connect)"
            ) as failure:
                await store.load("nobody-home")
            assert SECRET not in str(failure.value) and SECRET not in repr(failure.value)
        finally:
            await store.aclose()

    asyncio.run(run())


@pytest.mark.redis
def test_one_script_call_per_add_a_dropped_connection_is_retried_and_a_flushed_cache_reloads(
    redis_url, monkeypatch
):
    import redis.asyncio.connection

    async def run() -> None:
        store = AsyncRedisStore.from_url(redis_url)
        memory = AsyncChatMemory(store, CONFIG, token_counter=fixed_tokens)
        await memory.add("c", turn("q0"))
        sent: list[str] = []
        original = store.client.execute_command

        async def counting(*args: Any, **kwargs: Any) -> Any:
            sent.append(str(args[0]))
            return await original(*args, **kwargs)

        store.client.execute_command = counting
        await memory.add("c", turn("q1"))
        assert sent == ["EVALSHA"]
        await store.client.script_flush()  # what a restart or failover does to the script cache
        drops: list[int] = []
        send = redis.asyncio.connection.Connection.send_packed_command

        async def drop_once(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not drops:
                drops.append(1)
                raise redis.ConnectionError("connection dropped (injected)")
            return await send(self, *args, **kwargs)

        monkeypatch.setattr(redis.asyncio.connection.Connection, "send_packed_command", drop_once)
        assert (await store.append("c", turn("q2"))).last_seq == 6 and drops == [1]
        await store.aclose()

    asyncio.run(run())


@pytest.mark.redis
def test_a_callers_client_stays_open_and_a_sync_client_is_refused(redis_server, redis_url):
    import redis
    import redis.asyncio

    with pytest.raises(ConfigurationError, match="sync redis client"):
        AsyncRedisStore(redis.Redis.from_url(redis_server.url))

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = AsyncRedisStore(client, prefix="mine:")
        await store.append("c", turn())
        await store.aclose()
        assert await client.ping()
        await getattr(client, "aclose", client.close)()  # aclose() is redis-py 5.0.1+

    asyncio.run(run())


@pytest.mark.redis
def test_a_newer_layout_is_refused_by_the_async_store_too(redis_server):
    import redis

    redis.Redis.from_url(redis_server.url).set("newer:layout", 2)

    async def run() -> None:
        store = AsyncRedisStore.from_url(f"{redis_server.url}?prefix=newer:")
        with pytest.raises(SchemaError, match="newer than version 1"):
            await store.append("c", turn())
        await store.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("opener", [open_store, open_async_store])
def test_an_option_neither_the_store_nor_redis_py_takes_is_refused_when_opened(opener):
    """Options that are not the store's go to redis-py; one that redis-py's client, pool and
    connection do not take either is named when the store is opened (redis-py itself would
    raise a TypeError at the first command)."""
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0?client_name=x&no_such_option=1"
    with pytest.raises(ConfigurationError, match="'no_such_option' is neither") as failure:
        opener(url)
    assert SECRET not in str(failure.value)


@pytest.mark.redis
def test_more_concurrent_conversations_than_connections_queue_for_one(redis_server, redis_url):
    import redis

    name = f"cm-queue-{free_port()}"

    def connected() -> int:
        return sum(
            c.get("name") == name for c in redis.Redis.from_url(redis_server.url).client_list()
        )

    async def main() -> None:
        store = open_async_store(f"{redis_url}&max_connections=4&client_name={name}")
        assert (
            isinstance(store, AsyncRedisStore) and store.client.connection_pool.max_connections == 4
        )
        memory = AsyncChatMemory(
            store,
            {"compaction_strategy": "turn_window", "max_turns": 2},
            token_counter=fixed_tokens,
        )
        # redis-py's default pool would refuse the 5th concurrent command (MaxConnectionsError)
        await asyncio.gather(*(memory.add(f"c{i}", turn(f"q{i}")) for i in range(300)))
        assert sorted(await store.conversations()) == sorted(f"c{i}" for i in range(300))
        assert 0 < connected() <= 4
        await memory.aclose()

    asyncio.run(main())
    deadline = time.monotonic() + 30  # the server drops a closed connection soon, not at once
    while connected() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connected() == 0, "aclose() left pooled connections open"


def test_one_store_serves_one_asyncio_run_after_another(url):
    """A script (or a framework) that runs each request in a fresh ``asyncio.run()``: the
    store's connections died with the first loop, and it opens new ones on the next."""
    memory = AsyncChatMemory(
        open_async_store(url, threads=False),
        MemoryConfig(compaction_strategy="turn_window", max_turns=3),
    )

    async def turn_and_history(i: int) -> list[str]:
        await memory.add("loops", [Event.user(f"q{i}"), Event.assistant(f"a{i}")])
        return [e.content for e in await memory.history("loops")]

    try:
        assert asyncio.run(turn_and_history(1)) == ["q1", "a1"]
        assert asyncio.run(turn_and_history(2)) == ["q1", "a1", "q2", "a2"]
        assert asyncio.run(turn_and_history(3))[-2:] == ["q3", "a3"]
    finally:
        asyncio.run(memory.store.aclose())


def test_a_client_passed_in_and_left_on_a_closed_loop_is_named(redis_url):
    import redis.asyncio

    async def first() -> AsyncRedisStore:
        server, prefix = redis_url.split("?prefix=")
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server), prefix=prefix)
        await store.append("mine", [Event.user("hi")])
        return store

    store = asyncio.run(first())
    with pytest.raises(ConfigurationError, match="event loop that is now closed"):
        asyncio.run(store.append("mine", [Event.user("again")]))
