"""The OpenAI Agents SDK: a ``Session`` kept by chat-memory, and ``conversation_search`` as a
``FunctionTool``.

``Runner.run(agent, input, session=ChatMemorySession(memory, "conv-1"))`` keeps the run's
history in any chat-memory store, with turn-safe compaction, an archive and search. Needs
``openai-agents`` (``pip install 'chat-memory[openai-agents]'``). What maps to what is in
docs/integrations.md."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..aio import AsyncChatMemory
from ..backends.base import check_conversation_id
from ..errors import ChatMemoryError, ConfigurationError
from ..events import Event
from ..tools import (
    AsyncConversationSearchTool,
    AsyncFetchToolResultTool,
    ConversationSearchTool,
    FetchToolResultTool,
)
from . import missing_extra
from .memory import AnyMemory, check_memory, sync_memory
from .openai_items import (
    ERROR_PREFIX,
    FAKE_ID,
    ITEM_KEY,
    MODELLED_TYPES,
    OPAQUE_TEXT_CHARS,
    OPAQUE_TEXT_FIELDS,
    Item,
    checked_items,
    event_from_item,
    events_from_items,
    item_of,
    item_type,
    items_from_window,
    newest,
    opaque_event,
)

try:
    from agents import FunctionTool, RunContextWrapper
    from agents.memory import SessionSettings
    from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
except ImportError:  # pragma: no cover - exercised by the architecture test's subprocess
    raise missing_extra("openai-agents", "openai-agents") from None

T = TypeVar("T")

__all__ = [
    "ERROR_PREFIX",
    "FAKE_ID",
    "ITEM_KEY",
    "MODELLED_TYPES",
    "OPAQUE_TEXT_CHARS",
    "OPAQUE_TEXT_FIELDS",
    "SETTINGS_KEYS",
    "ChatMemorySession",
    "Item",
    "UnsupportedOperationError",
    "event_from_item",
    "events_from_items",
    "fetch_tool",
    "function_tool",
    "items_from_window",
    "newest",
    "opaque_event",
    "search_tool",
    "session_settings_of",
]


class UnsupportedOperationError(ChatMemoryError, NotImplementedError):
    """An operation chat-memory cannot do on its log. Kept for code that catches it:
    ``pop_item`` no longer raises it (it retracts the newest item, docs/retraction.md)."""


#: The keys a ``session_settings`` dict may hold (the fields of the SDK's ``SessionSettings``).
SETTINGS_KEYS = tuple(f.name for f in dataclasses.fields(SessionSettings))


def session_settings_of(
    value: SessionSettings | Mapping[str, Any] | None,
) -> SessionSettings | None:
    """``value`` as the SDK's ``SessionSettings``, normalised as the SDK normalises its own (a
    dict becomes ``SessionSettings(**value)``, so ``Runner.run`` can ``resolve`` it). An
    unknown key, a value of the wrong type or a negative ``limit`` is a
    :class:`ConfigurationError` naming it."""
    if value is None or isinstance(value, SessionSettings):
        settings = value
    elif isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in SETTINGS_KEYS)
        if unknown:
            raise ConfigurationError(
                f"session_settings: unknown key {', '.join(map(repr, unknown))} (SessionSettings accepts: "
                f"{', '.join(SETTINGS_KEYS)})"
            )
        try:
            settings = coerce_session_settings(dict(value))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"session_settings ({dict(value)!r}) is not valid: {exc}"
            ) from None
    else:
        raise ConfigurationError(
            f"session_settings ({value!r}) must be a SessionSettings, a dict or None"
        )
    limit = settings.limit if settings is not None else None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigurationError(
            f"session_settings.limit ({limit!r}) must be None or a whole number, 0 or more"
        )
    return settings


async def _to_its_outcome(task: asyncio.Future[T]) -> T:
    """Await ``task``; when the caller is cancelled, wait until the task has finished (a store
    call in a thread cannot be stopped, and a native one is not interrupted halfway) before the
    cancellation propagates, so that writes land in the order they were called."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue  # cancelled again: the write still has to finish
            except BaseException:
                break
        if not task.cancelled():
            task.exception()  # retrieved: the caller is told of its cancellation, not of this
        raise


