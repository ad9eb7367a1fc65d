"""Fork, dump and restore on the Redis stores (chat_memory.backends.redis_transfer) against the
real redis-server and the real Redis Cluster: the transfer conformance suite, the native async
store doing what the sync one does, the timeline written by the compaction and retraction
scripts themselves, a conversation stored before timelines were kept, and a copy (the function
and `chat-memory copy`) from memory:// to Redis and back that keeps everything."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chat_memory import AsyncChatMemory, Event
from chat_memory.backends.base import Dumps
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.redis_io import LuaScript
from chat_memory.backends.redis_sansio import lua
from chat_memory.errors import InvalidInputError
from chat_memory.testing.transfer_conformance import (
    TransferConformance,
    _memory,
    _summarize,
    _tokens,
    _traffic,
)
from chat_memory.transfer import copy_store
from tests.fixtures.redis import unique_prefix

BACKENDS = [
    pytest.param("redis_server", marks=pytest.mark.redis, id="server"),
    pytest.param("redis_cluster", marks=pytest.mark.redis_cluster, id="cluster"),
]


@pytest.fixture(params=BACKENDS)
def server_url(request: pytest.FixtureRequest) -> str:
    """The real server's URL, then the real cluster's (each store picks a prefix of its own)."""
    return str(request.getfixturevalue(request.param).url)


@pytest.fixture
def url(server_url: str) -> str:
    return f"{server_url}?prefix={unique_prefix()}"


@pytest.fixture
def redis(url: str) -> Iterator[RedisStore]:
    store = RedisStore.from_url(url)
    yield store
    store.close()


class TestRedisTransfer(TransferConformance):
    @pytest.fixture
    def store(self, redis: RedisStore) -> RedisStore:
        return redis

    @pytest.fixture
    def second_store(self, server_url: str) -> Iterator[RedisStore]:
        store = RedisStore.from_url(f"{server_url}?prefix={unique_prefix()}")
        yield store
        store.close()


def test_the_native_async_store_forks_dumps_and_restores_as_the_sync_one(
    redis: RedisStore, url: str
) -> None:
    memory = _memory(redis)
    seen = _traffic(memory, "conv")
    expected = redis.dump("conv")
    assert expected is not None

    async def run() -> None:
        store = AsyncRedisStore.from_url(url)
        try:
            async_memory = AsyncChatMemory(store, memory.config, _summarize, _tokens)
            for seq, window in seen.items():
                assert await async_memory.fork("conv", f"async-{seq}", at=seq) == window, seq
            dump = await store.dump("conv")
            assert dump is not None and dump.checksum() == expected.checksum()
            await store.restore(dump.renamed("restored"))
            with pytest.raises(InvalidInputError, match="'restored'"):
                await store.restore(dump.renamed("restored"))
            assert await store.dump("missing") is None
        finally:
            await store.aclose()

    asyncio.run(run())
    assert memory.history("restored", include_retracted=True) == memory.history(
        "conv", include_retracted=True
    )
    assert memory.window("restored") == memory.window("conv")
    restored = redis.dump("restored")
    assert restored is not None and restored.checksum() == expected.checksum()


def test_a_fork_at_the_last_seq_in_the_same_slot_is_copied_by_the_server(
    redis: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within a scope (one hash slot, on a cluster too) a fork of the state now is fork.lua's
    server-side COPY; an earlier seq goes through dump and restore."""
    memory = _memory(redis)
    alice = memory.for_user("alice", app="support")
    _traffic(alice, "conv")
    alice.set_metadata("conv", title="First chat", tags=["vip"])
    ran: list[LuaScript] = []
    through = redis._script_steps

    def spy(source: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        ran.append(source)
        return through(source, keys, args)

    monkeypatch.setattr(redis, "_script_steps", spy)
    window = alice.fork("conv", "copy")
    assert [n for n in ("fork", "dump", "restore") if lua(n) in ran] == ["fork"]
    assert window == alice.window("conv")
    assert alice.history("copy", include_retracted=True) == alice.history(
        "conv", include_retracted=True
    )
    assert alice.compactions("copy") == alice.compactions("conv")
    (copy,) = [c for c in alice.conversations(tag="vip") if c.id == "copy"]
    (conv,) = [c for c in alice.conversations() if c.id == "conv"]
    assert copy.title == "First chat" and copy.created_at > conv.created_at
    last = max(e.seq or 0 for e in alice.history("conv", include_retracted=True))
    ran.clear()
    alice.fork("conv", "earlier", at=last - 1)
    assert [n for n in ("fork", "dump", "restore") if lua(n) in ran] == ["fork", "dump", "restore"]
    alice.add("copy", [Event.user("only in the copy")])
    assert alice.search("conv", "only in the copy").total == 0
    assert alice.window("copy")[-1].seq == last + 1
    with pytest.raises(InvalidInputError, match="'earlier'"):
        alice.fork("conv", "earlier")


def test_a_fork_gets_the_stores_expiry_not_the_sources(redis: RedisStore) -> None:
    expiring = RedisStore(redis.client, prefix=redis.prefix, ttl_seconds=600)
    _traffic(_memory(expiring), "conv", turns=3)
    lasting = _memory(redis)
    for at in (None, 2):  # copied by the server, then through dump and restore
        lasting.fork("conv", f"fork-{at}", at=at)
        assert {redis.client.pttl(k) for k in redis._keys(f"fork-{at}")[:11]} <= {-1, -2}
        expiring.fork("conv", f"expiring-{at}", at=at)
        kept = [redis.client.pttl(k) for k in redis._keys(f"expiring-{at}")[:11]]
        assert kept[0] > 0 and all(0 < ms <= 600_000 for ms in kept if ms != -2)  # -2: no key


def test_the_scripts_write_the_timeline_memory_writes(redis: RedisStore) -> None:
    """The same traffic leaves the same timeline on Redis as on memory:// (compactions in the
    append's script and in apply.lua, a retraction, a pin the archive cap deleted)."""
    reference = InMemoryStore(max_archived_events=3)
    capped = RedisStore(redis.client, prefix=redis.prefix, max_archived_events=3)
    for store in (reference, capped):
        memory = _memory(store, "turn_window")
        _traffic(memory, "conv")
        memory.compact("conv", force=True)
    ours, theirs = capped.dump("conv"), reference.dump("conv")
    assert ours is not None and theirs is not None
    kinds = {entry["kind"] for entry in ours.timeline}
    assert kinds == {"compaction", "retraction", "dropped_pin"}
    assert ours.timeline == theirs.timeline and ours.timeline_from == 0


def test_a_conversation_stored_before_timelines_forks_only_from_where_its_timeline_starts(
    redis: RedisStore,
) -> None:
    memory = _memory(redis, "turn_window")
    untouched = _memory(redis, "none")
    untouched.add("plain", [Event.user("one"), Event.assistant("two")])
    _traffic(memory, "old", turns=5)  # compactions and a retraction
    # as an older chat-memory left them: no timeline, no meta.timeline_from
    for cid in ("old", "plain"):
        keys = redis._keys(cid)
        redis.client.delete(keys[10])
        redis.client.hdel(keys[0], "timeline_from")
    then = memory.window("old")
    dump = redis.dump("old")
    assert dump is not None and dump.timeline_from == dump.last_seq
    # the entries that make the state at its last seq exact: everything before, in one
    assert [e["kind"] for e in dump.timeline] == ["compaction", "retraction"]
    with pytest.raises(InvalidInputError, match=rf"at \(3\) is before.*from seq {dump.last_seq}"):
        memory.fork("old", "f", at=3)
    # written by the next change (a retraction: no new seq), in the same script; the state
    # then rebuilds exactly after more traffic
    memory.retract("old", [then[-1].id])
    then = memory.window("old")  # the last state at that seq, as a fork there shows it
    memory.add("old", [Event.user("more"), Event.assistant("ok")])
    memory.add("old", [Event.user("again"), Event.assistant("ok")])
    later = redis.dump("old")
    assert later is not None and later.timeline_from == dump.last_seq
    assert later.timeline[:2] == dump.timeline and len(later.timeline) > 3
    assert memory.fork("old", "then", at=dump.last_seq) == then
    # nothing compacted or retracted: its whole past rebuilds without a timeline
    plain = redis.dump("plain")
    assert plain is not None and plain.timeline_from == 0 and not plain.timeline
    assert [e.content for e in memory.fork("plain", "p1", at=1)] == ["one"]
    # where the timeline starts survives a copy (to another prefix)
    target = RedisStore(redis.client, prefix=unique_prefix())
    copy_store(redis, target, conversations=["old"])
    moved = target.dump("old")
    assert moved is not None and moved.timeline_from == later.timeline_from
    assert moved.checksum() == later.checksum()


def test_copy_from_memory_to_redis_and_back_keeps_everything(redis: RedisStore) -> None:
    source = InMemoryStore()
    memory = _memory(source)
    _traffic(memory, "conv")
    memory.store.record_compaction_error("conv", "summarizer timed out")
    alice = memory.for_user("alice", app="support")
    _traffic(alice, "chat", turns=3)
    alice.set_metadata("chat", title="First chat", tags=["billing"], priority="high")
    there = copy_store(source, redis)
    back = InMemoryStore()
    again = copy_store(redis, back)
    assert there.conversations == again.conversations == 2
    assert there.checksums == again.checksums
    for key in source.conversations():
        original, returned = source.dump(key), back.dump(key)
        assert original is not None and returned is not None
        assert returned.checksum() == original.checksum()
        assert returned.counts() == original.counts()
    conv = source.dump("conv")
    assert conv is not None
    counts = conv.counts()
    assert counts["retracted"] and counts["summaries"] > 1 and counts["records"]
    restored = _memory(back).for_user("alice", app="support")
    assert restored.conversations()[0].title == "First chat"
    assert restored.window("chat") == alice.window("chat")


def test_the_copy_command_moves_conversations_from_sqlite_to_redis_and_back(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chat_memory import open_store
    from chat_memory.host.cli import main

    first, back = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'back.db'}"
    with open_store(first) as source:
        memory = _memory(source)
        _traffic(memory, "conv")
        bob = memory.for_user("bob")
        _traffic(bob, "chat", turns=3)
        bob.set_metadata("chat", title="Bob's chat", tags=["vip"])
    assert main(["copy", "--from", first, "--to", url]) == 0
    assert main(["copy", "--from", url, "--to", back]) == 0
    assert "Copied 2 conversations" in capsys.readouterr().err
    with open_store(first) as source, open_store(back) as returned_store:
        assert isinstance(source, Dumps) and isinstance(returned_store, Dumps)
        for key in source.conversations():
            original, returned = source.dump(key), returned_store.dump(key)
            assert original is not None and returned is not None
            assert returned.checksum() == original.checksum()
