"""Concurrent writers and retried adds on every memory kind (the ``memory`` fixture: see
test_engine.py): nothing lost, each add contiguous, a retry stored once and answered with the
stored copy, whether it comes later or at the same moment from another thread (for the async
kinds: concurrent coroutines on one event loop)."""

from __future__ import annotations

import threading

from chat_memory import Event, EventType
from chat_memory.events import split_turns
from tests.fixtures.memory_kinds import MemoryKit
from tests.support.helpers import seqs


def test_concurrent_threads_lose_nothing(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=3)
    errors = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                m.add("c", [Event.user(f"w{n}-{i}"), Event.assistant(f"a{n}-{i}")])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    history = m.history("c")
    assert seqs(history) == list(range(1, len(history) + 1))
    users = [e for e in history if e.type is EventType.USER]
    assert sorted(e.content for e in users) == sorted(
        f"w{n}-{i}" for n in range(4) for i in range(25)
    )
    # each add() is contiguous: the reply sits right after its question
    by_seq = {e.seq: e for e in history}
    for user in users:
        assert by_seq[user.seq + 1].content == "a" + user.content[1:]
    assert len(split_turns(m.window("c"))) == 3


def test_add_is_idempotent_per_event_id(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=2)
    batch = [
        Event.user("q"),
        Event.tool_call("t", {"a": 1}, call_id="c1"),
        Event.tool_result("c1", "r"),
        Event.assistant("a"),
    ]
    first = m.add("c", batch)
    version = m.stats("c").version
    again = m.add("c", batch)
    assert again == first and seqs(again) == [1, 2, 3, 4]
    assert m.stats("c").version == version, "a retry that stores nothing must write nothing"
    # the id decides, not the content: the stored copy is returned
    assert m.add("c", batch[0].model_copy(update={"content": "edited"})) == [first[0]]
    assert [e.content for e in m.history("c")] == ["q", "", "r", "a"]


def test_the_store_skips_events_already_in_the_window(memory: MemoryKit) -> None:
    one, two = (
        Event.user("one").stored(seq=0, tokens=1),
        Event.system("two").stored(seq=0, tokens=1),
    )
    memory.store.append("c", [one])
    snapshot = memory.store.append("c", [one, two])
    assert snapshot.last_seq == 2 and [e.id for e in snapshot.window.events()] == [two.id, one.id]
    assert [e.seq for e in memory.store.history("c")] == [1, 2]


def test_concurrent_retries_of_one_add_store_it_once(memory: MemoryKit) -> None:
    m = memory()
    threads, rounds = 4, 5
    barrier = threading.Barrier(threads)
    batches = [
        [
            Event.user(f"q{r}"),
            Event.tool_call("t", {}, call_id=f"k{r}"),
            Event.tool_result(f"k{r}", "r"),
            Event.assistant(f"a{r}"),
        ]
        for r in range(rounds)
    ]
    returned: list[list[list[int]]] = [[] for _ in range(threads)]
    errors = []

    def retrier(n: int) -> None:
        try:
            for batch in batches:
                barrier.wait()
                returned[n].append(seqs(m.add("c", batch)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=retrier, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    history = m.history("c")
    assert [e.id for e in history] == [e.id for batch in batches for e in batch]
    assert seqs(history) == list(range(1, 4 * rounds + 1))
    assert all(r == returned[0] for r in returned), "every retry returns the one stored copy"
