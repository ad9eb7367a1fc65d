"""A LangChain ``BaseChatMessageHistory`` over one chat-memory conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, RemoveMessage

from ...aio import AsyncChatMemory
from ...backends.base import check_conversation_id
from ...events import Event
from ..memory import (
    AnyMemory,
    MemorySteps,
    arun_memory,
    check_memory,
    clear_conversation,
    run_sync,
    sync_memory,
    window_of,
)
from .convert import history_messages, message_events
from .identity import apply_changes, check_pairs_alone, new_events, removals


class ChatMemoryHistory(BaseChatMessageHistory):
    """The chat history of conversation ``conversation_id`` kept by ``memory``.

    ``add_messages`` stores messages as events (one list, one atomic append; compaction runs
    as ``memory.add`` does), by LangChain's identity, the message ``id``, as LangGraph's
    ``add_messages`` reducer merges them: a message without an id is given one (a ``uuid4``),
    a re-sent copy of a stored message is not stored again, a different message under a
    stored id replaces it (the stored one is retracted, the new one appended),
    ``REMOVE_ALL_MESSAGES`` clears and a ``RemoveMessage`` by id retracts the message (see
    :mod:`~chat_memory.integrations.langchain.identity` and docs/retraction.md).

    ``messages`` is the window, not the whole log: pinned ``SystemMessage`` s, the summary (a
    ``SystemMessage`` with ``summary_placement="system_prompt"``, a ``HumanMessage``
    otherwise), then the stored messages of the active part, each with its id, every tool
    call followed by its result. Sending it back (``add_messages(history.messages + [new])``)
    stores only ``new``. Archived messages stay searchable
    (:func:`~chat_memory.integrations.langchain.search_tools`) and in ``memory.history()``.

    ``memory`` is a :class:`~chat_memory.ChatMemory` or an :class:`~chat_memory.AsyncChatMemory`.
    The async methods (``aget_messages``, ``aadd_messages``, ``aclear``) await an
    ``AsyncChatMemory`` on the loop and run a ``ChatMemory`` in a worker thread
    (``asyncio.to_thread``); they never block the event loop. The sync ones need a
    ``ChatMemory`` (with an ``AsyncChatMemory`` they raise a ``ConfigurationError`` naming
    the async method to use).

    >>> history = ChatMemoryHistory(memory, "conv-1")
    >>> history.add_messages([HumanMessage("Hi"), AIMessage("Hello")])
    """

    def __init__(self, memory: AnyMemory, conversation_id: str) -> None:
        self.memory = check_memory(memory, "ChatMemoryHistory")
        self.conversation_id = check_conversation_id(conversation_id)

    def _add(self, messages: Sequence[BaseMessage]) -> MemorySteps[None]:
        cid = self.conversation_id
        clears, kept = removals(list(messages))
        removed = [(i, str(m.id)) for i, m in kept if isinstance(m, RemoveMessage)]
        parts = message_events([(i, m) for i, m in kept if not isinstance(m, RemoveMessage)])
        stored: dict[str, Event] = {}
        if clears:
            check_pairs_alone(parts)
        else:
            stored = {e.id: e for e in (yield from window_of(cid))}
        # every read and check before the first write: a refused list changes nothing
        changes = yield from new_events(cid, parts, stored, look_back=not clears, removed=removed)
        if clears:
            yield from clear_conversation(cid)
        yield from apply_changes(cid, changes)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # LangChain declares an attribute; ours reads the window
        """The window as LangChain messages (see the class docstring)."""
        memory = sync_memory(
            self.memory, "ChatMemoryHistory.messages", "await history.aget_messages()"
        )
        # the window as stored (not model_window's stubs), so that a re-sent copy matches it
        window = memory.window(self.conversation_id)
        return history_messages(window, self.memory.config.summary_placement)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in order, atomically; a message whose ``id`` is already stored
        with the same content is not stored again (see the class docstring). Every message
        that had no id has one afterwards (the one it is stored under)."""
        run_sync(
            self.memory,
            self._add(messages),
            "ChatMemoryHistory.add_messages()",
            "await history.aadd_messages()",
        )

    def clear(self) -> None:
        """Delete the conversation: window, summary and archive."""
        sync_memory(self.memory, "ChatMemoryHistory.clear()", "await history.aclear()").clear(
            self.conversation_id
        )

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, without blocking the loop."""
        if not isinstance(self.memory, AsyncChatMemory):
            return await asyncio.to_thread(lambda: self.messages)
        window = await self.memory.window(self.conversation_id)
        return history_messages(window, self.memory.config.summary_placement)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, without blocking the loop."""
        await arun_memory(self._add(list(messages)), self.memory)

    async def aclear(self) -> None:
        """:meth:`clear`, without blocking the loop."""
        if isinstance(self.memory, AsyncChatMemory):
            await self.memory.clear(self.conversation_id)
        else:
            await asyncio.to_thread(self.clear)
