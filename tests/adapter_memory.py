"""The framework adapters' tests run over both kinds of memory: a ``ChatMemory`` (async paths
in a worker thread) and an ``AsyncChatMemory`` (awaited; ``asyncio.to_thread`` is made to fail
so that a thread on that path is caught)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chat_memory import AsyncChatMemory, ChatMemory, MemoryConfig

KINDS = ["sync", "async"]


@pytest.fixture(params=KINDS)
def kind(request, monkeypatch):
    """``"sync"`` or ``"async"``; with ``"async"``, any ``asyncio.to_thread`` fails the test
    (recorded too, in case a framework catches the error and carries on)."""
    used: list[Any] = []
    if request.param == "async":
        def refuse(func: Any, *args: Any, **kwargs: Any) -> Any:
            used.append(func)
            raise AssertionError(f"asyncio.to_thread({func!r}) on the AsyncChatMemory path")

        monkeypatch.setattr(asyncio, "to_thread", refuse)
    yield request.param
    assert not used, f"asyncio.to_thread was used: {used}"


def memory_of(kind: str, store: Any, summarizer: Any = None, **config: Any) -> ChatMemory | AsyncChatMemory:
    """A ChatMemory or an AsyncChatMemory (over the sync store, in its ThreadedStore) on ``store``."""
    cls = AsyncChatMemory if kind == "async" else ChatMemory
    return cls(store, MemoryConfig(**config), summarizer=summarizer)


def view(memory: ChatMemory | AsyncChatMemory) -> ChatMemory:
    """A ChatMemory over the same store, for a test's own sync checks."""
    if isinstance(memory, ChatMemory):
        return memory
    return ChatMemory(memory.store.store, memory.config, summarizer=memory.summarizer)
