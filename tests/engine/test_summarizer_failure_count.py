"""The summarizer's failures in a row are counted in the store, beside the compaction error
(``Snapshot.compaction_failures``, ``stats().compaction_failures``): a new ``ChatMemory`` per
message, a second worker and a restarted process all see the same count, so
``summarizer_failures_before_fallback`` is reached whoever failed before
(docs/safety-nets.md, "When the summarizer fails")."""

from __future__ import annotations

import asyncio
from typing import Any

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.sql import SQLStore
from chat_memory.events import EventType
from tests.support.helpers import fixed_tokens, turn

SETTINGS: dict[str, Any] = {
    "compaction_strategy": "recursive_summarization",
    "max_events": 6,
    "max_events_to_keep": 2,
    "overlap_size": 0,
    "summarizer_failures_before_fallback": 2,
}


def failing(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    raise RuntimeError("summarizer down")


def memory_over(store: Store, summarizer: Any = failing, **overrides: Any) -> ChatMemory:
    """A new memory, as a host that builds one per message (or a second worker) would."""
    return ChatMemory(
        store,
        MemoryConfig(**{**SETTINGS, **overrides}),
        summarizer=summarizer,
        token_counter=fixed_tokens,
    )


def gap_note(store: Store) -> str:
    summary = store.load("c").window.summary
    assert summary is not None and summary.type is EventType.SUMMARY
    return summary.content


def test_a_second_memory_over_the_store_continues_the_count(store: Store) -> None:
    for i in range(3):  # 6 events: at the limit, no compaction yet
        memory_over(store).add("c", turn(f"q{i}"))
    memory_over(store).add("c", turn("q3"))  # 8 events: the first failure keeps everything
    assert memory_over(store).stats("c").archived_events == 0
    memory_over(store).add("c", turn("q4"))  # another memory: the second failure falls back
    stats = memory_over(store).stats("c")
    assert stats.archived_events > 0
    assert memory_over(store).compactions("c")[-1].fallback
    assert "it failed 2 times in a row" in gap_note(store)
    assert stats.compaction_failures == 1  # the fallback's error, recorded after its apply
    assert "archived without a new summary" in (stats.last_compaction_error or "")


def test_async_memories_share_the_count() -> None:
    store = InMemoryStore()

    async def run() -> None:
        def memory() -> AsyncChatMemory:
            return AsyncChatMemory(
                store, MemoryConfig(**SETTINGS), summarizer=failing, token_counter=fixed_tokens
            )

        for i in range(4):  # the 4th turn fails once
            await memory().add("c", turn(f"q{i}"))
        assert (await memory().stats("c")).archived_events == 0
        await memory().add("c", turn("q4"))  # another memory: the second failure falls back

    asyncio.run(run())
    assert store.load("c").archived_count > 0 and "2 times in a row" in gap_note(store)
    assert store.load("c").compaction_failures == 1


def test_the_count_survives_a_restart(sqlite_url: str) -> None:
    with SQLStore.from_url(sqlite_url) as store:
        for i in range(4):  # the 4th turn fails once
            memory_over(store).add("c", turn(f"q{i}"))
        assert store.load("c").archived_count == 0
    with SQLStore.from_url(sqlite_url) as store:  # a new engine on the same file
        memory_over(store).add("c", turn("q4"))
        assert store.load("c").archived_count > 0
        assert memory_over(store).compactions("c")[-1].fallback
    with SQLStore.from_url(sqlite_url) as store:
        assert store.load("c").compaction_failures == 1


def test_while_the_gap_is_open_each_failure_falls_back_whoever_counted() -> None:
    store = InMemoryStore()
    settings = {"summarizer_failures_before_fallback": 3}
    for i in range(6):  # failures at q3 and q4, the fallback at q5 (3 in a row)
        memory_over(store, **settings).add("c", turn(f"q{i}"))
    assert [r.fallback for r in memory_over(store).compactions("c")] == [True]
    for i in range(6, 9):  # back over the limit at q8: one more failure, the gap still open
        memory_over(store, **settings).add("c", turn(f"q{i}"))
    assert [r.fallback for r in memory_over(store).compactions("c")] == [True, True]
    assert "the summarizer was still unavailable" in gap_note(store)


def test_a_summary_that_succeeds_resets_the_count() -> None:
    store = InMemoryStore()
    for i in range(4):
        memory_over(store).add("c", turn(f"q{i}"))
    assert store.load("c").compaction_failures == 1
    memory_over(store, summarizer=lambda previous, events, upcoming: "a summary").add(
        "c", turn("q4")
    )
    snapshot = store.load("c")
    assert (snapshot.compaction_failures, snapshot.compaction_error) == (0, None)
    assert gap_note(store) == "a summary"
    memory_over(store).add("c", turn("q5"))
    memory_over(store).add("c", turn("q6"))  # over the limit again: a first failure, counted anew
    assert store.load("c").compaction_failures == 1
    assert [r.fallback for r in memory_over(store).compactions("c")] == [False]
