"""What only the Redis store promises: its key layout (one hash slot per conversation, any id),
round trips per call, the archive cap and TTL, retry de-duplication, recovery from a script
cache flush, and a clear StorageError when the server is gone. The behaviour every store shares
is in tests/engine/ and tests/stores/test_multiprocess.py."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends import redis_base
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.migrations import Migration
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_sansio import packed_batch
from chat_memory.errors import ConfigurationError, SchemaError, StorageError
from tests.fixtures.redis import unique_prefix
from tests.services.redis import free_port, start_cluster, start_redis

HOSTILE_IDS = [
    "{",
    "}",
    "{}",
    "}{",
    "{a}",
    "a}{b",
    "*",
    "?",
    "[x]",
    "a:b",
    "chat-memory:conversations",
    "../../etc/passwd",
    "%_",
    "'\"",
    "\\",
    "héllo 🙂",
    "x" * 1024,
    " ",
    "\n",
]


def turn(i: int) -> list[Event]:
    return [Event.user(f"question {i}"), Event.assistant(f"answer {i}")]


def command_log(client: Any) -> list[str]:
    """Record the name of every command the client sends (one entry = one round trip)."""
    sent: list[str] = []
    original = client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return original(*args, **kwargs)

    client.execute_command = counting
    return sent


@pytest.fixture(
    params=[
        "fakeredis_store",
        pytest.param("redis_store", marks=pytest.mark.redis),
        pytest.param("redis_cluster_store", marks=pytest.mark.redis_cluster),
    ]
)
def store(request) -> RedisStore:
    return request.getfixturevalue(request.param)


@pytest.fixture(
    params=[
        pytest.param("redis_store", marks=pytest.mark.redis),
        pytest.param("redis_cluster_store", marks=pytest.mark.redis_cluster),
    ]
)
def real_store(request) -> RedisStore:
    return request.getfixturevalue(request.param)


# -- key layout ------------------------------------------------------------------------------


@pytest.mark.parametrize("cid", HOSTILE_IDS)
def test_every_key_of_a_conversation_is_in_one_slot(fakeredis_store, cid):
    keys = fakeredis_store._keys(cid)[:8]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    assert all(
        k.startswith("chat-memory:{") and k.count("{") == 1 and k.count("}") == 1 for k in keys
    )


def test_hostile_ids_never_share_keys(fakeredis_store):
    keys = [tuple(fakeredis_store._keys(cid)[:8]) for cid in HOSTILE_IDS]
    assert len(set(keys)) == len(HOSTILE_IDS)


def test_prefix_cannot_break_the_hash_tag():
    import fakeredis

    with pytest.raises(ConfigurationError, match="prefix"):
        RedisStore(fakeredis.FakeRedis(), prefix="app{1}:")


@pytest.mark.redis_cluster
def test_hostile_ids_on_a_real_cluster(redis_cluster_store):
    store = redis_cluster_store
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=1))
    for cid in HOSTILE_IDS:
        memory.add(cid, [Event.system("pinned"), *turn(1)])
        memory.add(cid, turn(2))  # compacts: the archive key is written too, so every key exists
    client = store.client
    for cid in HOSTILE_IDS:
        slots = {client.execute_command("CLUSTER KEYSLOT", key) for key in store._keys(cid)[:8]}
        assert len(slots) == 1, cid
        assert [e.content for e in memory.history(cid)] == [
            "pinned",
            "question 1",
            "answer 1",
            "question 2",
            "answer 2",
        ]
        assert memory.search(cid, "QUESTION 1").total == 1
    assert store.conversations() == sorted(HOSTILE_IDS)
    stored = {key.decode() for node_keys in _scan_all(client, store.prefix) for key in node_keys}
    # the first eight keys, and the timeline (index 10) a compaction writes
    expected = {
        key for cid in HOSTILE_IDS for key in store._keys(cid)[:8] + store._keys(cid)[10:11]
    } | {
        store._registry,
        store._layout_key,
        store._index(""),  # the unscoped conversations' listing index (registry's slot)
    }
    assert stored == expected
    used_slots = {key_slot(store._keys(cid)[0].encode()) for cid in HOSTILE_IDS}
    assert len(used_slots) > 1  # conversations spread over the cluster


def _scan_all(client: Any, prefix: str) -> Iterator[list[bytes]]:
    pattern = (
        prefix.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?").replace("[", "\\[")
        + "*"
    )
    for node in client.get_primaries():
        yield list(client.get_redis_connection(node).scan_iter(match=pattern, count=1000))


# -- round trips -----------------------------------------------------------------------------


def test_round_trips_per_add_and_window(real_store):
    memory = ChatMemory(
        real_store,
        MemoryConfig(compaction_strategy="turn_window", max_turns=3, compact_to_ratio=1.0),
    )
    for i in range(4):  # warm up: the server loads each script at its first use
        memory.add("warm", turn(i))
    memory.search("warm", "question")
    memory.window("warm")
    memory.add("rt", turn(0))  # a conversation's first append on a cluster also registers it
    sent = command_log(real_store.client)
    memory.add("rt", turn(1))
    assert sent == ["EVALSHA"]
    sent.clear()
    memory.window("rt")
    assert sent == ["EVALSHA"]
    sent.clear()
    memory.stats("rt")
    assert sent == ["EVALSHA"]
    sent.clear()
    memory.add("rt", turn(2))
    memory.add("rt", turn(3))  # over the limit: the append and the compaction in one script
    assert sent == ["EVALSHA", "EVALSHA"]
    sent.clear()
    memory.search("rt", "question", page=0)
    assert sent == ["EVALSHA"]
    assert memory.stats("rt").archived_events == 2


def test_scripts_survive_a_script_cache_flush(real_store):
    memory = ChatMemory(real_store, MemoryConfig(compaction_strategy="turn_window", max_turns=1))
    memory.add("flush", turn(1))
    real_store.client.script_flush()  # what a server restart or failover does to the cache
    memory.add("flush", turn(2))
    assert [e.seq for e in memory.history("flush")] == [1, 2, 3, 4]
    assert memory.stats("flush").archived_events == 2


# -- layout version --------------------------------------------------------------------------


def test_the_layout_version_is_recorded_and_read_once_per_store(fakeredis_client):
    store = RedisStore(fakeredis_client, prefix="app:")
    sent = command_log(fakeredis_client)
    store.append("c", turn(0))
    assert sent[:4] == ["GET", "EXISTS", "SET", "GET"]  # read, set when missing, read back
    assert fakeredis_client.get("app:layout") == b"1"
    sent.clear()
    for i in range(1, 4):
        store.append("c", turn(i))
        store.load("c")
    store.conversations()
    assert "GET" not in sent and "SET" not in sent


def _pretend_layout_0(client, prefix: str) -> None:
    """A (pretend) layout 0 kept the registry under ``<prefix>ids``."""
    client.rename(f"{prefix}conversations", f"{prefix}ids")
    client.set(f"{prefix}layout", 0)


def _registry_moved(store: RedisStore) -> None:
    if store.client.exists(f"{store.prefix}ids"):
        store.client.rename(f"{store.prefix}ids", store._registry)


@pytest.mark.parametrize(
    "name", ["fakeredis_client", pytest.param("redis_server", marks=pytest.mark.redis)]
)
def test_an_older_layout_is_migrated_in_place(request, name, monkeypatch):
    import redis

    found = request.getfixturevalue(name)
    client = found if name == "fakeredis_client" else redis.Redis.from_url(found.url)
    prefix = unique_prefix()
    old = RedisStore(client, prefix=prefix)
    for cid in ("a", "b"):
        old.append(cid, turn(0))
    _pretend_layout_0(client, prefix)
    with pytest.raises(SchemaError, match="no migration from version 0 to 1"):
        RedisStore(client, prefix=prefix).conversations()
    step = Migration(0, "the registry moved to <prefix>conversations", _registry_moved)
    monkeypatch.setattr(
        redis_base,
        "REDIS_LAYOUT",
        dataclasses.replace(redis_base.REDIS_LAYOUT, migrations=(step,)),
    )
    store = RedisStore(client, prefix=prefix)
    assert store.conversations() == ["a", "b"]
    assert client.get(f"{prefix}layout") == b"1" and not client.exists(
        f"{prefix}ids", f"{prefix}layout:lock"
    )
    assert (
        client.hget(f"{prefix}layout:migrations", "1")
        .decode()
        .endswith(" the registry moved to <prefix>conversations")
    )
    assert store.append("a", turn(1)).last_seq == 4


def test_a_failing_migration_leaves_the_old_version_and_is_retried(fakeredis_client, monkeypatch):
    prefix = unique_prefix()
    RedisStore(fakeredis_client, prefix=prefix).append("a", turn(0))
    _pretend_layout_0(fakeredis_client, prefix)
    attempts: list[int] = []

    def flaky(store: RedisStore) -> None:
        import redis

        attempts.append(1)
        if len(attempts) == 1:  # the connection drops halfway through the migration
            raise redis.ConnectionError("migration interrupted")
        _registry_moved(store)

    step = Migration(0, "the registry moved", flaky)
    monkeypatch.setattr(
        redis_base,
        "REDIS_LAYOUT",
        dataclasses.replace(redis_base.REDIS_LAYOUT, migrations=(step,)),
    )
    store = RedisStore(fakeredis_client, prefix=prefix)
    with pytest.raises(StorageError, match="migration interrupted"):
        store.load("a")
    assert fakeredis_client.get(f"{prefix}layout") == b"0" and not fakeredis_client.exists(
        f"{prefix}layout:lock"
    )
    assert store.conversations() == ["a"]  # the same store tries again
    assert fakeredis_client.get(f"{prefix}layout") == b"1"


def test_data_from_before_the_layout_key_counts_as_layout_1(fakeredis_client, monkeypatch):
    prefix = unique_prefix()
    RedisStore(fakeredis_client, prefix=prefix).append("a", turn(0))
    fakeredis_client.delete(f"{prefix}layout")  # as written before the key existed
    ran: list[str] = []
    step = Migration(1, "test step", lambda store: ran.append(store.prefix))
    monkeypatch.setattr(
        redis_base,
        "REDIS_LAYOUT",
        dataclasses.replace(redis_base.REDIS_LAYOUT, current=2, migrations=(step,)),
    )
    assert RedisStore(fakeredis_client, prefix=prefix).load("a").last_seq == 2
    assert ran == [prefix] and fakeredis_client.get(f"{prefix}layout") == b"2"
    RedisStore(fakeredis_client, prefix="fresh:").load(
        "a"
    )  # an empty prefix starts at the current layout
    assert ran == [prefix] and fakeredis_client.get("fresh:layout") == b"2"


def test_a_newer_layout_is_refused_before_anything_is_written(fakeredis_client):
    prefix = unique_prefix()
    fakeredis_client.set(f"{prefix}layout", 2)
    store = RedisStore(fakeredis_client, prefix=prefix)
    with pytest.raises(
        SchemaError, match=r"layout' records Redis key layout version 2, newer than version 1"
    ):
        store.append("c", turn(0))
    with pytest.raises(SchemaError):
        store.clear("c")
    assert fakeredis_client.keys(f"{prefix}*") == [f"{prefix}layout".encode()]


# -- archive cap, TTL, registry --------------------------------------------------------------


def test_archive_cap_trims_events_and_their_search_texts(fakeredis_client):
    store = RedisStore(fakeredis_client, max_archived_events=5)
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=1))
    for i in range(10):
        memory.add("cap", turn(i))
    assert memory.stats("cap").archived_events == 5
    history = memory.history("cap")
    assert [e.seq for e in history if e.archived] == [14, 15, 16, 17, 18]
    assert memory.search("cap", "question").total == 3  # questions 7 and 8 archived, 9 active
    assert fakeredis_client.hlen(store._keys("cap")[4]) == 5 + 2  # texts of kept events only
    assert store.apply("cap", CompactionPlan(store.load("cap").version, 18, max_archived_events=0))
    assert memory.stats("cap").archived_events == 0
    assert fakeredis_client.hlen(store._keys("cap")[4]) == 2


def test_archive_cap_comes_from_the_url_and_none_means_unbounded():
    import fakeredis

    server = fakeredis.FakeServer()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("redis.Redis.from_url", lambda url, **kw: fakeredis.FakeRedis(server=server))
        assert open_store("redis://h/0?max_archived_events=7").default_max_archived_events == 7
        assert (
            open_store("redis://h/0?max_archived_events=none").default_max_archived_events is None
        )
        assert open_store("redis://h/0?prefix=app:&ttl_seconds=60").ttl_seconds == 60
        assert open_store("redis://h/0?prefix=app:").prefix == "app:"
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        RedisStore(fakeredis.FakeRedis(), ttl_seconds=0)
    with pytest.raises(ConfigurationError, match="max_archived_events"):
        RedisStore(fakeredis.FakeRedis(), max_archived_events="many")


@pytest.mark.redis
def test_ttl_covers_every_key_and_every_write_refreshes_it(redis_server):
    store = RedisStore.from_url(f"{redis_server.url}?prefix={unique_prefix()}&ttl_seconds=1000")
    try:
        memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=1))
        memory.add("ttl", [Event.system("be brief"), *turn(1)])
        memory.add("ttl", turn(2))
        keys = store._keys("ttl")[:8]
        assert all(0 < store.client.ttl(key) <= 1000 for key in keys)
        for key in keys:
            store.client.expire(key, 5)
        store.record_compaction_error("ttl", "summarizer down")
        assert all(store.client.ttl(key) > 5 for key in keys)
        store.client.delete(*keys)  # as if the conversation expired
        assert store.conversations() == []
        assert not store.client.sismember(store._registry, "ttl")  # the registry was pruned
    finally:
        store.close()


def test_a_compaction_error_written_without_a_count_counts_from_0(store):
    store.append("old", turn(0))
    meta = store._keys("old")[0]
    store.client.hset(meta, "error", "summarizer down")  # as chat-memory wrote it before the count
    snapshot = store.load("old")
    assert (snapshot.compaction_error, snapshot.compaction_failures) == ("summarizer down", 0)
    store.record_compaction_error("old", "summarizer down")
    assert store.load("old").compaction_failures == 1
    assert int(store.client.hget(meta, "failures")) == 1  # beside the error, in the same hash
    assert store.apply("old", CompactionPlan(store.load("old").version, archive_through_seq=0))
    assert store.client.hmget(meta, "error", "failures") == [None, None]


def test_conversations_lists_ids_and_forgets_cleared_ones(store):
    for cid in ["b", "a{1}", "c:*"]:
        store.append(cid, turn(0))
    store.clear("b")
    assert store.conversations() == ["a{1}", "c:*"]
    store.append("b", turn(0))
    assert store.load("b").last_seq == 2
    assert store.conversations() == ["a{1}", "b", "c:*"]


# -- faults ----------------------------------------------------------------------------------


def test_a_retried_append_is_not_applied_twice(fakeredis_store):
    store = fakeredis_store
    packed, _ = packed_batch([Event.user("once")])
    args = ["dup", 0, "token-1", "w", packed]
    store._do(store._run_steps("append", "dup", *args))
    # the same request again, as after a lost reply
    store._do(store._run_steps("append", "dup", *args))
    assert [e.content for e in store.history("dup")] == ["once"]


def test_a_digest_collision_is_refused(fakeredis_store):
    store = fakeredis_store
    store.append("one", turn(0))
    store.client.hset(store._keys("one")[0], "cid", "another id with the same digest")
    with pytest.raises(StorageError, match="digest"):
        store.append("one", turn(1))


def test_closed_port_gives_a_storage_error():
    store = open_store(f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5")
    try:
        with pytest.raises(StorageError, match="RedisStore.load failed"):
            store.load("nobody-home")
    finally:
        store.close()


def test_unreachable_cluster_gives_a_storage_error():
    with pytest.raises(StorageError, match="could not reach the cluster"):
        open_store(f"redis+cluster://127.0.0.1:{free_port()}")


@pytest.mark.redis
def test_server_down_then_back(tmp_path):
    server = start_redis(root=tmp_path / "one")
    store = open_store(server.url)
    try:
        store.append("restart", turn(0))
        server.stop()
        with pytest.raises(StorageError) as failure:
            store.append("restart", turn(1))
        assert "Connection" in str(failure.value)
        server = start_redis(
            root=tmp_path / "two", port=server.port
        )  # no persistence: starts empty
        assert store.append("restart", turn(2)).last_seq == 2
    finally:
        store.close()
        server.stop()


@pytest.mark.redis
def test_a_connection_error_mid_command_is_retried_not_reported(redis_store, monkeypatch):
    import redis

    redis_store.append("dropped", turn(0))
    connection_class = redis_store.client.connection_pool.connection_class
    original = connection_class.send_packed_command
    failures = []

    def drop_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise redis.ConnectionError("connection dropped (injected)")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(connection_class, "send_packed_command", drop_once)
    assert redis_store.append("dropped", turn(1)).last_seq == 4
    assert failures == [1]


@pytest.mark.redis_cluster
def test_a_cluster_node_down_fails_only_its_own_conversations():
    # without full coverage the live nodes keep serving their slots, as during a failover
    cluster = start_cluster("--cluster-require-full-coverage", "no")
    try:
        store = open_store(cluster.url)
        ids = [f"conversation {i}" for i in range(30)]
        for cid in ids:
            store.append(cid, turn(0))
        dead = cluster.nodes[1]
        on_dead = {
            cid
            for cid in ids
            if store.client.get_node_from_key(store._keys(cid)[0]).port == dead.port
        }
        assert on_dead and len(on_dead) < len(ids)
        dead.stop()
        for (
            cid
        ) in ids:  # the load script was never used before: it is loaded on the live node alone
            if cid in on_dead:
                with pytest.raises(StorageError, match="ConnectionError"):
                    store.load(cid)
            else:
                assert store.load(cid).last_seq == 2
        store.close()
    finally:
        cluster.stop()


def test_passed_in_clients_stay_open_and_owned_ones_close(fakeredis_client):
    RedisStore(fakeredis_client).close()
    assert fakeredis_client.ping()


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("redis_async", "AsyncRedisStore", "redis_aio"),
        ("redis_layout", "REDIS_LAYOUT", "redis_sansio"),
        ("redis_layout", "RedisLayout", "redis_sansio"),
    ],
)
def test_the_old_module_paths_forward_their_names_with_a_deprecation_warning(old, name, new):
    """Importing an old module warns of nothing (the store registry imports every module of
    the package); taking a name from it warns and gives the moved object."""
    import importlib
    import warnings

    sys.modules.pop(f"chat_memory.backends.{old}", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        module = importlib.import_module(f"chat_memory.backends.{old}")
    with pytest.warns(DeprecationWarning, match=f"chat_memory.backends.{new}"):
        moved = getattr(module, name)
    target = importlib.import_module(f"chat_memory.backends.{new}")
    assert moved is getattr(target, "RedisSansIO" if name == "RedisLayout" else name)


def test_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ConfigurationError, match=r"chat-memory\[redis\]"):
        RedisStore(object())


# -- search ----------------------------------------------------------------------------------


def test_search_is_literal_for_lua_pattern_characters(store):
    texts = ["50% off", "a.b", "(x", "%a", "[set]", "ŞTRASSE and Straße", "plain"]
    store.append("lua", [Event.user(t) for t in texts])
    memory = ChatMemory(store)
    for needle, expected in [
        ("50%", 1),
        ("a.b", 1),
        ("(", 1),
        ("%a", 1),
        ("[set", 1),
        ("strasse", 1),
        (".", 1),
    ]:
        assert memory.search("lua", needle).total == expected, needle
    assert memory.search("lua", "off plain", match_mode="any").total == 2
    assert memory.search("lua", "and straße", match_mode="all").total == 1
