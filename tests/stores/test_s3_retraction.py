"""Retraction on the S3 store: one conditional head swap moves the events (and their tool
partners) from the tail, the window segments and the archive into a retracted segment; the
segments that held them are rewritten without them. Run on moto in-process and on moto's
server over HTTP, with a three-event tail and two-event segments so that every retraction
reaches into sealed window segments and archive segments."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.s3 import S3Store, layout
from chat_memory.errors import InvalidInputError, SchemaError
from chat_memory.search import SearchQuery
from tests.fixtures.s3 import STORE_PARAMS
from tests.support.helpers import fixed_tokens, seqs
from tests.support.s3_segments import numbered, object_keys, referenced, stored_head

NONE = MemoryConfig(compaction_strategy="none")


@pytest.fixture(params=STORE_PARAMS)
def base(request) -> S3Store:
    return request.getfixturevalue(request.param)


def small(base: S3Store, prefix: str | None = None, **options) -> S3Store:
    options = {"tail_events": 3, "segment_events": 2, **options}
    return S3Store(
        base.client, base.bucket, prefix or uuid.uuid4().hex[:12], create_bucket=False, **options
    )


def test_a_retraction_takes_events_and_partners_out_of_the_tail_the_window_and_the_archive(base):
    store = small(base)
    events = numbered(20)
    store.append("c", events)
    assert store.apply(
        "c",
        CompactionPlan(store.load("c").version, archive_through_seq=7, summary=Event.summary("s")),
    )
    version = store.load("c").version
    # seq 3 (archived call c2), seq 10 (result c8, in a window segment), seq 20 (result c18, the tail)
    taken = store.retract("c", [events[2].id, events[9].id, events[19].id, "unknown"])
    assert [(e.seq, e.retracted, e.archived) for e in taken] == [
        (s, True, False) for s in (3, 4, 9, 10, 19, 20)
    ]
    assert [e.content for e in taken] == [
        e.content for e in (events[2], events[3], events[8], events[9], events[18], events[19])
    ]
    snapshot = store.load("c")
    gone = {3, 4, 9, 10, 19, 20}
    assert snapshot.version == version + 1 and snapshot.last_seq == 21
    assert seqs(snapshot.window.active) == [s for s in range(8, 21) if s not in gone]
    assert snapshot.archived_count == 5
    assert [e.seq for e in store.history("c")] == [s for s in range(1, 22) if s not in gone]
    assert store.search("c", SearchQuery.build("r8")).total == 0
    assert store.search("c", SearchQuery.build("r2")).total == 0
    assert store.find_events("c", [events[9].id, events[19].id], ["c2", "c8", "c18"]) == []
    assert store.retracted("c") == taken
    assert referenced(store, "c") == object_keys(
        store
    )  # the rewritten segments' old objects are gone
    # idempotent: nothing left to retract, nothing written
    assert (
        store.retract("c", [events[2].id, events[19].id]) == []
        and store.load("c").version == version + 1
    )


def test_a_retracted_id_and_call_id_may_be_added_again_and_seqs_are_never_reused(base):
    store = small(base)
    events = numbered(12)
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    memory.add("c", events)
    store.retract("c", [events[1].id])  # c0's pair, sealed in the first window segment
    again = memory.add("c", events[:2])  # the tool-pair check and idempotency see them as absent
    assert seqs(again) == [13, 14]
    assert store.append_without_window("c", events[:2])[0].seq == 13  # now stored: idempotent again
    assert [e.seq for e in store.retracted("c")] == [1, 2]
    assert seqs(store.load("c").window.active) == list(range(3, 15))


def test_pinned_events_and_summaries_are_refused_before_anything_is_written(base):
    store = small(base)
    store.append("c", [Event.system("be brief", tokens=1), *numbered(8)])
    assert store.apply(
        "c",
        CompactionPlan(store.load("c").version, archive_through_seq=4, summary=Event.summary("s1")),
    )
    first_summary = store.load("c").window.summary
    store.append("c", numbered(4, 100))
    assert store.apply(
        "c",
        CompactionPlan(store.load("c").version, archive_through_seq=8, summary=Event.summary("s2")),
    )
    snapshot = store.load("c")
    before, keys = stored_head(store, "c"), object_keys(store)
    for event in (
        snapshot.window.pinned[0],
        snapshot.window.summary,
        first_summary,
    ):  # the last one is archived
        with pytest.raises(InvalidInputError, match=event.id):
            store.retract("c", [snapshot.window.active[-1].id, event.id])
    assert stored_head(store, "c") == before and object_keys(store) == keys
    with pytest.raises(InvalidInputError, match="not the string"):
        store.retract("c", "abc")
    with pytest.raises(InvalidInputError, match="event_ids: 3"):
        store.retract("c", ["a", 3])


def test_a_head_holding_retractions_is_format_3_which_older_code_refuses(base, monkeypatch):
    store = small(base)
    events = numbered(8)
    store.append("c", events)
    assert stored_head(store, "c")["format"] == 2  # no retraction yet: older code still reads it
    store.retract("c", [events[7].id])
    assert stored_head(store, "c")["format"] == 3
    older = dataclasses.replace(
        layout.HEAD_FORMAT, current=2, migrations=layout.HEAD_FORMAT.migrations[:1]
    )
    monkeypatch.setattr(layout, "HEAD_FORMAT", older)
    with pytest.raises(SchemaError, match="version 3, newer than version 2"):
        small(base, store.layout.prefix.rstrip("/")).load("c")


def test_a_format_2_head_is_upgraded_and_retracts(base):
    store = small(base)
    events = numbered(8)
    store.append("c", events)
    doc = stored_head(store, "c")
    assert doc["format"] == 2 and "retracted" not in doc
    reader = small(base, store.layout.prefix.rstrip("/"))
    assert [e.seq for e in reader.retract("c", [events[0].id])] == [1, 2]
    assert seqs(reader.load("c").window.active) == list(range(3, 9))


def test_clear_deletes_the_retracted_segments(base):
    store = small(base)
    events = numbered(10)
    store.append("c", events)
    store.retract("c", [events[0].id, events[9].id])
    assert object_keys(store)
    store.clear("c")
    assert object_keys(store) == set() and store.retracted("c") == [] and store.history("c") == []


def test_many_retractions_fold_into_few_retracted_segments(base):
    store = small(base, segment_events=8)
    users = [Event.user(f"u{i}", tokens=1) for i in range(16)]
    store.append("c", users)
    for event in reversed(users):  # newest first: the retracted segments are not in seq order
        assert [e.id for e in store.retract("c", [event.id])] == [event.id]
    head = store._read_head("c")[0]
    assert len(head.retracted) <= 3 and sum(ref.count for ref in head.retracted) == 16
    assert [e.content for e in store.retracted("c")] == [f"u{i}" for i in range(16)]
    assert referenced(store, "c") == object_keys(store)
    assert store.load("c").window.active == () and store.load("c").last_seq == 16


def test_the_archive_cap_and_compaction_keep_working_after_a_retraction(base):
    store = small(base, max_archived_events=4)
    events = numbered(16)
    store.append("c", events)
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=6))
    assert [e.seq for e in store.history("c")][:4] == [3, 4, 5, 6]  # the cap dropped 1 and 2
    store.retract(
        "c", [events[2].id, events[7].id]
    )  # archived pair c2 (3, 4), active pair c6 (7, 8)
    assert store.load("c").archived_count == 2
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=12))
    history = store.history("c")
    assert [(e.seq, e.archived) for e in history] == [
        (s, s <= 12) for s in (9, 10, 11, 12, 13, 14, 15, 16)
    ]
    assert store.load("c").archived_count == 4
    assert [e.seq for e in store.retracted("c")] == [3, 4, 7, 8]
    assert referenced(store, "c") == object_keys(store)


def test_an_appending_and_a_retracting_writer_never_lose_an_append_nor_bring_one_back(base):
    prefix = uuid.uuid4().hex[:12]
    appender, retractor = small(base, prefix), small(base, prefix)
    old = [Event.user(f"old{i}", tokens=1) for i in range(20)]
    appender.append("c", old)
    assert appender.apply("c", CompactionPlan(appender.load("c").version, archive_through_seq=6))
    new = [Event.user(f"new{i}", tokens=1) for i in range(20)]
    doomed = {e.id for e in old} | {e.id for e in new[::2]}
    taken: list[Event] = []

    def append() -> None:
        for event in new:
            appender.append("c", [event])

    def retract() -> None:
        for event in old:  # one by one, in the archive, the window segments and the tail
            taken.extend(retractor.retract("c", [event.id]))
        remaining = {e.id for e in new[::2]}
        while remaining:  # the new ones as soon as they are stored
            for event in retractor.retract("c", sorted(remaining)):
                taken.append(event)
                remaining.discard(event.id)

    threads = [threading.Thread(target=append), threading.Thread(target=retract)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    history = appender.history("c")
    assert [e.id for e in history] == [
        e.id for e in new[1::2]
    ]  # every append kept, no retraction undone
    assert sorted(e.id for e in taken) == sorted(doomed)  # each retracted exactly once
    assert sorted(e.id for e in appender.retracted("c")) == sorted(doomed)
    assert sorted(e.seq for e in [*history, *appender.retracted("c")]) == list(range(1, 41))
    assert appender.load("c").last_seq == 40
    assert referenced(appender, "c") == object_keys(appender)  # losers' segments deleted


def test_the_memory_rewinds_and_retracts_on_s3_sync_and_async(base):
    store = small(base)
    memory = ChatMemory(store, NONE, token_counter=fixed_tokens)
    memory.add("c", numbered(12))
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=4))
    # seq 4 is the archived result of c2: rewinding to 3 takes its call too, and everything after
    assert [e.seq for e in memory.rewind("c", 3)] == list(range(3, 13))
    assert [(e.seq, e.retracted) for e in memory.history("c", include_retracted=True)] == [
        (s, s >= 3) for s in range(1, 13)
    ]
    asynchronous = AsyncChatMemory(store, {"compaction_strategy": "none"})

    async def scenario() -> list[int]:
        await asynchronous.add("c", [Event.user("again", tokens=1)])
        try:
            return [
                e.seq
                for e in await asynchronous.retract("c", [(await asynchronous.history("c"))[0].id])
            ]
        finally:
            await asynchronous.aclose()

    assert asyncio.run(scenario()) == [1, 2]  # the pair c0
    assert [e.seq for e in store.history("c")] == [13]


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("retract"), st.lists(st.integers(0, 40), max_size=3)),
        st.tuples(st.just("compact"), st.integers(0, 8)),
    ),
    max_size=14,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_OPS)
def test_any_mix_of_appends_retractions_and_compactions_matches_the_in_memory_store(
    s3_mock_store, ops
):
    """The in-memory store is the reference: same history, window, archive and retracted events."""
    store, reference = (
        small(s3_mock_store, max_archived_events=5),
        InMemoryStore(max_archived_events=5),
    )
    ids: list[str] = []
    for op, arg in ops:
        if op == "append":
            batch = numbered(arg, 2 * len(ids))
            ids += [e.id for e in batch]
            for target in (store, reference):
                target.append("c", batch)
        elif op == "retract":
            chosen = [ids[i] for i in arg if i < len(ids)]
            assert store.retract("c", chosen) == reference.retract("c", chosen)
        else:
            snapshot = reference.load("c")
            active = [e.seq or 0 for e in snapshot.window.active]
            through = active[min(arg, len(active)) - 1] if active and arg else 0
            plan = CompactionPlan(store.load("c").version, archive_through_seq=through)
            assert store.apply("c", plan) == reference.apply(
                "c", dataclasses.replace(plan, expected_version=snapshot.version)
            )
    assert store.history("c") == reference.history("c")
    assert store.retracted("c") == reference.retracted("c")
    mine, theirs = store.load("c"), reference.load("c")
    assert (mine.window, mine.archived_count, mine.last_seq) == (
        theirs.window,
        theirs.archived_count,
        theirs.last_seq,
    )
