"""Fork, dump and restore on S3 (chat_memory/backends/s3/transfer.py, docs/s3.md): the transfer
conformance suite on moto's server with small segments (so that archive, window, retracted
and timeline segments all exist and get copied), the fork property test over random traffic
(a few examples: S3 over moto is slow), the fork's requests (server-side copies, no segment
read for a fork at the last seq), the timeline spilled out of the head, the archive cap's
dropped pins and refused forks (the same as memory://'s), a conversation stored before
timelines were kept, and memory:// -> S3 -> memory:// copies that change nothing."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.s3 import S3Store
from chat_memory.backends.s3.timeline import INLINE_ENTRIES
from chat_memory.errors import InvalidInputError
from chat_memory.testing.transfer_conformance import TransferConformance
from chat_memory.transfer import copy_store
from tests.support.forks import OPERATIONS, STRATEGIES, summarize, traffic, turn
from tests.support.helpers import fixed_tokens


def _small(store: S3Store) -> S3Store:
    """Small segments: a few turns fill archive, window and retracted segments."""
    store.segment_events = 4
    store.tail_events = 4
    return store


@pytest.fixture
def second_server_store(moto_server: str) -> Iterator[S3Store]:
    store = S3Store.from_url(
        f"s3://chat-memory-tests/copy-{uuid.uuid4().hex[:12]}?endpoint_url={moto_server}"
        "&region=us-east-1"
    )
    yield store
    store.close()


@pytest.mark.s3
class TestS3Transfer(TransferConformance):
    """The conformance suite on moto's server (real HTTP, CopyObject included)."""

    @pytest.fixture
    def store(self, s3_server_store: S3Store) -> S3Store:
        return _small(s3_server_store)

    @pytest.fixture
    def second_store(self, second_server_store: S3Store) -> S3Store:
        return _small(second_server_store)


class Operations:
    """S3 operations of one boto3 client, by name, while counting."""

    def __init__(self, client: Any) -> None:
        self.seen: Counter[str] = Counter()
        self.active = False
        client.meta.events.register("before-call.s3", self._called)

    def _called(self, model: Any, **_: Any) -> None:
        if self.active:
            self.seen[model.name] += 1

    def __enter__(self) -> Counter[str]:
        self.seen.clear()
        self.active = True
        return self.seen

    def __exit__(self, *exc: object) -> None:
        self.active = False


def _memory(store: Any, config: dict[str, Any]) -> ChatMemory:
    return ChatMemory(store, MemoryConfig(**config), summarize, token_counter=fixed_tokens)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=st.sampled_from(STRATEGIES), operations=OPERATIONS)
