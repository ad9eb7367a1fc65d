"""LangChain messages to chat-memory events and a window back to LangChain messages.

Messages to events: ``HumanMessage`` is a ``user`` event, ``AIMessage`` an ``assistant``
event (its text, when it has any) followed by one ``tool_call`` event per entry of
``tool_calls``, ``ToolMessage`` a ``tool_result`` (``status="error"`` sets ``is_error``),
``SystemMessage`` a pinned ``system`` event. A message's ``id`` becomes the id of its first
event (``<id>#1``, ``<id>#2``… for the tool calls after it); a message without one is given a
``uuid4`` id first, as LangGraph's ``add_messages`` reducer does (the message itself takes it).
Each event keeps a digest of what the message said (``metadata["langchain_digest"]``), so that
a re-sent copy is recognised and a different message under a stored id replaces it
(:mod:`.identity`).

Window to messages, for a history (:func:`history_messages`): each stored message back with
its id, and what only a rendering adds under ids starting ``chat-memory:`` (see
:data:`RENDERED_ID_PREFIX`). For a model request (:func:`messages_from_window`): built on the renderers' plan (:mod:`chat_memory.render.plan`), so the
rules of docs/rendering.md hold: every ``AIMessage`` tool call is answered by a
``ToolMessage`` right after it (a synthetic error result when none was stored), and no
``ToolMessage`` is without its call (a result whose call was archived is shown as a note in a
``HumanMessage``)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ...config import SummaryPlacement
from ...errors import InvalidEventError, InvalidInputError
from ...events import Event, EventType
from ...render.plan import (
    MISSING_RESULT_TEXT,
    Step,
    Text,
    _unpaired_note,
    parse_placement,
    plan,
    result_text,
    summary_text,
)
from ...safe_json import MAX_DOCUMENT_DEPTH, JSONLimitError, check

#: Ids of the messages that only a rendering of the window adds (the summary, the stand-in
#: result of an unanswered call, the note showing a result whose call is not in the window).
#: They stand for what is stored already: adding one back stores nothing.
RENDERED_ID_PREFIX = "chat-memory:"
#: The metadata key of an event's digest: what its message said, before the engine adds
#: anything (a tool result's name taken from its call, a cut of a long result).
DIGEST_KEY = "langchain_digest"


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
        elif (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            parts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") in ("tool_use", "tool_call"):
            continue  # the same call is in `tool_calls`
        else:
            parts.append(json.dumps(block, ensure_ascii=False, sort_keys=True, default=str))
    return "\n".join(p for p in parts if p)


def _ids(message: BaseMessage, count: int) -> list[dict[str, Any]]:
    """Event ids for the ``count`` events of one message: its own id, then ``<id>#k``."""
    assert message.id
    return [{"id": message.id if k == 0 else f"{message.id}#{k}"} for k in range(count)]


