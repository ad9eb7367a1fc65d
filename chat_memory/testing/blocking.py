"""Sync facades over the async API, for running the sync test suites against it: each
coroutine is run on one background event loop (a thread of its own) and waited for.

- :class:`BlockingStore` turns an :class:`~chat_memory.backends.aio.AsyncStore` back into a
  :class:`~chat_memory.Store` (for the store conformance suite);
- :class:`BlockingMemory` is :class:`~chat_memory.ChatMemory`-shaped over
  :class:`~chat_memory.AsyncChatMemory` (for the engine's behaviour tests).

Test helpers only: production code awaits the async API instead.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..aio import AsyncChatMemory
from ..backends.aio import AsyncStore, ThreadedStore
from ..backends.base import (
    AppendsWithoutWindow,
    CompactionPlan,
    CompactsWhileAppending,
    Retracts,
    Snapshot,
    Store,
)
from ..events import Event
from ..search import SearchQuery, SearchResult
from ..tools import AsyncConversationSearchTool, AsyncFetchToolResultTool, ToolOutput

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the shared background loop and wait for its result."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(
                target=_loop.run_forever, name="chat-memory-blocking", daemon=True
            ).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _loop).result()


class BlockingStore(Store):
    """An :class:`AsyncStore` as a sync :class:`Store` (see :func:`blocking_store`)."""

    def __init__(self, store: AsyncStore) -> None:
        self.async_store = store
        declared = getattr(
            store, "store", store
        )  # a ThreadedStore's sync store, or the native store
        for name in ("default_max_archived_events", "compaction_records_kept"):
            if hasattr(declared, name):
                setattr(self, name, getattr(declared, name))

    @classmethod
    def from_url(cls, url: str, **options: Any) -> BlockingStore:
        from ..backends.aio import open_async_store

        return blocking_store(open_async_store(url, **options))

    def load(self, conversation_id: str) -> Snapshot:
        return run_blocking(self.async_store.load(conversation_id))

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        return run_blocking(self.async_store.append(conversation_id, events))

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        return run_blocking(self.async_store.apply(conversation_id, plan))

    def history(self, conversation_id: str) -> list[Event]:
        return run_blocking(self.async_store.history(conversation_id))

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        return run_blocking(self.async_store.find_tool_events(conversation_id, tool_call_ids))

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return run_blocking(self.async_store.search(conversation_id, query))

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        run_blocking(self.async_store.record_compaction_error(conversation_id, message))

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return run_blocking(self.async_store.compactions(conversation_id))

    def clear(self, conversation_id: str) -> None:
        run_blocking(self.async_store.clear(conversation_id))

    def conversations(self) -> list[str]:
        return run_blocking(self.async_store.conversations())

    def close(self) -> None:
        run_blocking(self.async_store.aclose())


class _CompactingBlockingStore(BlockingStore, CompactsWhileAppending):
    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> tuple[Snapshot, bool]:
        return run_blocking(self.async_store.append_compacting(conversation_id, events, planner))


# An async store offers the optional abilities as coroutines of the same names (found by name,
# see AppendsWithoutWindow and Retracts): these protocols are what blocking_store() looks for.
@runtime_checkable
class _AsyncAppendsWithoutWindow(Protocol):
    async def append_without_window(
        self, conversation_id: str, events: Sequence[Event]
    ) -> list[Event]: ...

    async def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]: ...


@runtime_checkable
class _AsyncRetracts(Protocol):
    async def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]: ...

    async def retracted(self, conversation_id: str) -> list[Event]: ...


class _AppendsWithoutWindow(AppendsWithoutWindow):
    async_store: AsyncStore

    def _appends(self) -> _AsyncAppendsWithoutWindow:
        store = self.async_store
        if not isinstance(store, _AsyncAppendsWithoutWindow):  # blocking_store() checked it
            raise TypeError(f"{type(store).__name__} has no append_without_window/find_events")
        return store

    def append_without_window(self, conversation_id: str, events: Sequence[Event]) -> list[Event]:
        return run_blocking(self._appends().append_without_window(conversation_id, events))

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        return run_blocking(self._appends().find_events(conversation_id, event_ids, tool_call_ids))


class _Retracts(Retracts):
    async_store: AsyncStore

    def _retracts(self) -> _AsyncRetracts:
        store = self.async_store
        if not isinstance(store, _AsyncRetracts):  # blocking_store() checked it
            raise TypeError(f"{type(store).__name__} has no retract/retracted")
        return store

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        return run_blocking(self._retracts().retract(conversation_id, event_ids))

    def retracted(self, conversation_id: str) -> list[Event]:
        return run_blocking(self._retracts().retracted(conversation_id))


def blocking_store(store: AsyncStore) -> BlockingStore:
    """``store`` as a sync Store, declaring :class:`CompactsWhileAppending`,
    :class:`AppendsWithoutWindow` and :class:`Retracts` only when it can (the latter two: when
    it has both of their methods)."""
    bases: list[type] = [
        _CompactingBlockingStore if store.compacts_while_appending else BlockingStore
    ]
    if isinstance(store, _AsyncAppendsWithoutWindow):
        bases.append(_AppendsWithoutWindow)
    if isinstance(store, _AsyncRetracts):
        bases.append(_Retracts)
    return _combined(tuple(bases))(store)


@functools.cache
def _combined(bases: tuple[type, ...]) -> type[BlockingStore]:
    return bases[0] if len(bases) == 1 else type("BlockingStore", bases, {})


class BlockingMemory:
    """:class:`~chat_memory.ChatMemory`'s signature over :class:`AsyncChatMemory` (a sync
    store is put in a :class:`ThreadedStore`); the tools it returns are blocking too."""

    def __init__(
        self,
        store: Store | AsyncStore,
        config: Any = None,
        summarizer: Any = None,
        token_counter: Any = None,
    ) -> None:
        async_store = ThreadedStore(store) if isinstance(store, Store) else store
        self.async_memory = AsyncChatMemory(async_store, config, summarizer, token_counter)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.async_memory, name)
        if inspect.iscoroutinefunction(found):
            return functools.partial(_blocking_call, found)
        if name in ("search_tool", "fetch_tool"):
            return lambda *args: _BlockingTool(found(*args))
        return found


def _blocking_call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return run_blocking(function(*args, **kwargs))


class _BlockingTool:
    def __init__(self, tool: AsyncConversationSearchTool | AsyncFetchToolResultTool) -> None:
        self.tool = tool

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        return run_blocking(self.tool.run(arguments))

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return run_blocking(self.tool(arguments))


__all__ = ["BlockingMemory", "BlockingStore", "blocking_store", "run_blocking"]