def test_an_s3_fork_at_any_seq_shows_exactly_the_window_and_history_then(
    s3_mock_client: Any, config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    store = _small(S3Store(s3_mock_client, "chat-memory-mock", f"fork-{uuid.uuid4().hex[:12]}"))
    memory = _memory(store, config)
    seen = traffic(memory, operations)

    async def fork_async(seq: int) -> tuple[Any, Any]:
        async_memory = AsyncChatMemory(store, memory.config, summarize, fixed_tokens)
        await async_memory.fork("c", f"fork-{seq}", at=seq)
        return await async_memory.model_window(f"fork-{seq}"), await async_memory.history(
            f"fork-{seq}"
        )

    for seq, (window, history) in seen.items():
        if seq == 0:
            continue
        if seq % 2:  # half of them through the async memory (ThreadedStore)
            assert asyncio.run(fork_async(seq)) == (window, history), seq
            continue
        memory.fork("c", f"fork-{seq}", at=seq)
        assert memory.model_window(f"fork-{seq}") == window, seq
        assert memory.history(f"fork-{seq}") == history, seq
    last = max(seen)
    if last:
        memory.add(f"fork-{last}", [Event.user("only on the side")])
        assert memory.search("c", "only on the side").total == 0
        memory.add("c", [Event.user("only on the original")])
        assert memory.search(f"fork-{last}", "only on the original").total == 0


def test_a_fork_at_the_last_seq_copies_every_segment_server_side(s3_mock_store: S3Store) -> None:
    store = _small(s3_mock_store)
    memory = _memory(store, STRATEGIES[1])
    then: tuple[int, Any, Any] = (0, None, None)
    for i in range(24):  # a compaction a turn from the third: 22 entries, a segment spilled
        memory.add("c", turn(i, call=i % 5 == 0, system=i == 0))
        if i == 18:
            then = (store.load("c").last_seq, memory.model_window("c"), memory.history("c"))
    memory.retract("c", [memory.window("c")[-1].id])
    head = store._read_head("c")
    assert head is not None
    head_of_c = head[0]
    objects = (
        len(head_of_c.segments)
        + len(head_of_c.window)
        + len(head_of_c.retracted)
        + len(head_of_c.timeline.segments)
    )
    assert head_of_c.timeline.segments and head_of_c.retracted and head_of_c.segments
    assert len(head_of_c.timeline.entries) <= INLINE_ENTRIES  # every head write stays bounded
    with Operations(store.client) as seen:
        window = memory.fork("c", "now")
    # GETs: the source head, the new id's (absent), the erasure guard read after the create,
    # the new head and its window segments read back for the window; no other segment read:
    # a copy per object, one head PUT
    gets = 4 + len(head_of_c.window)
    assert seen == Counter({"GetObject": gets, "CopyObject": objects, "PutObject": 1}), seen
    assert window == memory.window("c")
    original, fork = store.dump("c"), store.dump("now")
    assert original is not None and fork is not None
    assert fork.renamed("c").events == original.events
    assert fork.timeline == original.timeline and fork.records == original.records
    # an earlier seq: the archive segments it shares are copied, the rest written anew
    seq, window_then, history_then = then
    with Operations(store.client) as seen:
        memory.fork("c", "earlier", at=seq)
    assert seen["CopyObject"] >= 1 and seen["PutObject"] >= 2
    assert memory.model_window("earlier") == window_then
    assert memory.history("earlier") == history_then


def test_the_archive_cap_records_the_pins_it_drops_on_s3(s3_mock_client: Any) -> None:
    store = S3Store(s3_mock_client, "chat-memory-mock", "pins", max_archived_events=2)
    memory = _memory(store, STRATEGIES[1])
    memory.add("c", [Event.system("old rule"), *turn(1, call=False, system=False)])  # 1-3
    memory.add("c", turn(2, call=False, system=False))  # 4-5
    memory.add("c", turn(3, call=False, system=False))  # 6-7
    memory.add("c", [Event.system("new rule"), *turn(4, call=False, system=False)])  # 8-10
    memory.add("c", turn(5, call=False, system=False))
    dump = store.dump("c")
    assert dump is not None
    assert {"kind": "dropped_pin", "seq": 1, "key": "system"} in dump.timeline
    with pytest.raises(InvalidInputError, match=r"at \(7\) is too far back.*seq 1"):
        memory.fork("c", "f", at=7)
    assert memory.fork("c", "f", at=10)[0].content == "new rule"


def test_a_head_stored_before_timelines_refuses_earlier_forks_and_reports_where_it_starts(
    s3_mock_store: S3Store,
) -> None:
    store = s3_mock_store
    memory = _memory(store, STRATEGIES[1])
    for i in range(4):
        memory.add("c", turn(i, call=False, system=False))
    key = store.layout.head("c")
    doc = json.loads(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
    del doc["timeline"]  # as chat-memory before this change wrote it
    store.client.put_object(Bucket=store.bucket, Key=key, Body=json.dumps(doc).encode())
    store._heads.drop("c")
    dump = store.dump("c")
    assert dump is not None and dump.timeline_from == 8 and dump.timeline == ()
    with pytest.raises(InvalidInputError, match=r"at \(5\) is before.*from seq 8"):
        memory.fork("c", "f", at=5)
    memory.add("c", turn(9, call=False, system=False))  # 9-10, compacts: the timeline starts
    window_at_10 = memory.window("c")
    memory.add("c", turn(10, call=False, system=False))  # 11-12
    memory.fork("c", "f", at=10)
    assert memory.window("f") == window_at_10
    later = store.dump("c")
    assert later is not None and later.timeline_from == 8 and len(later.timeline) == 2
    # a head that never lost an event starts its timeline at 0
    memory.add("fresh", [Event.user("hi")])
    fresh_key = store.layout.head("fresh")
    doc = json.loads(store.client.get_object(Bucket=store.bucket, Key=fresh_key)["Body"].read())
    del doc["timeline"]
    store.client.put_object(Bucket=store.bucket, Key=fresh_key, Body=json.dumps(doc).encode())
    fresh = store.dump("fresh")
    assert fresh is not None and fresh.timeline_from == 0


def test_copying_memory_to_s3_and_back_preserves_everything(s3_mock_client: Any) -> None:
    source = InMemoryStore()
    memory = _memory(source, STRATEGIES[4])
    for i in range(8):
        memory.add("c", turn(i, call=i % 3 == 0, system=i in (0, 5)))
    memory.retract("c", [memory.window("c")[-1].id])
    memory.rewind("c", memory.store.load("c").last_seq - 2)
    alice = memory.for_user("alice", app="support")
    alice.add("chat", turn(1, call=True, system=False))
    alice.set_metadata("chat", title="First", tags=["vip", "billing"], priority="high")
    s3 = _small(S3Store(s3_mock_client, "chat-memory-mock", f"copy-{uuid.uuid4().hex[:12]}"))
    back = InMemoryStore()
    there = copy_store(source, s3)
    again = copy_store(s3, back)
    assert there.checksums == again.checksums and there.conversations == 2
    returned = _memory(back, STRATEGIES[4])
    for cid in source.conversations():
        original, moved = source.dump(cid), back.dump(cid)
        assert original is not None and moved is not None
        assert moved == original  # every event with its flags, records, timeline, metadata
        assert returned.history(cid, include_retracted=True) == memory.history(
            cid, include_retracted=True
        )
        assert returned.window(cid) == memory.window(cid)
        assert returned.compactions(cid) == memory.compactions(cid)
    assert returned.for_user("alice", app="support").conversations() == alice.conversations()


def test_the_s3_archive_cap_drops_pins_and_refuses_forks_as_memory_does(
    s3_mock_client: Any,
) -> None:
    """A small cap and two-event segments: the cap drops whole segments, skips into one and
    cuts the batch being filed; the pins it drops and the forks it refuses match memory://."""
    # a pin superseded every other turn: filed pins later dropped with a whole segment, with
    # the first events of one (the cap skips into it) and cut off the batch being filed
    operations = [("add", i % 2 == 0, i % 2) for i in range(12)]
    s3 = S3Store(s3_mock_client, "chat-memory-mock", "cap", max_archived_events=6)
    s3.segment_events = 2
    results = []
    for store in (InMemoryStore(max_archived_events=6), s3):
        memory = _memory(store, STRATEGIES[1])
        seen = traffic(memory, operations)
        dump = store.dump("c")
        assert dump is not None
        dropped = [e for e in dump.timeline if e["kind"] == "dropped_pin"]
        forks: dict[int, Any] = {}
        for seq in seen:
            try:
                memory.fork("c", f"fork-{seq}", at=seq)
                # each store's run made its own events (ids): compare what they say
                forks[seq] = [
                    (e.seq, e.type, e.content) for e in memory.model_window(f"fork-{seq}")
                ]
            except InvalidInputError as exc:
                forks[seq] = str(exc)
        results.append((dropped, forks))
    assert results[1] == results[0]
    assert len(results[0][0]) >= 3 and any(isinstance(f, str) for f in results[0][1].values())
