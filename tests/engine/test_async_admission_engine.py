"""AsyncChatMemory takes the store's admission (``AsyncStore.admitted``) around a whole add,
window or search: a burst of adds prepares (builds, checks, sizes) at most as many batches at
once as the store's pool serves; the turn is re-entrant with the store's own gate and given
back while a summarizer runs. Counted on real servers, never timed."""

from __future__ import annotations

import asyncio
import re
from contextlib import nullcontext

import pytest

from chat_memory import AsyncChatMemory, open_async_store
from chat_memory.backends.aio import AsyncStore, ThreadedStore
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.sql.aio import AsyncSQLStore
from chat_memory.events import Event
from tests.support.helpers import turn

CONFIG = {"compaction_strategy": "turn_window", "max_turns": 2}
BURST = 60
NAMED = re.compile(r"\b(c\d+)-question")


class PreparationCounter:
    """A token counter that sees which conversation's batch is being sized (its text names
    the conversation) and counts the adds between their first sizing and their return."""

    def __init__(self) -> None:
        self.preparing: set[str] = set()
        self.peak = 0

    def __call__(self, text: str) -> int:
        for name in NAMED.findall(text):
            self.preparing.add(name)
            self.peak = max(self.peak, len(self.preparing))
        return len(text.split())

    async def add(self, memory: AsyncChatMemory, c: int) -> None:
        await memory.add(f"conv{c}", [Event.user(f"c{c}-question"), Event.assistant("answer")])
        self.preparing.discard(f"c{c}")


async def _peak(store: AsyncStore) -> int:
    """The most adds of one burst of :data:`BURST` in preparation at once."""
    counter = PreparationCounter()
    memory = AsyncChatMemory(store, CONFIG, token_counter=counter)
    await memory.add("warm-up", turn("schema"))  # the schema or layout check, before the burst
    await asyncio.gather(*(counter.add(memory, c) for c in range(BURST)))
    assert len(await store.conversations()) == BURST + 1
    windows = await asyncio.gather(*(memory.window(f"conv{c}") for c in range(BURST)))
    assert all(len(window) == 2 for window in windows)
    await memory.aclose()
    return counter.peak


@pytest.mark.redis
def test_a_burst_of_adds_on_redis_prepares_at_most_max_connections_batches_at_once(redis_url):
    async def main() -> int:
        store = open_async_store(f"{redis_url}&max_connections=4")
        assert isinstance(store, AsyncRedisStore)
        return await _peak(store)

    assert 0 < asyncio.run(main()) <= 4


def test_a_burst_of_adds_on_sql_prepares_at_most_the_pools_batches_at_once(sqlite_url):
    from sqlalchemy.pool import AsyncAdaptedQueuePool

    async def main() -> int:
        store = AsyncSQLStore(
            sqlite_url, pool_size=3, max_overflow=0, poolclass=AsyncAdaptedQueuePool
        )
        return await _peak(store)

    assert 0 < asyncio.run(main()) <= 3


def test_a_threaded_store_admits_at_once_and_the_whole_burst_prepares_together():
    """No admission of its own (its thread pool queues instead): today's behaviour, and the
    proof the counter sees a burst that is not bounded."""
    store = ThreadedStore(InMemoryStore())
    assert isinstance(store.admitted(), nullcontext)
    assert asyncio.run(_peak(store)) == BURST


@pytest.mark.redis
def test_the_admission_is_given_back_while_the_summarizer_runs(redis_url):
    """One connection: a summarizer holding the only turn would leave every other
    conversation waiting on a model; the gate is free while it runs."""
    gate_free: list[bool] = []

    async def main() -> None:
        store = open_async_store(f"{redis_url}&max_connections=1")
        assert isinstance(store, AsyncRedisStore)

        class Summary:
            async def summarize(self, previous: object, events: object, upcoming: object) -> str:
                assert store._gate is not None
                gate_free.append(not store._gate.locked())
                return "summary"

        config = {
            "compaction_strategy": "recursive_summarization",
            "max_events": 4,
            "max_events_to_keep": 2,
            "overlap_size": 0,
        }
        memory = AsyncChatMemory(store, config, summarizer=Summary())
        for i in range(4):
            await memory.add("c", turn(f"q{i}"))
        assert (await memory.window("c"))[0].content == "summary"
        await memory.aclose()

    asyncio.run(main())
    assert gate_free and all(gate_free)


@pytest.mark.redis
def test_an_admitted_task_goes_straight_through_the_stores_own_gate(redis_url):
    """Re-entrant: holding the only turn, the same task's store calls do not wait again."""

    async def main() -> int:
        store = open_async_store(f"{redis_url}&max_connections=1")
        async with store.admitted():
            await store.append("c", turn("q"))
            loaded = await store.load("c")
        await store.aclose()
        return loaded.last_seq

    # a deadlock guard, not a speed check: a second wait for the only turn never ends
    assert asyncio.run(asyncio.wait_for(main(), 60)) == 2


@pytest.mark.redis
def test_a_memory_bound_to_a_user_takes_its_stores_admission(redis_url):
    async def main() -> tuple[bool, bool]:
        store = open_async_store(f"{redis_url}&max_connections=1")
        assert isinstance(store, AsyncRedisStore)
        bound = AsyncChatMemory(store, CONFIG).for_user("alice")
        async with bound.store.admitted():
            assert store._gate is not None
            held = store._gate.locked()
            await bound.add("c", turn("q"))  # straight in: the same task holds the turn
        await store.aclose()
        return held, store._gate.locked()

    assert asyncio.run(asyncio.wait_for(main(), 60)) == (True, False)