class ChatMemorySession:
    """The SDK's ``Session`` protocol over one chat-memory conversation, behaving as the SDK's
    own sessions do (``SQLiteSession``):

    - ``add_items`` appends every item it is given, in order, atomically, each as a new event
      (an item's ``id`` is kept in the item, never used to skip or merge it: ids repeat);
      items of types chat-memory does not model (hosted tools, reasoning, …) are kept verbatim
      as opaque items. Compaction runs as in ``memory.add``.
    - ``get_items`` replays the stored items as given, from the window (not the whole log):
      the summary, and a synthetic output for a call without one, are the only items it makes.
      ``limit`` (or ``session_settings.limit``) cuts only between whole steps, so a
      ``function_call`` is never separated from its ``function_call_output``.
    - ``session_settings`` is a ``SessionSettings`` or a dict, normalised and validated.
    - A cancelled ``add_items``/``clear_session`` waits for its write to finish before the
      ``CancelledError`` propagates.
    - ``pop_item`` returns the newest stored item and retracts it (``memory.retract``: it
      leaves the window, history and search, kept for audit until the conversation is
      cleared), or returns None when the session is empty, as ``SQLiteSession`` does. One
      difference: when that item is a ``function_call`` or its ``function_call_output``, its
      partner is retracted with it (a pair goes whole, so the next request stays valid),
      where ``SQLiteSession`` removes the one item. ``clear_session`` deletes the
      conversation.

    ``memory`` is a :class:`~chat_memory.ChatMemory` (the async methods run it in a worker
    thread, ``asyncio.to_thread``) or an :class:`~chat_memory.AsyncChatMemory` (awaited on the
    loop, no thread); :meth:`items` and :meth:`add`, the sync twins, need a ``ChatMemory``.

    >>> result = await Runner.run(agent, "Hi", session=ChatMemorySession(memory, "conv-1"))
    """

    def __init__(
        self,
        memory: AnyMemory,
        session_id: str,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.memory = check_memory(memory, "ChatMemorySession")
        self.session_id = check_conversation_id(session_id)
        self.session_settings = session_settings  # normalised by the setter

    @property
    def session_settings(self) -> SessionSettings | None:
        """The settings the Runner reads (``limit``: the default of ``get_items``)."""
        return self._session_settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | Mapping[str, Any] | None) -> None:
        self._session_settings = session_settings_of(value)

    def _limit(self, limit: int | None) -> int | None:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None:
            newest([], limit)  # a bad limit is refused before anything is read
        return limit

    def _newest(self, window: list[Event], limit: int | None) -> list[Item]:
        return newest(items_from_window(window, self.memory.config.summary_placement), limit)

    def items(self, limit: int | None = None) -> list[Item]:
        """:meth:`get_items`, synchronously (a ``ChatMemory`` only)."""
        memory = sync_memory(self.memory, "ChatMemorySession.items()", "await session.get_items()")
        limit = self._limit(limit)
        return self._newest(memory.model_window(self.session_id), limit)

    def add(self, items: Sequence[Any]) -> None:
        """:meth:`add_items`, synchronously (a ``ChatMemory`` only)."""
        memory = sync_memory(self.memory, "ChatMemorySession.add()", "await session.add_items()")
        dicts = checked_items(list(items))
        if not dicts:
            return
        # tool ids are decided against the window
        window = memory.window(self.session_id) if _has_tool_items(dicts) else []
        memory.add(self.session_id, events_from_items(dicts, window))

    def pop(self) -> Item | None:
        """:meth:`pop_item`, synchronously (a ``ChatMemory`` only): the newest real event (the
        window's, or the history's when the window holds none) retracted, with its tool
        partner; its item returned."""
        memory = sync_memory(self.memory, "ChatMemorySession.pop()", "await session.pop_item()")
        real = [e for e in memory.window(self.session_id) if e.is_real] or [
            e for e in memory.history(self.session_id) if e.is_real
        ]
        if not real:
            return None
        memory.retract(self.session_id, [real[-1].id])
        return item_of(real[-1], memory.config.summary_placement)

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The window as Responses input items, the newest ``limit`` (default:
        ``session_settings.limit``) items' worth of whole steps."""
        if not isinstance(self.memory, AsyncChatMemory):
            return await asyncio.to_thread(self.items, limit)
        limit = self._limit(limit)
        return self._newest(await self.memory.model_window(self.session_id), limit)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in order, atomically, every one of them (as the SDK's sessions do)."""
        await _to_its_outcome(asyncio.ensure_future(self._add_items(list(items))))

    async def _add_items(self, items: list[Any]) -> None:
        memory = self.memory
        if not isinstance(memory, AsyncChatMemory):
            return await asyncio.to_thread(self.add, items)
        dicts = checked_items(items)
        if not dicts:
            return
        window = await memory.window(self.session_id) if _has_tool_items(dicts) else []
        await memory.add(self.session_id, events_from_items(dicts, window))

    async def pop_item(self) -> Item | None:
        """Retract the newest item (and its tool partner, if it has one) and return it; None
        when the session is empty. A cancelled call waits for its write to finish."""
        return await _to_its_outcome(asyncio.ensure_future(self._pop_item()))

    async def _pop_item(self) -> Item | None:
        memory = self.memory
        if not isinstance(memory, AsyncChatMemory):
            return await asyncio.to_thread(self.pop)
        real = [e for e in await memory.window(self.session_id) if e.is_real] or [
            e for e in await memory.history(self.session_id) if e.is_real
        ]
        if not real:
            return None
        await memory.retract(self.session_id, [real[-1].id])
        return item_of(real[-1], memory.config.summary_placement)

    async def clear_session(self) -> None:
        """Delete the conversation: window, summary and archive."""
        memory = self.memory
        cleared = (
            memory.clear(self.session_id)
            if isinstance(memory, AsyncChatMemory)
            else asyncio.to_thread(memory.clear, self.session_id)
        )
        await _to_its_outcome(asyncio.ensure_future(cleared))


def _has_tool_items(items: list[Item]) -> bool:
    return any(item_type(item) in ("function_call", "function_call_output") for item in items)


def function_tool(tool: ConversationSearchTool | FetchToolResultTool) -> FunctionTool:
    """A chat-memory tool (``memory.search_tool(conv)``, ``memory.fetch_tool(conv)``, of a
    ``ChatMemory`` or an ``AsyncChatMemory``) as an SDK ``FunctionTool`` with the same name,
    description and JSON schema; bad arguments are answered with an explanation the model can
    act on. An async tool is awaited; a sync one runs in a worker thread."""

    async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
        if isinstance(tool, (AsyncConversationSearchTool, AsyncFetchToolResultTool)):
            return await tool(arguments)
        return await asyncio.to_thread(tool, arguments)

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.input_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,  # strict mode would make the optional page and match_mode required
    )


def search_tool(memory: AnyMemory, conversation_id: str) -> FunctionTool:
    """``conversation_search`` bound to one conversation, as an SDK ``FunctionTool`` (its own
    calls and results are left out of search)."""
    return function_tool(check_memory(memory, "search_tool").search_tool(conversation_id))


def fetch_tool(memory: AnyMemory, conversation_id: str) -> FunctionTool:
    """``fetch_tool_result`` bound to one conversation, as an SDK ``FunctionTool``."""
    return function_tool(check_memory(memory, "fetch_tool").fetch_tool(conversation_id))