def digest(event: Event) -> str:
    """What an event says (type, text, call id, tool name of a call, arguments, error flag),
    hashed: equal for a re-sent copy of its message, different for an edited one."""
    said = [event.type.value, event.content, event.tool_call_id, event.arguments, event.is_error]
    if event.type is EventType.TOOL_CALL:
        said.append(event.tool_name)
    text = json.dumps(said, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def said_the_same(stored: Event, new: Event) -> bool:
    """Whether the stored event says what ``new`` (built from a message) says: by the digest
    kept at add time or, for an event written without one, by its fields."""
    kept = stored.metadata.get(DIGEST_KEY)
    if isinstance(kept, str):
        return kept == new.metadata.get(DIGEST_KEY)
    return (stored.type, stored.content, stored.tool_call_id, stored.is_error) == (
        new.type,
        new.content,
        new.tool_call_id,
        new.is_error,
    ) and json.dumps(stored.arguments, sort_keys=True, default=str) == json.dumps(
        new.arguments, sort_keys=True, default=str
    )


def removal_refused(index: int, message_id: str | None) -> InvalidInputError:
    """The error for a ``RemoveMessage`` where none can be applied (a list converted to events
    as such, or the agent state after LangGraph's reducer): where removal works instead."""
    return InvalidInputError(
        f"messages[{index}] is a RemoveMessage (id {message_id!r}), which is not a message to store: "
        "ChatMemoryHistory.add_messages applies it (it retracts the message), as does memory.retract. "
        "Nothing of this list was stored"
    )


def events_from_message(message: BaseMessage, index: int = 0) -> list[Event]:
    """The events one LangChain message maps to (see the module docstring). A message
    without an ``id`` is given one (a ``uuid4``, as LangGraph's reducer does)."""
    if message.type == "remove":
        raise removal_refused(index, message.id)
    if not message.id:
        message.id = str(uuid.uuid4())
    return [
        e.model_copy(update={"metadata": {**e.metadata, DIGEST_KEY: digest(e)}})
        for e in _events(message, index)
    ]


def _events(message: BaseMessage, index: int) -> list[Event]:
    role = message.role if isinstance(message, ChatMessage) else message.type
    text = message_text(message)
    if role in ("human", "user"):
        return [Event.user(text, **_ids(message, 1)[0])]
    if role in ("system", "developer"):
        return [Event.system(text, **_ids(message, 1)[0])]
    if isinstance(message, ToolMessage) or role == "tool":
        call_id = getattr(message, "tool_call_id", None)
        if not call_id:
            raise InvalidInputError(
                f"messages[{index}].tool_call_id ({call_id!r}) must be set on a ToolMessage"
            )
        error = getattr(message, "status", "success") == "error"
        return [
            Event.tool_result(
                call_id, text, name=message.name, is_error=error, **_ids(message, 1)[0]
            )
        ]
    if role in ("ai", "assistant"):
        calls = list(getattr(message, "tool_calls", None) or [])
        # a message with no calls is stored even when empty, so that it comes back as it went in
        said = bool(text.strip()) or not calls
        ids = iter(_ids(message, len(calls) + said))
        events = [Event.assistant(text, **next(ids))] if said else []
        for k, call in enumerate(calls):
            if not call.get("id"):
                raise InvalidInputError(
                    f"messages[{index}].tool_calls[{k}].id ({call.get('id')!r}) must be set"
                )
            events.append(
                Event.tool_call(
                    call["name"], dict(call.get("args") or {}), call_id=call["id"], **next(ids)
                )
            )
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
    return [e for _, events in message_events(enumerate(messages)) for e in events]


def message_events(messages: Iterable[tuple[int, BaseMessage]]) -> list[tuple[int, list[Event]]]:
    """The events of each ``(index, message)``, with its index (for errors naming it); the
    checks of :func:`events_from_messages`, all of them before anything is returned."""
    out: list[tuple[int, list[Event]]] = []
    for index, message in messages:
        if not isinstance(message, BaseMessage):
            raise InvalidInputError(f"messages[{index}] ({message!r}) is not a LangChain message")
        _check_nesting(message, index)
        out.append((index, events_from_message(message, index)))
    return out


def _check_nesting(message: BaseMessage, index: int) -> None:
    try:
        check(message.content, f"messages[{index}].content", MAX_DOCUMENT_DEPTH)
        for k, call in enumerate(getattr(message, "tool_calls", None) or []):
            check(call.get("args"), f"messages[{index}].tool_calls[{k}].args", MAX_DOCUMENT_DEPTH)
    except JSONLimitError as exc:
        raise InvalidEventError(f"{exc}; nothing of this list was stored") from None


def render(
    window: Sequence[Event], summary_placement: SummaryPlacement | str
) -> tuple[str, list[BaseMessage]]:
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
    calls = [
        {"name": c.name, "args": dict(c.event.arguments or {}), "id": c.id, "type": "tool_call"}
        for c in step.calls
    ]
    out: list[BaseMessage] = [AIMessage(content="\n\n".join(texts), tool_calls=calls)]
    for call in step.calls:
        content, is_error = result_text(call)
        out.append(
            ToolMessage(
                content,
                tool_call_id=call.id,
                name=call.name,
                status="error" if is_error else "success",
            )
        )
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


def history_messages(
    window: Sequence[Event], summary_placement: SummaryPlacement | str
) -> list[BaseMessage]:
    """A window as a chat history shows it: each stored message back as it was added, with
    its id (pinned ``SystemMessage`` s first, then the summary, as a ``SystemMessage`` with
    ``summary_placement="system_prompt"`` and a ``HumanMessage`` otherwise, then the
    conversation). Tool pairs are made whole the way the renderers make them: every call is
    followed by its ``ToolMessage`` (a stand-in error result when none is stored) and a result
    whose call is not in the window is shown as a note in a ``HumanMessage``; these and the
    summary have ids starting with :data:`RENDERED_ID_PREFIX`."""
    where = parse_placement(summary_placement)
    out: list[BaseMessage] = [
        SystemMessage(e.content, id=e.id) for e in window if e.type is EventType.SYSTEM
    ]
    lead = SystemMessage if where is SummaryPlacement.SYSTEM_PROMPT else HumanMessage
    out += [
        lead(summary_text(e), id=f"{RENDERED_ID_PREFIX}summary:{e.id}")
        for e in window
        if e.type is EventType.SUMMARY
    ]
    real = [e for e in window if e.is_real]
    results: dict[str | None, list[Event]] = {}
    for event in real:
        if event.type is EventType.TOOL_RESULT:
            results.setdefault(event.tool_call_id, []).append(event)
    called = {e.tool_call_id for e in real if e.type is EventType.TOOL_CALL}
    shown: set[str] = set()
    i = 0
    while i < len(real):
        event = real[i]
        i += 1
        if event.type is EventType.USER:
            out.append(HumanMessage(event.content, id=event.id))
        elif event.type is EventType.TOOL_RESULT:
            if event.id not in shown:
                note = _unpaired_note(event, event.tool_call_id in called)
                out.append(HumanMessage(note, id=f"{RENDERED_ID_PREFIX}note:{event.id}"))
        else:
            group = [event]  # an AIMessage: its text, then the calls stored as <id>#1, <id>#2…
            while (
                i < len(real)
                and real[i].type is EventType.TOOL_CALL
                and real[i].id == f"{event.id}#{len(group)}"
            ):
                group.append(real[i])
                i += 1
            out += _ai_message(group, results, shown)
    return out


def _ai_message(
    group: list[Event], results: dict[str | None, list[Event]], shown: set[str]
) -> list[BaseMessage]:
    text = group[0].content if group[0].type is EventType.ASSISTANT else ""
    calls = [e for e in group if e.type is EventType.TOOL_CALL]
    tool_calls = [
        {
            "name": c.tool_name,
            "args": dict(c.arguments or {}),
            "id": c.tool_call_id,
            "type": "tool_call",
        }
        for c in calls
    ]
    out: list[BaseMessage] = [AIMessage(content=text, tool_calls=tool_calls, id=group[0].id)]
    for c in calls:
        result = next((r for r in results.get(c.tool_call_id, []) if r.id not in shown), None)
        if result is None:
            missing = f"{RENDERED_ID_PREFIX}missing-result:{c.tool_call_id}"
            out.append(
                ToolMessage(
                    MISSING_RESULT_TEXT,
                    tool_call_id=c.tool_call_id,
                    name=c.tool_name,
                    status="error",
                    id=missing,
                )
            )
            continue
        shown.add(result.id)
        status = "error" if result.is_error else "success"
        out.append(
            ToolMessage(
                result.content,
                tool_call_id=c.tool_call_id,
                name=result.tool_name,
                status=status,
                id=result.id,
            )
        )
    return out
