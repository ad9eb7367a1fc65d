"""The lifecycle on Redis and Redis Cluster (docs/lifecycle.md, docs/redis.md), against the real
redis-server and the real 3-node cluster: the conformance suite (sync and the native async
store) with a raw scan of every key of the server (of every cluster node), keys and values;
retention by native expiry; other users' keys byte for byte intact (DUMP) after an erasure;
and eight processes writing and sweeping at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import Store
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.redis_lifecycle import scope_base
from chat_memory.errors import ConcurrencyError
from chat_memory.lifecycle import Scope, scoped_key, scoped_namespace
from chat_memory.longterm import long_term_memory
from chat_memory.longterm.redis import namespace_keys
from chat_memory.testing.lifecycle_conformance import LifecycleConformance
from tests.conftest import WRITER_PROCESSES
from tests.fixtures.redis import unique_prefix
from tests.support.lifecycle_workers import writers_race_sweepers

BACKENDS = [
    pytest.param("redis_server", marks=pytest.mark.redis, id="server"),
    pytest.param("redis_cluster", marks=pytest.mark.redis_cluster, id="cluster"),
]


def _nodes(store: RedisStore) -> list[Any]:
    """A client of every primary that holds keys (the server itself when not a cluster)."""
    if not store.cluster:
        return [store.client]
    client: Any = store.client
    return [client.get_redis_connection(node) for node in client.get_primaries()]


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def every_key(store: RedisStore) -> dict[str, list[str]]:
    """Every key of the server (of every cluster node), with every string of its value."""
    found: dict[str, list[str]] = {}
    for node in _nodes(store):
        for raw in node.scan_iter(count=1000):
            key = _text(raw)
            kind = _text(node.type(raw))
            if kind == "string":
                values = [node.get(raw)]
            elif kind == "hash":
                values = [x for pair in node.hgetall(raw).items() for x in pair]
            elif kind == "list":
                values = node.lrange(raw, 0, -1)
            elif kind == "set":
                values = list(node.smembers(raw))
            elif kind == "zset":
                values = node.zrange(raw, 0, -1)
            else:
                values = []
            found[key] = [_text(v) for v in values if v is not None]
    return found


def dumps(store: RedisStore, keys: list[str]) -> dict[str, bytes | None]:
    """The DUMP of each key (its value byte for byte, TTL aside)."""
    client: Any = store.client
    return {key: client.dump(key) for key in keys}


def _flushed_store(server: Any) -> Iterator[RedisStore]:
    """A store alone on the server: everything flushed first (each test session has its own
    servers, and tests run one at a time), so a scan of every key sees only this test's."""
    store = RedisStore.from_url(f"{server.url}?prefix={unique_prefix()}")
    for node in _nodes(store):
        node.flushall()
    yield store
    store.close()


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def store(server: Any) -> Iterator[RedisStore]:
    yield from _flushed_store(server)


class TestRedisLifecycle(LifecycleConformance):
    """The conformance suite on the server and the cluster; async runs on AsyncRedisStore."""

    def async_store(self, store: Store) -> AsyncStore:
        assert isinstance(store, RedisStore)
        return AsyncRedisStore.from_url(f"{_url(store)}?prefix={store.prefix}", ttl_ms=store.ttl_ms)

    def raw_strings(self, store: Store) -> list[str]:
        assert isinstance(store, RedisStore)
        return [s for key, values in every_key(store).items() for s in (key, *values)]


def _url(store: RedisStore) -> str:
    client: Any = store.client
    if store.cluster:
        node = client.get_default_node()
        return f"redis+cluster://{node.host}:{node.port}"
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def test_idle_conversations_expire_by_themselves_and_sweep_drops_their_entries(
    store: RedisStore,
) -> None:
    store.ttl_ms = 400
    memory = ChatMemory(store, MemoryConfig(retention_seconds=1))
    alice = memory.for_user("alice")
    alice.add("idle", Event.user("left alone"))
    alice.set_metadata("idle", tags=["t"])
    alice.add("busy", Event.user("kept busy"))
    deadline = time.monotonic() + 10  # against a hang only: the assertions are on state
    while store.conversation_record(scoped_key(Scope("alice"), "idle")) is not None:
        assert time.monotonic() < deadline, "the idle conversation never expired"
        alice.add("busy", Event.user("still here"))
        time.sleep(0.05)
    assert alice.history("idle") == [] and alice.history("busy") != []
    index = f"{scope_base(store.prefix, Scope('alice').prefix)}:index"
    client: Any = store.client
    assert client.zcard(index) == 2  # the expired one's entry outlives it, until a sweep
    assert [c.id for c in alice.conversations(tag="t")] == []
    report = memory.sweep()
    assert report.conversations == 0  # expiry deleted it, not the sweep
    assert client.zcard(index) == 1
    assert [c.id for c in alice.conversations()] == ["busy"]
    keys = every_key(store)
    assert not [k for k, v in keys.items() for s in (k, *v) if "left alone" in s]


