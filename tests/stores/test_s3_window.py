"""The S3 store's window segments: the head keeps a tail of at most ``tail_events`` active
events and seals older ones into immutable segments with a Bloom filter of their ids and
call ids. With a tail of two events every store rule (the conformance suite) runs through
sealed segments; then sealing races, compaction across segments, and heads written in the
older layout (the whole window in the head)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.s3 import S3Store
from chat_memory.backends.s3.layout import Head, SegmentRef, bloom_of, call_key, id_key
from chat_memory.errors import InvalidEventError
from chat_memory.search import SearchQuery
from chat_memory.testing.store_conformance import StoreConformance
from tests.conftest import WRITER_PROCESSES as WRITERS
from tests.support.helpers import fixed_tokens, seqs
from tests.support.s3_segments import numbered, object_keys, referenced, stored_head
from tests.support.workers import append_turns

NONE = MemoryConfig(compaction_strategy="none")


def small_store(client, prefix: str | None = None, tail: int = 2) -> S3Store:
    return S3Store(
        client, "window-bucket", prefix or uuid.uuid4().hex[:12], tail_events=tail, segment_events=2
    )


class TestEveryRuleThroughWindowSegments(StoreConformance):
    """The conformance suite with a two-event tail: most active events live in segments."""

    @pytest.fixture
    def store(self, s3_mock_client):
        store = small_store(s3_mock_client)
        yield store
        store.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=300, unique=True))
def test_a_bloom_filter_never_misses_a_key_it_holds(ids):
    events = [Event.tool_result(i, "r", tokens=1).model_copy(update={"id": i}) for i in ids]
    ref = SegmentRef("w", 1, len(ids), len(ids), bloom=bloom_of(events))
    assert all(ref.may_hold(id_key(i)) and ref.may_hold(call_key(i)) for i in ids)
    # a key it does not hold is (almost always) told apart: 16 bits and 8 probes per key
    misses = sum(ref.may_hold(id_key(f"absent-{k}")) for k in range(2000))
    assert misses <= 20


def test_the_head_holds_a_bounded_tail_and_the_window_reads_whole(s3_mock_client):
    store = small_store(s3_mock_client, tail=4)
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    batches = [numbered(2, k) for k in range(0, 40, 2)]
    for batch in batches:
        memory.add("c", batch)
    doc = stored_head(store, "c")
    assert (
        doc["format"] == 2
        and len(doc["active"]) <= 4
        and len(doc["window"]) == 40 // 4 - (len(doc["active"]) == 4)
    )
    assert seqs(store.load("c").window.active) == list(range(1, 41))
    assert [e.seq for e in store.history("c")] == list(range(1, 41))
    assert [e.seq for e in store.search("c", SearchQuery.build("r12")).events] == [
        14
    ]  # in a segment
    assert referenced(store, "c") == object_keys(store)
    # a retry of events sealed long ago is recognised (by the Bloom filter, then the segment)
    again = memory.add("c", [*batches[0], *batches[1]])
    assert seqs(again) == [1, 2, 3, 4] and store.load("c").last_seq == 40
    with pytest.raises(InvalidEventError, match="already in the window"):
        memory.add("c", [Event.tool_call("f", {}, call_id="c6")])
    with pytest.raises(InvalidEventError, match="second tool_result"):
        memory.add("c", [Event.tool_result("c6", "again")])


def test_a_compaction_archives_across_window_segments_and_retires_them(s3_mock_client):
    store = small_store(s3_mock_client, tail=3)
    events = numbered(20)
    store.append("c", events)
    assert len(store._read_head("c")[0].window) == 6
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=7))
    head = store._read_head("c")[0]
    assert [ref.skip for ref in head.window][:1] == [1]  # seqs 7-9: seq 7 archived, 8 and 9 active
    assert (
        seqs(store.load("c").window.active) == list(range(8, 21))
        and store.load("c").archived_count == 7
    )
    assert [(e.seq, e.archived) for e in store.history("c")][5:9] == [
        (6, True),
        (7, True),
        (8, False),
        (9, False),
    ]
    assert referenced(store, "c") == object_keys(store)  # wholly archived segments deleted
    found = store.find_events("c", [events[6].id, events[7].id], ["c6"])
    # seq 7 (id of the 7th event, archived) is found by call id only, marked archived
    assert [(e.seq, e.archived) for e in found] == [(7, True), (8, False)]


def test_concurrent_writers_seal_without_losing_or_duplicating(s3_mock_client):
    prefix = uuid.uuid4().hex[:12]
    writers = [small_store(s3_mock_client, prefix, tail=3) for _ in range(4)]
    batches = [numbered(2, 100 * w + 2 * i) for w in range(4) for i in range(10)]

    def write(w: int) -> None:
        memory = ChatMemory(writers[w], NONE, token_counter=fixed_tokens)
        for i in range(10):
            memory.add("c", batches[10 * w + i])
            memory.add("c", batches[10 * w + i])  # retried: stored once

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    active = writers[0].load("c").window.active
    assert seqs(active) == list(range(1, 81))
    assert sorted(e.id for e in active) == sorted(e.id for batch in batches for e in batch)
    assert referenced(writers[0], "c") == object_keys(writers[0])  # losers' segments deleted


def test_a_head_in_the_older_layout_is_read_and_sealed_by_the_next_write(s3_mock_client):
    store = small_store(s3_mock_client, tail=8)
    old = numbered(30)
    # what an older chat-memory wrote: format 1, the whole window in the head, no blooms
    head = Head.new("c").evolve(
        version=1,
        last_seq=30,
        active=tuple(e.model_copy(update={"seq": i + 1}) for i, e in enumerate(old)),
    )
    doc = json.loads(head.to_bytes())
    doc.pop("archive_blooms")
    store.client.put_object(
        Bucket=store.bucket, Key=store.layout.head("c"), Body=json.dumps(doc).encode()
    )
    reader = small_store(s3_mock_client, store.layout.prefix.rstrip("/"), tail=8)
    assert seqs(reader.load("c").window.active) == list(range(1, 31))
    assert [e.seq for e in reader.find_events("c", [old[3].id], ["c10"])] == [4, 11, 12]
    memory = ChatMemory(reader, NONE, token_counter=fixed_tokens)
    assert seqs(memory.add("c", [*old[:2], Event.user("new", tokens=1)])) == [1, 2, 31]
    doc = stored_head(reader, "c")
    assert doc["format"] == 2 and len(doc["active"]) == 31 - 24 and len(doc["window"]) == 3
    assert seqs(reader.load("c").window.active) == list(range(1, 32))


def test_blooms_dropped_by_an_older_writer_only_make_look_ups_fetch_more(s3_mock_client):
    store = small_store(s3_mock_client, tail=64)
    store.append("c", numbered(6))
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=4))
    doc = stored_head(store, "c")
    assert doc["format"] == 1 and doc["archive_blooms"] and all(doc["archive_blooms"])
    doc.pop("archive_blooms")  # an older chat-memory rewrote the head
    store.client.put_object(
        Bucket=store.bucket, Key=store.layout.head("c"), Body=json.dumps(doc).encode()
    )
    fresh = small_store(s3_mock_client, store.layout.prefix.rstrip("/"), tail=64)
    assert [(e.seq, e.archived) for e in fresh.find_tool_events("c", ["c2"])] == [
        (3, True),
        (4, True),
    ]


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.parametrize("strategy", ["none", "sliding_window"])
def test_eight_processes_sealing_over_http_lose_nothing(s3_url, strategy, writer_processes):
    """Eight writer processes on moto's server, a four-event tail: nearly every add seals a
    segment (the lean append under ``none``; with compaction, archiving across segments)."""
    url, turns = f"{s3_url}&tail_events=4", 12
    done = list(
        writer_processes.map(
            append_turns,
            [url] * WRITERS,
            ["shared"] * WRITERS,
            range(WRITERS),
            [turns] * WRITERS,
            [strategy] * WRITERS,
        )
    )
    assert done == [turns] * WRITERS
    store = S3Store.from_url(url)
    try:
        history = store.history("shared")
        assert [e.seq for e in history] == list(range(1, 2 * WRITERS * turns + 1))
        users = {e.content for e in history if e.content.startswith("w") and "-t" in e.content}
        assert users == {f"w{w}-t{i}" for w in range(WRITERS) for i in range(turns)}
        window = store.load("shared").window.active
        if strategy == "none":
            assert seqs(window) == list(range(1, 2 * WRITERS * turns + 1))
        else:
            assert 1 <= len(window) <= 6 and store.load("shared").archived_count == len(
                history
            ) - len(window)
        assert referenced(store, "shared") == object_keys(store)  # no orphan left by a lost race
    finally:
        store.close()
