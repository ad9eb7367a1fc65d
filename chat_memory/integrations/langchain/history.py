"""A LangChain ``BaseChatMessageHistory`` over one chat-memory conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from ...engine import ChatMemory
from ...backends.base import check_conversation_id
from .convert import events_from_messages, messages_from_window


class ChatMemoryHistory(BaseChatMessageHistory):
    """The chat history of conversation ``conversation_id`` kept by ``memory``.

    ``add_messages`` stores messages as events (one list, one atomic append; compaction runs
    as ``memory.add`` does); ``messages`` is the window the model should see, not the whole
    log: pinned system events and (with ``summary_placement="system_prompt"``) the summary
    as a leading ``SystemMessage``, the summary otherwise as a leading ``HumanMessage``, then
    the active events with every tool call answered. Archived messages stay searchable
    (:func:`~chat_memory.integrations.langchain.search_tools`) and in ``memory.history()``.

    The async methods run the sync ones in a worker thread (``asyncio.to_thread``) until
    chat-memory has an async API; they never block the event loop.

    >>> history = ChatMemoryHistory(memory, "conv-1")
    >>> history.add_messages([HumanMessage("Hi"), AIMessage("Hello")])
    """

    def __init__(self, memory: ChatMemory, conversation_id: str) -> None:
        self.memory = memory
        self.conversation_id = check_conversation_id(conversation_id)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The window as LangChain messages (see the class docstring)."""
        return messages_from_window(
            self.memory.model_window(self.conversation_id), summary_placement=self.memory.config.summary_placement
        )

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in order, atomically; a message whose ``id`` is already in the
        window is not stored again."""
        events = events_from_messages(messages)
        if events:
            self.memory.add(self.conversation_id, events)

    def clear(self) -> None:
        """Delete the conversation: window, summary and archive."""
        self.memory.clear(self.conversation_id)

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, in a worker thread."""
        await asyncio.to_thread(self.add_messages, list(messages))

    async def aclear(self) -> None:
        """:meth:`clear`, in a worker thread."""
        await asyncio.to_thread(self.clear)
