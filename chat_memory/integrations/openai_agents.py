"""The OpenAI Agents SDK: a ``Session`` kept by chat-memory, and ``conversation_search`` as a
``FunctionTool``.

``Runner.run(agent, input, session=ChatMemorySession(memory, "conv-1"))`` keeps the run's
history in any chat-memory store, with turn-safe compaction, an archive and search. Needs
``openai-agents`` (``pip install 'chat-memory[openai-agents]'``). What maps to what is in
docs/integrations.md."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import Any

from . import missing_extra
from ..backends.base import check_conversation_id
from ..config import SummaryPlacement
from ..errors import ChatMemoryError, InvalidEventError, InvalidInputError
from ..events import Event
from ..render.plan import Step, Text, plan, result_text
from ..safe_json import MAX_DOCUMENT_DEPTH, JSONLimitError, check, loads
from ..steps import Steps, call
from ..tools import AsyncConversationSearchTool, AsyncFetchToolResultTool, ConversationSearchTool, FetchToolResultTool
from .memory import AnyMemory, arun_memory, check_memory, run_sync

try:
    from agents import FunctionTool, RunContextWrapper
    from agents.memory import SessionSettings
except ImportError:  # pragma: no cover - exercised by the architecture test's subprocess
    raise missing_extra("openai-agents", "openai-agents") from None

#: The SDK's placeholder id on items of models that give none (never an item's identity).
FAKE_ID = "__fake_id__"
#: Tool outputs carry no error flag: an error result is prefixed so the model knows.
ERROR_PREFIX = "Error: "
#: Items the model produced for itself that are not stored (see docs/integrations.md).
SKIPPED_TYPES = frozenset({"reasoning"})

Item = dict[str, Any]


class UnsupportedOperationError(ChatMemoryError, NotImplementedError):
    """The operation would delete a stored event: chat-memory's log is append-only."""


