"""An agent middleware for LangChain v1's ``create_agent``: chat-memory keeps the history,
the model sees chat-memory's window.

Unlike ``SummarizationMiddleware``, nothing is removed from the agent's state (its
``messages`` keep growing as LangGraph's reducer has them; the checkpointer keeps them), and
what the model is shown is chat-memory's window, which never holds an orphaned
``ToolMessage`` or an unanswered tool call: compaction cuts only between whole turns and
archives (searchable) instead of deleting."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage

from ...aio import AsyncChatMemory
from ...backends.base import check_conversation_id
from ...errors import ConfigurationError
from ...events import Event
from ...overflow import awith_overflow_retry, with_overflow_retry
from .. import missing_extra
from ..memory import (
    AnyMemory,
    MemorySteps,
    arun_memory,
    check_memory,
    model_window_of,
    run_sync,
    sync_memory,
    window_of,
)
from .convert import events_from_messages, message_events, removal_refused, render
from .identity import apply_changes, is_rendered, new_events

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
except ImportError:  # pragma: no cover - exercised by the architecture test's subprocess
    raise missing_extra("langchain", "langchain-agents") from None

T = TypeVar("T")
#: What a sync hook given an AsyncChatMemory is, and what to use instead.
_UNDER_INVOKE = "ChatMemoryMiddleware under agent.invoke()"
_INSTEAD = "agent.ainvoke() or agent.astream()"


class ChatMemoryMiddleware(AgentMiddleware):
    """Store every step of a ``create_agent`` run in ``memory`` and give the model its window.

    Before each model call, the messages of the agent's state that ``memory`` has not stored
    yet (the user's input, tool results) are added; the model's request then gets the window
    in place of the state's messages (pinned system events and a ``system_prompt`` summary
    are appended to the agent's system prompt); the model's reply is stored as soon as it
    comes back (an ``AIMessage`` without an id is given one, so that the state and the memory
    agree on it). After the run, anything still unstored (a ``return_direct`` tool's result)
    is added too. Identity is the message id, as in LangGraph's reducer: an agent invoked
    with the history sent back (``{"messages": history.messages + [new]}``, with or without
    a checkpointer) stores only ``new``; a message of the window under a stored id with other
    content replaces the stored one (retracted, the new one appended). A ``RemoveMessage`` is
    applied by LangGraph to the state before any hook sees it, so the memory keeps the message
    (use ``ChatMemoryHistory`` or ``memory.retract`` to take one back; see docs/integrations.md).

    ``conversation_id``: the conversation to keep; ``None`` uses the LangGraph ``thread_id``
    of the run (``config={"configurable": {"thread_id": ...}}``).

    ``memory`` is a :class:`~chat_memory.ChatMemory` or an :class:`~chat_memory.AsyncChatMemory`.
    The async hooks (``ainvoke``/``astream``) await an ``AsyncChatMemory`` on the loop and run a
    ``ChatMemory`` in a worker thread (``asyncio.to_thread``); the sync hooks (``invoke``)
    need a ``ChatMemory`` and raise a ``ConfigurationError`` naming ``ainvoke`` otherwise.

    >>> agent = create_agent(model, tools=search_tools(memory, "conv-1"),
    ...                      middleware=[ChatMemoryMiddleware(memory, conversation_id="conv-1")])
    """

    def __init__(self, memory: AnyMemory, conversation_id: str | None = None) -> None:
        super().__init__()
        self.memory = check_memory(memory, "ChatMemoryMiddleware")
        self.conversation_id = (
            None if conversation_id is None else check_conversation_id(conversation_id)
        )

    # -- the hooks ---------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        """Store the new messages, show the model the window, store its reply."""
        cid = self._conversation()
        memory = sync_memory(self.memory, _UNDER_INVOKE, _INSTEAD)
        # a "prompt is too long" answer: compact by force and send the step once more
        response = with_overflow_retry(
            memory, cid, lambda: handler(self._sync(self._request(cid, request)))
        )
        response, events = with_reply_ids(response)
        if events:
            memory.add(cid, events)
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        """:meth:`wrap_model_call` for ``ainvoke``/``astream``."""
        cid = self._conversation()

        async def send() -> Any:
            return await handler(await arun_memory(self._request(cid, request), self.memory))

        response = await awith_overflow_retry(self.memory, cid, send)
        response, events = with_reply_ids(response)
        if events:
            if isinstance(self.memory, AsyncChatMemory):
                await self.memory.add(cid, events)
            else:
                await asyncio.to_thread(self.memory.add, cid, events)
        return response

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Store what the run added after the last model call."""
        self._sync(self._store_new(self._conversation(), state["messages"]))
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """:meth:`after_agent` for ``ainvoke``/``astream``."""
        await arun_memory(self._store_new(self._conversation(), state["messages"]), self.memory)
        return None

    # -- internals: what to read and write, as steps run by either kind of memory -----------

    def _sync(self, steps: MemorySteps[T]) -> T:
        return run_sync(self.memory, steps, _UNDER_INVOKE, _INSTEAD)

    def _conversation(self) -> str:
        if self.conversation_id is not None:
            return self.conversation_id
        from langgraph.config import get_config

        try:
            thread_id = (get_config().get("configurable") or {}).get("thread_id")
        except RuntimeError:
            thread_id = None
        if thread_id is None:
            raise ConfigurationError(
                "conversation_id (None) is not set and the run has no thread_id; pass "
                "ChatMemoryMiddleware(memory, conversation_id=...) or config={'configurable': {'thread_id': ...}}"
            )
        return check_conversation_id(str(thread_id))

    def _store_new(self, cid: str, messages: Sequence[BaseMessage]) -> MemorySteps[None]:
        window = yield from window_of(cid)
        stored = {e.id: e for e in window}
        indexed = [(i, m) for i, m in enumerate(messages) if not is_rendered(m)]
        for i, m in indexed:
            if (
                m.type == "remove"
            ):  # LangGraph's reducer applies them; one left in the state was not
                raise removal_refused(i, m.id)
        tail = unstored([m for _, m in indexed], set(stored))
        head = indexed[: len(indexed) - len(tail)]
        # the state's messages in the window are compared too (an edited copy replaces the
        # stored one); the older ones are left alone: the state holds them in stored order
        parts = message_events([(i, m) for i, m in head if m.id in stored] + indexed[len(head) :])
        changes = yield from new_events(cid, parts, stored, look_back=False)
        yield from apply_changes(cid, changes)

    def _request(self, cid: str, request: ModelRequest) -> MemorySteps[ModelRequest]:
        yield from self._store_new(cid, request.messages)
        window = yield from model_window_of(cid)
        system, messages = render(window, self.memory.config.summary_placement)
        own = request.system_message.text if request.system_message is not None else ""
        text = "\n\n".join(t for t in (str(own), system) if t.strip())
        return request.override(
            # render makes only Human, AI, Tool and System messages: AnyMessage members
            messages=cast("list[AnyMessage]", messages),
            system_message=SystemMessage(text) if text else None,
        )


def with_reply_ids(response: Any) -> tuple[Any, list[Event]]:
    """The model's response with an id on every message, and the events to store for it
    (none for a response that is not a ``ModelResponse``, bare or wrapped)."""
    if isinstance(response, AIMessage):
        response = ModelResponse(result=[response])
    inner = getattr(response, "model_response", None)  # ExtendedModelResponse wraps one
    target = inner if isinstance(inner, ModelResponse) else response
    if not isinstance(target, ModelResponse):
        return response, []
    result = [_with_id(m) for m in target.result]
    replaced = dataclasses.replace(target, result=result)
    response = (
        dataclasses.replace(response, model_response=replaced) if target is inner else replaced
    )
    return response, events_from_messages(result)


def unstored(messages: Sequence[BaseMessage], stored_ids: set[str]) -> list[BaseMessage]:
    """The messages after the newest one whose id is among ``stored_ids`` (all of them when
    none is): the newest stored event is always in the window (the newest turn is never
    archived), so looking for it there is enough, however long the state has grown."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id and messages[index].id in stored_ids:
            return list(messages[index + 1 :])
    return list(messages)


def _with_id(message: BaseMessage) -> BaseMessage:
    if message.id:
        return message
    return message.model_copy(
        update={"id": str(uuid.uuid4())}
    )  # what LangGraph's reducer would give it
