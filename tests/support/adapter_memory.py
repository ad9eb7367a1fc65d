"""The framework adapters' tests run over both kinds of memory: a ``ChatMemory`` (async paths
in a worker thread) and an ``AsyncChatMemory`` (awaited; ``asyncio.to_thread`` is made to fail
so that a thread on that path is caught). ``"async"`` runs the fixture's sync store in a
ThreadedStore; ``"native"`` (asked for by the long runs) gives the AsyncChatMemory the
native async twin of the store (AsyncSQLStore, AsyncRedisStore) over the same data, for use
on one event loop."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import pytest

from chat_memory import AsyncChatMemory, ChatMemory, MemoryConfig
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.sql import AsyncSQLStore, SQLStore

KINDS = ["sync", "async"]


@pytest.fixture(params=KINDS)
def kind(request, monkeypatch):
    """``"sync"`` or ``"async"``; with ``"async"``, any ``asyncio.to_thread`` fails the test
    (recorded too, in case a framework catches the error and carries on)."""
    used: list[Any] = []
    if request.param in ("async", "native"):

        def refuse(func: Any, *args: Any, **kwargs: Any) -> Any:
            used.append(func)
            raise AssertionError(f"asyncio.to_thread({func!r}) on the AsyncChatMemory path")

        monkeypatch.setattr(asyncio, "to_thread", refuse)
    yield request.param
    assert not used, f"asyncio.to_thread was used: {used}"


def memory_of(
    kind: str, store: Any, summarizer: Any = None, **config: Any
) -> ChatMemory | AsyncChatMemory:
    """A ChatMemory, an AsyncChatMemory over the sync store (in its ThreadedStore), or one over
    the store's native async twin, on ``store``."""
    if kind == "native":
        memory = AsyncChatMemory(native_twin(store), MemoryConfig(**config), summarizer=summarizer)
        _sync_stores[memory] = store
        return memory
    cls = AsyncChatMemory if kind == "async" else ChatMemory
    return cls(store, MemoryConfig(**config), summarizer=summarizer)


_sync_stores: weakref.WeakKeyDictionary[AsyncChatMemory, Any] = weakref.WeakKeyDictionary()


def native_twin(store: Any) -> AsyncStore:
    """The native async store over the data of the sync ``store`` (a single-server RedisStore
    or a SQLStore with the default table prefix)."""
    if isinstance(store, RedisStore) and not store.cluster:
        import redis.asyncio

        where = store.client.connection_pool.connection_kwargs
        client = redis.asyncio.Redis(host=where["host"], port=where["port"], db=where.get("db", 0))
        return AsyncRedisStore(
            client,
            prefix=store.prefix,
            max_archived_events=store.default_max_archived_events,
            owns_client=True,
        )
    if isinstance(store, SQLStore):
        return AsyncSQLStore(
            store.engine.url.render_as_string(hide_password=False),
            max_archived_events=store.default_max_archived_events,
        )
    raise AssertionError(f"no native async twin for {store!r}")


def view(memory: ChatMemory | AsyncChatMemory) -> ChatMemory:
    """A ChatMemory over the same data, for a test's own sync checks."""
    if isinstance(memory, ChatMemory):
        return memory
    sync_store = _sync_stores.get(memory) or memory.store.store
    return ChatMemory(sync_store, memory.config, summarizer=memory.summarizer)
