"""The lifecycle conformance suite (chat_memory.testing.lifecycle_conformance) on memory://,
sync and async, with its raw-storage scan; and proof that the suite fails for a store that
leaves a forgotten user's data behind."""

from __future__ import annotations

import pytest

from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.lifecycle.records import ErasureCounts
from chat_memory.testing.lifecycle_conformance import LifecycleConformance, strings_in


class TestMemoryStore(LifecycleConformance):
    """The suite on memory://, whose raw storage is the store object itself."""

    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()


class KeepsErasedConversations(InMemoryStore):
    """Counts an erasure but keeps a copy of what it erased (a leak the raw scan must see)."""

    def __init__(self) -> None:
        super().__init__()
        self.leaked: list[object] = []

    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        with self._lock:
            self.leaked.extend(
                self._conversations[key] for key in self._conversations.scopes.get(scope, {})
            )
        return super().erase_scope(scope, limit, guard_seconds)


def test_the_raw_scan_finds_what_an_erasure_left_behind():
    suite = TestMemoryStore()
    store = KeepsErasedConversations()
    from chat_memory import ChatMemory

    def memory_of(*args: object, **config: object) -> ChatMemory:
        return ChatMemory(store, dict(config))

    with pytest.raises(AssertionError):
        suite.test_forget_leaves_nothing_of_the_user_in_raw_storage(memory_of, store)


def test_strings_in_reaches_packed_archives_and_slots():
    from chat_memory import ChatMemory, Event

    store = InMemoryStore()
    memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    memory.add("c", Event.user("archived words"))
    memory.add("c", Event.user("window words"))
    assert memory.stats("c").archived_events == 1
    found = set(strings_in(vars(store)))
    assert {"archived words", "window words", "c"} <= found