def _content_text(content: Any, where: str) -> str:
    """A message's text: a string as it is; the text parts of a content list joined (other
    parts, such as images, as JSON so that nothing is silently lost)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInputError(f"{where}.content ({content!r}) must be a string or a list of content parts")
    parts: list[str] = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
        else:
            parts.append(json.dumps(part, ensure_ascii=False, sort_keys=True, default=str))
    return "\n".join(parts)


def _identity(item: Item, fallback: str | None = None) -> dict[str, Any]:
    item_id = item.get("id")
    if isinstance(item_id, str) and item_id and item_id != FAKE_ID:
        return {"id": item_id}
    return {"id": fallback} if fallback else {}


def event_from_item(item: Any, index: int = 0) -> Event | None:
    """The event one Responses input item maps to; ``None`` for a skipped item (reasoning)."""
    where = f"items[{index}]"
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_unset=True)
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where} ({item!r}) must be a Responses input item (a dict)")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        text = _content_text(item.get("content", ""), where)
        if role == "user":
            return Event.user(text, **_identity(item))
        if role == "assistant":
            return Event.assistant(text, **_identity(item))
        if role in ("system", "developer"):
            return Event.system(text, **_identity(item))
        raise InvalidInputError(f"{where}.role ({role!r}) must be user, assistant, system or developer")
    if kind == "function_call":
        call_id, name, raw = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInputError(f"{where}.call_id ({call_id!r}) must be a non-empty string")
        try:
            # text the model wrote: nested too deep, a huge integer or no JSON at all is kept
            # as that text (replayed verbatim), as the SDK's SQLiteSession keeps it
            arguments = loads(raw, f"{where}.arguments", MAX_DOCUMENT_DEPTH) if isinstance(raw, str) else raw
        except JSONLimitError:
            arguments = None
        metadata = {} if isinstance(arguments, dict) else {"raw_arguments": str(raw)}  # replayed as the model wrote it
        return Event.tool_call(
            str(name), arguments if isinstance(arguments, dict) else {}, call_id=call_id,
            metadata=metadata, **_identity(item, f"call:{call_id}"),
        )
    if kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInputError(f"{where}.call_id ({call_id!r}) must be a non-empty string")
        output = item.get("output", "")
        text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
        # one id per call: the SDK re-adding the same output (a retry) stores nothing twice
        return Event.tool_result(call_id, text, **_identity(item, f"output:{call_id}"))
    if kind in SKIPPED_TYPES:
        return None
    raise InvalidInputError(
        f"{where}.type ({kind!r}) is not stored by chat-memory (messages, function_call and "
        "function_call_output are; reasoning items are skipped)"
    )


def events_from_items(items: Iterable[Any]) -> list[Event]:
    """The events a list of Responses input items maps to, in order. An item nested more
    than :data:`~chat_memory.safe_json.MAX_DOCUMENT_DEPTH` levels deep or holding an integer
    of more than :data:`~chat_memory.safe_json.MAX_INT_DIGITS` digits refuses the whole list
    with an :class:`InvalidEventError` naming it (the SDK's SQLiteSession, whose
    ``json.dumps`` fails on such an item, stores none of the list either); a function call's
    ``arguments`` text is a string and is stored whatever it holds."""
    items = list(items)
    for i, item in enumerate(items):
        try:
            check(item, f"items[{i}]", MAX_DOCUMENT_DEPTH)
        except JSONLimitError as exc:
            raise InvalidEventError(f"{exc}; nothing of this list was stored") from None
    events = [event_from_item(item, i) for i, item in enumerate(items)]
    return [e for e in events if e is not None]


def items_from_window(
    window: Sequence[Event], summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE
) -> list[list[Item]]:
    """A window as Responses input items, in groups that must stay together: a leading
    ``system`` message (pinned events, and the summary with ``summary_placement="system_prompt"``),
    user messages (the summary otherwise), and each assistant step (its texts and
    ``function_call`` items, then one ``function_call_output`` per call, a synthetic error
    output for a call without a result) as one group. Built on the renderers' plan, so the
    rules of docs/rendering.md hold."""
    shown = plan(window, None, summary_placement)
    groups: list[list[Item]] = []
    system = "\n\n".join(t for t in ("\n\n".join(shown.system), shown.system_summary) if t)
    if system:
        groups.append([{"role": "system", "content": system}])
    for part in shown.parts:
        groups.append([{"role": "user", "content": part.text}] if isinstance(part, Text) else _step(part))
    return groups


def _step(step: Step) -> list[Item]:
    items: list[Item] = []
    for block in step.blocks:
        if isinstance(block, Text):
            items.append({"role": "assistant", "content": block.text})
        else:
            raw = block.event.metadata.get("raw_arguments")
            arguments = raw if isinstance(raw, str) else json.dumps(block.event.arguments or {}, ensure_ascii=False)
            items.append({"type": "function_call", "call_id": block.id, "name": block.name, "arguments": arguments})
    for call in step.calls:
        content, is_error = result_text(call)
        items.append({"type": "function_call_output", "call_id": call.id, "output": ERROR_PREFIX + content if is_error else content})
    return items


def newest(groups: list[list[Item]], limit: int | None) -> list[Item]:
    """The newest whole groups with at most ``limit`` items in all (every group when ``limit``
    is None). A function call never leaves without its output: when the newest group alone
    is longer than ``limit``, it is returned whole."""
    if limit is None:
        return [item for group in groups for item in group]
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInputError(f"limit ({limit!r}) must be None or a whole number, 0 or more")
    kept: list[list[Item]] = []
    count = 0
    for group in reversed(groups):
        if limit == 0 or (kept and count + len(group) > limit):
            break
        kept.append(group)
        count += len(group)
    return [item for group in reversed(kept) for item in group]


class ChatMemorySession:
    """The SDK's ``Session`` protocol over one chat-memory conversation.

    ``get_items`` returns the window (not the whole log) as input items; with ``limit``, the
    newest items cut only between whole steps, so a ``function_call`` is never separated from
    its ``function_call_output``. ``add_items`` appends atomically (compaction runs as in
    ``memory.add``). ``pop_item`` raises :class:`UnsupportedOperationError`: the log is
    append-only (the SDK calls it only to roll back after a failed retry, and logs the error
    and carries on). ``clear_session`` deletes the conversation.

    ``memory`` is a :class:`~chat_memory.ChatMemory` (the async methods run it in a worker
    thread, ``asyncio.to_thread``) or an :class:`~chat_memory.AsyncChatMemory` (awaited on the
    loop, no thread); :meth:`items` and :meth:`add`, the sync twins, need a ``ChatMemory``.

    >>> result = await Runner.run(agent, "Hi", session=ChatMemorySession(memory, "conv-1"))
    """

    def __init__(self, memory: AnyMemory, session_id: str, session_settings: SessionSettings | None = None) -> None:
        self.memory = check_memory(memory, "ChatMemorySession")
        self.session_id = check_conversation_id(session_id)
        self.session_settings = session_settings

    def _items(self, limit: int | None) -> Steps[list[Item]]:
        window = yield from call("model_window", self.session_id)
        return newest(items_from_window(window, self.memory.config.summary_placement), limit)

    def _add(self, items: Sequence[Any]) -> Steps[None]:
        events = events_from_items(items)
        if events:
            yield from call("add", self.session_id, events)

    def items(self, limit: int | None = None) -> list[Item]:
        """:meth:`get_items`, synchronously (a ``ChatMemory`` only)."""
        return run_sync(self.memory, self._items(limit), "ChatMemorySession.items()", "await session.get_items()")

    def add(self, items: Sequence[Any]) -> None:
        """:meth:`add_items`, synchronously (a ``ChatMemory`` only)."""
        run_sync(self.memory, self._add(items), "ChatMemorySession.add()", "await session.add_items()")

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The window as Responses input items, the newest ``limit`` whole steps' worth."""
        return await arun_memory(self._items(limit), self.memory)

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` in order, atomically; an item already in the window is not stored again."""
        await arun_memory(self._add(list(items)), self.memory)

    async def pop_item(self) -> Item | None:
        """Refused: chat-memory never deletes a stored event (see the class docstring)."""
        raise UnsupportedOperationError(
            f"pop_item on session {self.session_id!r}: chat-memory's log is append-only and cannot "
            "remove its newest item; use clear_session() to delete the conversation"
        )

    async def clear_session(self) -> None:
        """Delete the conversation: window, summary and archive."""
        await arun_memory(call("clear", self.session_id), self.memory)


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
