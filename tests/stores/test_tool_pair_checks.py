"""The tool-pair check inside the append (chat_memory.backends.base.ChecksToolPairs): its
conformance suite on every store that declares it, sync and async; the engine passing the
check only where it belongs; and, on Redis, a check made on a held window that another writer
made stale, which the script refuses and the store makes again."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

import pytest

from chat_memory import ChatMemory, Event, InvalidEventError, MemoryConfig, ThreadedStore
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import Snapshot, ToolPairCheck
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.testing.tool_pair_conformance import (
    AsyncToolPairConformance,
    ToolPairConformance,
)
from tests.conftest import ASYNC_STORE_PARAMS, STORE_PARAMS
from tests.support.helpers import fixed_tokens


class TestEveryStore(ToolPairConformance):
    """The suite on each store of tests/fixtures/ (skipped where the ability is not declared)."""

    @pytest.fixture(params=STORE_PARAMS)
    def store(self, request: pytest.FixtureRequest) -> Any:
        return request.getfixturevalue(request.param)


class TestNativeAsyncStores(AsyncToolPairConformance):
    @pytest.fixture(params=ASYNC_STORE_PARAMS)
    def async_store(self, request: pytest.FixtureRequest) -> AsyncStore:
        store: AsyncStore = request.getfixturevalue(request.param)
        return store


class TestThreadedStore(AsyncToolPairConformance):
    @pytest.fixture
    def async_store(self, memory_store: InMemoryStore) -> AsyncStore:
        return ThreadedStore(memory_store, max_workers=4)


# -- what the engine passes ----------------------------------------------------------------------


class Recording(InMemoryStore):
    """Records the check each append got and every look-up, and whether it ran inside one."""

    def __init__(self) -> None:
        super().__init__()
        self.checks: list[ToolPairCheck | None] = []
        self.finds: list[bool] = []
        self._appending = False

    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        self.checks.append(check)
        self._appending = True
        try:
            return super().append(conversation_id, events, check)
        finally:
            self._appending = False

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        self.finds.append(self._appending)
        return super().find_events(conversation_id, event_ids, tool_call_ids)


def test_the_engine_checks_tool_pairs_inside_the_append_and_only_for_tool_events() -> None:
    store = Recording()
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="sliding_window"), token_counter=fixed_tokens
    )
    memory.add("c", Event.user("where is order 7?"))
    assert store.checks == [None] and store.finds == []
    memory.add(
        "c",
        [Event.tool_call("lookup", {"order": 7}, call_id="c7"), Event.tool_result("c7", "shipped")],
    )
    assert store.checks[-1] is not None
    assert store.finds == [True]  # one look-up, inside the append
    assert memory.window("c")[-1].tool_name == "lookup"  # named after its call, by the check
    with pytest.raises(InvalidEventError, match="second tool_result"):
        memory.add("c", Event.tool_result("c7", "again"))
    assert store.finds == [True, True]
    assert len(memory.history("c")) == 3


def test_async_stores_with_the_ability_take_check_on_every_append() -> None:
    """The engine passes ``check`` by keyword to an async store that says checks_tool_pairs
    (ThreadedStore's append_without_window forwards its arguments to the sync store's)."""
    threaded = ThreadedStore(InMemoryStore())
    assert threaded.checks_tool_pairs and AsyncRedisStore.checks_tool_pairs
    methods = [
        AsyncRedisStore.append,
        AsyncRedisStore.append_without_window,
        AsyncRedisStore.append_compacting,
        threaded.append,
        threaded.append_compacting,
    ]
    for method in methods:
        assert inspect.iscoroutinefunction(method), method
        assert "check" in inspect.signature(method).parameters, method


# -- Redis: a held window made stale between the check and the write ---------------------------


@pytest.mark.redis
def test_a_check_on_a_stale_held_window_is_refused_by_the_script_and_made_again(
    redis_url: str,
) -> None:
    mine, theirs = RedisStore.from_url(redis_url), RedisStore.from_url(redis_url)
    try:
        memory = ChatMemory(
            mine, MemoryConfig(compaction_strategy="turn_window"), token_counter=fixed_tokens
        )
        memory.add("c", [Event.user("go"), Event.tool_call("lookup", {}, call_id="c1")])
        memory.window("c")  # mine now holds the window: the call, no result
        theirs.append("c", [Event.tool_result("c1", "theirs", tokens=1)])
        with pytest.raises(InvalidEventError, match="second tool_result for tool_call_id 'c1'"):
            memory.add("c", Event.tool_result("c1", "mine"))
        assert [e.content for e in memory.history("c")][-1] == "theirs"
        stored = memory.add("c", [Event.user("next"), Event.tool_call("lookup", {}, call_id="c2")])
        assert [e.seq for e in stored] == [4, 5]
    finally:
        mine.close()
        theirs.close()
