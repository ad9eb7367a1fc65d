"""LangChain messages to chat-memory events and a window back to LangChain messages.

Messages to events: ``HumanMessage`` is a ``user`` event, ``AIMessage`` an ``assistant``
event (its text, when it has any) followed by one ``tool_call`` event per entry of
``tool_calls``, ``ToolMessage`` a ``tool_result`` (``status="error"`` sets ``is_error``),
``SystemMessage`` a pinned ``system`` event. A message's ``id`` becomes the id of its first
event (``<id>#1``, ``<id>#2``… for the tool calls after it), so adding the same messages again
stores nothing twice.

Window to messages: built on the renderers' plan (:mod:`chat_memory.render.plan`), so the
rules of docs/rendering.md hold: every ``AIMessage`` tool call is answered by a
``ToolMessage`` right after it (a synthetic error result when none was stored), and no
``ToolMessage`` is without its call (a result whose call was archived is shown as a note in a
``HumanMessage``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

from ...config import SummaryPlacement
from ...errors import InvalidEventError, InvalidInputError
from ...events import Event
from ...render.plan import Step, Text, plan, result_text
from ...safe_json import MAX_DOCUMENT_DEPTH, JSONLimitError, check


def message_text(message: BaseMessage) -> str:
    """The text of a message: string content as it is, the text blocks of a list joined, and
    other blocks (images, files) as JSON, so nothing the message said is silently lost."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") in ("tool_use", "tool_call"):
            continue  # the same call is in `tool_calls`
        else:
            parts.append(json.dumps(block, ensure_ascii=False, sort_keys=True, default=str))
    return "\n".join(p for p in parts if p)


def _ids(message: BaseMessage, count: int) -> list[dict[str, Any]]:
    """Event ids for the ``count`` events of one message: its own id, then ``<id>#k``."""
    if not message.id:
        return [{} for _ in range(count)]
    return [{"id": message.id if k == 0 else f"{message.id}#{k}"} for k in range(count)]


def events_from_message(message: BaseMessage, index: int = 0) -> list[Event]:
    """The events one LangChain message maps to (see the module docstring)."""
    role = message.role if isinstance(message, ChatMessage) else message.type
    text = message_text(message)
    if role in ("human", "user"):
        return [Event.user(text, **_ids(message, 1)[0])]
    if role in ("system", "developer"):
        return [Event.system(text, **_ids(message, 1)[0])]
    if isinstance(message, ToolMessage) or role == "tool":
        call_id = getattr(message, "tool_call_id", None)
        if not call_id:
            raise InvalidInputError(f"messages[{index}].tool_call_id ({call_id!r}) must be set on a ToolMessage")
        error = getattr(message, "status", "success") == "error"
        return [Event.tool_result(call_id, text, name=message.name, is_error=error, **_ids(message, 1)[0])]
    if role in ("ai", "assistant"):
        calls = list(getattr(message, "tool_calls", None) or [])
        count = len(calls) + (1 if text.strip() else 0)
        ids = iter(_ids(message, count))
        events = [Event.assistant(text, **next(ids))] if text.strip() else []
        for k, call in enumerate(calls):
            if not call.get("id"):
                raise InvalidInputError(f"messages[{index}].tool_calls[{k}].id ({call.get('id')!r}) must be set")
            events.append(Event.tool_call(call["name"], dict(call.get("args") or {}), call_id=call["id"], **next(ids)))
        return events
    raise InvalidInputError(
        f"messages[{index}] has type {message.type!r}, which chat-memory does not store "
        "(use HumanMessage, AIMessage, ToolMessage or SystemMessage)"
    )


def events_from_messages(messages: Iterable[BaseMessage]) -> list[Event]:
    """The events a list of LangChain messages maps to, in order. A message whose content or
    tool-call arguments are nested more than :data:`~chat_memory.safe_json.MAX_DOCUMENT_DEPTH`
    levels deep (or hold an integer of more than
    :data:`~chat_memory.safe_json.MAX_INT_DIGITS` digits) refuses the whole list with an
    :class:`InvalidEventError` naming it, before anything recurses into it."""
    events: list[Event] = []
    for index, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise InvalidInputError(f"messages[{index}] ({message!r}) is not a LangChain message")
        _check_nesting(message, index)
        events += events_from_message(message, index)
    return events


def _check_nesting(message: BaseMessage, index: int) -> None:
    try:
        check(message.content, f"messages[{index}].content", MAX_DOCUMENT_DEPTH)
        for k, call in enumerate(getattr(message, "tool_calls", None) or []):
            check(call.get("args"), f"messages[{index}].tool_calls[{k}].args", MAX_DOCUMENT_DEPTH)
    except JSONLimitError as exc:
        raise InvalidEventError(f"{exc}; nothing of this list was stored") from None


def render(window: Sequence[Event], summary_placement: SummaryPlacement | str) -> tuple[str, list[BaseMessage]]:
    """``(system text, messages)``: the pinned system events (and the summary with
    ``summary_placement="system_prompt"``) as one text, and the rest as LangChain messages."""
    shown = plan(window, None, summary_placement)
    system = "\n\n".join(t for t in ("\n\n".join(shown.system), shown.system_summary) if t)
    messages: list[BaseMessage] = []
    for part in shown.parts:
        if isinstance(part, Text):
            messages.append(HumanMessage(part.text))
        else:
            messages += _step(part)
    return system, messages


def _step(step: Step) -> list[BaseMessage]:
    texts = [b.text for b in step.blocks if isinstance(b, Text)]
    calls = [{"name": c.name, "args": dict(c.event.arguments or {}), "id": c.id, "type": "tool_call"} for c in step.calls]
    out: list[BaseMessage] = [AIMessage(content="\n\n".join(texts), tool_calls=calls)]
    for call in step.calls:
        content, is_error = result_text(call)
        out.append(ToolMessage(content, tool_call_id=call.id, name=call.name, status="error" if is_error else "success"))
    return out


def messages_from_window(
    window: Sequence[Event],
    system_prompt: str | None = None,
    summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE,
) -> list[BaseMessage]:
    """A window as LangChain messages: one ``SystemMessage`` first when there is a system
    prompt, pinned events or (``summary_placement="system_prompt"``) a summary; the summary
    otherwise as a leading ``HumanMessage``; then the conversation, tool pairs always valid."""
    system, messages = render(window, summary_placement)
    text = "\n\n".join(t for t in (system_prompt or "", system) if t.strip())
    return ([SystemMessage(text)] if text else []) + messages
