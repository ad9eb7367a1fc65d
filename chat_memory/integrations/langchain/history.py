"""A LangChain ``BaseChatMessageHistory`` over one chat-memory conversation."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from ...backends.base import check_conversation_id
from ...steps import Steps, call
from ..memory import AnyMemory, arun_memory, check_memory, run_sync
from .convert import events_from_messages, messages_from_window


class ChatMemoryHistory(BaseChatMessageHistory):
    """The chat history of conversation ``conversation_id`` kept by ``memory``.

    ``add_messages`` stores messages as events (one list, one atomic append; compaction runs
    as ``memory.add`` does); ``messages`` is the window the model should see, not the whole
    log: pinned system events and (with ``summary_placement="system_prompt"``) the summary
    as a leading ``SystemMessage``, the summary otherwise as a leading ``HumanMessage``, then
    the active events with every tool call answered. Archived messages stay searchable
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

    def _messages(self) -> Steps[list[BaseMessage]]:
        window = yield from call("model_window", self.conversation_id)
        return messages_from_window(window, summary_placement=self.memory.config.summary_placement)

    def _add(self, messages: Sequence[BaseMessage]) -> Steps[None]:
        events = events_from_messages(messages)
        if events:
            yield from call("add", self.conversation_id, events)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The window as LangChain messages (see the class docstring)."""
        return run_sync(self.memory, self._messages(), "ChatMemoryHistory.messages", "await history.aget_messages()")

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in order, atomically; a message whose ``id`` is already in the
        window is not stored again."""
        run_sync(self.memory, self._add(messages), "ChatMemoryHistory.add_messages()", "await history.aadd_messages()")

    def clear(self) -> None:
        """Delete the conversation: window, summary and archive."""
        run_sync(self.memory, call("clear", self.conversation_id), "ChatMemoryHistory.clear()", "await history.aclear()")

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, without blocking the loop."""
        return await arun_memory(self._messages(), self.memory)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, without blocking the loop."""
        await arun_memory(self._add(list(messages)), self.memory)

    async def aclear(self) -> None:
        """:meth:`clear`, without blocking the loop."""
        await arun_memory(call("clear", self.conversation_id), self.memory)