def test_the_turn_of_a_scoped_conversation_refreshes_every_key_it_owns(
    store: RedisStore,
) -> None:
    store.ttl_ms = 60_000
    alice = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    alice = alice.for_user("alice")
    alice.add("c", [Event.user("one"), Event.assistant("two")])
    alice.set_metadata("c", tags=["x"])
    alice.add("c", Event.user("three"))
    client: Any = store.client
    for node in _nodes(store):
        for key in node.scan_iter():
            name = _text(key)
            if ":erasing" in name or name.endswith(("layout", "conversations", ":scopes")):
                continue
            assert 0 < client.pttl(name) <= 60_000, name


def test_an_erasure_leaves_every_other_users_key_byte_for_byte(store: RedisStore) -> None:
    memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    for user, word in (("alice", "aardvark"), ("bob", "bluebird"), ("carol", "cormorant")):
        scoped = memory.for_user(user, app="app")
        scoped.add(f"{word}-chat", [Event.user(f"{word} q"), Event.assistant(f"{word} a")])
        scoped.add(f"{word}-chat", Event.user(f"{word} again"))
        scoped.set_metadata(f"{word}-chat", title=word, tags=[word])
        long_term_memory(store, "notes", user=user, app="app").create("/memories/a.md", word)
    memory.add("bare", Event.user("unscoped words"))
    before = every_key(store)
    # shared registries (of ids, namespace names, scope index names): not a user's keys
    shared = {
        f"{store.prefix}ltm:namespaces",
        f"{store.prefix}conversations",
        f"{scope_base(store.prefix, '')}:scopes",
    }
    alice = Scope("alice", "app")
    # alice's keys: those tagged with her scope's slot or her namespace's (names hold digests)
    tags = [
        scope_base(store.prefix, alice.prefix),
        *namespace_keys(store.prefix, scoped_namespace(alice, "notes")),
    ]
    tags = [t[t.index("{") : t.index("}") + 1] for t in tags]
    others = [k for k in before if k not in shared and not any(t in k for t in tags)]
    assert len(others) > 20 and any("bluebird" in s for k in others for s in before[k])
    kept = dumps(store, others)
    stop, refused = threading.Event(), []

    def write() -> None:  # alice writing throughout the erasure
        scoped, i = memory.for_user("alice", app="app"), 0
        while not stop.is_set():
            try:
                scoped.add(f"aardvark-{i % 3}", Event.user(f"aardvark racing {i}"))
            except ConcurrencyError:
                refused.append(i)
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        receipt = memory.forget(user="alice", app="app")
        deadline = time.monotonic() + 10  # against a hang only: refused within writes
        while not refused and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        stop.set()
        writer.join()
    assert refused
    assert receipt.conversations >= 1 and receipt.long_term_files == 1
    after = every_key(store)
    left = [s for k, v in after.items() for s in (k, *v) if "aardvark" in s or "alice" in s]
    assert left == []
    changed = [k for k, v in dumps(store, others).items() if v != kept[k]]
    assert changed == []
    assert [k for k in after if any(t in k for t in tags)] == [
        f"{scope_base(store.prefix, alice.prefix)}:erasingscope"
    ]


def test_unscoped_conversations_list_newest_first_by_tag(store: RedisStore) -> None:
    """The unbound memory's own listing: on a cluster its index is in another slot than the
    conversations, so the listing reads each record; order and tags stay exact."""
    memory = ChatMemory(store)
    for i in range(4):
        memory.add(f"c{i}", Event.user(f"m{i}"))
        time.sleep(0.002)
    memory.set_metadata("c1", tags=["t"])
    memory.set_metadata("c2", tags=["t", "u"])
    memory.add("c0", Event.user("newest"))
    memory.for_user("alice").add("c9", Event.user("scoped"))
    assert [c.id for c in memory.conversations()] == ["c0", "c2", "c1", "c3"]
    assert [c.id for c in memory.conversations(tag="t", page=1, page_size=1)] == ["c2"]
    memory.set_metadata("c2", tags=["u"])  # a write: c2 is the newest now
    assert [c.id for c in memory.conversations(tag="t")] == ["c1"]
    memory.clear("c1")
    assert [c.id for c in memory.conversations(tag="t")] == []
    assert [c.id for c in memory.conversations()] == ["c2", "c0", "c3"]


def test_eight_processes_writing_and_sweeping(server: Any, writer_processes: Any) -> None:
    """Four writers add to their users' conversations (one seeded before the cutoff) while
    four sweepers sweep the whole store with the cutoff after the seeds: every idle
    conversation goes with every key, and no event written after the cutoff is lost."""
    url = f"{server.url}?prefix={unique_prefix()}"
    store = RedisStore.from_url(url)
    memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    writers_race_sweepers(memory, url, writer_processes, WRITER_PROCESSES)
    raw = [s for k, v in every_key(store).items() if k.startswith(store.prefix) for s in (k, *v)]
    assert not [s for s in raw if "idle words" in s]
    store.close()
