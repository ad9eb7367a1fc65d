"""Which messages of a list are already stored: LangChain's identity, the message ``id``.

LangGraph's ``add_messages`` reducer merges by id: a message whose id is already in the state
replaces it, the others are appended (an id-less one is given a ``uuid4`` first), a
``RemoveMessage`` deletes by id and ``REMOVE_ALL_MESSAGES`` drops everything before it. Here:

- a message whose id is stored and which says the same (its events' digests match) is a
  re-sent copy: nothing is stored;
- a message whose id is stored but which says something else is refused
  (:class:`InvalidInputError`): replacing a stored message needs retraction, which the
  engine does not have yet; the whole list is refused before anything is written;
- ``REMOVE_ALL_MESSAGES`` clears the conversation (what ``clear()`` does) and the messages
  after it are added; a ``RemoveMessage`` by id is refused, naming what it needs;
- messages with a :data:`~.convert.RENDERED_ID_PREFIX` id (a summary, a stand-in result, a
  note) stand for stored events and are never stored.

Where it looks: the window, always (a re-sent transcript's newest messages are there). The
whole history is read only when the list holds a message that is not in the window *before*
one that is: a re-sent transcript longer than the window, whose older messages may have been
archived. A list of new messages, or a re-sent transcript that fits in the window, costs one
window read. Messages of such a list before the first one the store has are older than what
it keeps (the archive cap erased them) and are not stored again."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, RemoveMessage

from ...errors import InvalidInputError
from ...events import Event, EventType
from ...steps import Steps, call
from .convert import RENDERED_ID_PREFIX, said_the_same, removal_refused

try:
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
except ImportError:  # pragma: no cover - langgraph comes with the `langchain` package
    REMOVE_ALL_MESSAGES = "__remove_all__"


def is_rendered(message: BaseMessage) -> bool:
    """Whether ``message`` is one that only a rendering adds (see :data:`RENDERED_ID_PREFIX`)."""
    return isinstance(message, BaseMessage) and bool(message.id) and str(message.id).startswith(RENDERED_ID_PREFIX)


def removals(messages: Sequence[BaseMessage]) -> tuple[bool, list[tuple[int, BaseMessage]]]:
    """``(clears, kept)``: whether the list clears the conversation (it holds
    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)``: what comes before the last one is dropped, as
    LangGraph's reducer drops it), and the messages to store with their indexes. A
    ``RemoveMessage`` by id is refused; rendered messages are left out."""
    start, clears = 0, False
    for index, message in enumerate(messages):
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            start, clears = index + 1, True
    kept: list[tuple[int, BaseMessage]] = []
    for index in range(start, len(messages)):
        message = messages[index]
        if isinstance(message, RemoveMessage):
            raise removal_refused(index, message.id)
        if not is_rendered(message):
            kept.append((index, message))
    return clears, kept


def check_pairs_alone(parts: Sequence[tuple[int, list[Event]]]) -> None:
    """After a clear, the list is the whole conversation: every result must answer a call
    earlier in it. Checked before the clear, so that a refused list clears nothing."""
    calls: set[str | None] = set()
    for index, events in parts:
        for event in events:
            if event.type is EventType.TOOL_CALL:
                calls.add(event.tool_call_id)
            elif event.type is EventType.TOOL_RESULT and event.tool_call_id not in calls:
                raise InvalidInputError(
                    f"messages[{index}].tool_call_id ({event.tool_call_id!r}) answers no tool call after "
                    "REMOVE_ALL_MESSAGES; the list would clear the conversation, so the call must be in it. "
                    "Nothing was cleared or stored"
                )


def new_events(cid: str, parts: Sequence[tuple[int, list[Event]]], stored: dict[str, Event], look_back: bool = True) -> Steps[list[Event]]:
    """The events of ``parts`` (``(message index, its events)``) that are not stored yet, in
    order; ``stored`` is the window by event id. A message stored under its id with other
    content, or repeated in the list with other content, refuses the whole list.

    ``look_back``: when the list holds an unknown message before a known one, read the
    history; then the messages before the first one found anywhere are older than anything
    the store keeps (erased by the archive cap, ``max_archived_events``) and are not stored
    again. A ``SystemMessage`` saying what a pinned system event says is not stored again
    whatever its id (a client re-sending its system prompt without an id)."""
    pinned = {e.content for e in stored.values() if e.type is EventType.SYSTEM}
    flat = [e for _, events in parts for e in events]
    last_known = max((k for k, e in enumerate(flat) if e.id in stored), default=-1)
    before_kept = 0  # events of the list before the first one found: older than the store keeps
    if look_back and last_known > 0 and any(e.id not in stored for e in flat[:last_known]):
        # a re-sent transcript longer than the window: its older messages may be archived
        history: list[Event] = yield from call("history", cid)
        stored = {**{e.id: e for e in history}, **stored}
        before_kept = next(k for k, e in enumerate(flat) if e.id in stored)
    fresh: list[Event] = []
    seen: dict[str, Event] = {}
    position = 0
    for index, events in parts:
        first, position = position, position + len(events)
        known = [stored.get(e.id) or seen.get(e.id) for e in events]
        if not any(known):
            if first < before_kept or (events[0].type is EventType.SYSTEM and events[0].content in pinned):
                continue
            fresh += events
            seen.update((e.id, e) for e in events)
            continue
        more = f"{events[0].id}#{len(events)}"  # a stored call this copy lacks
        extra = stored.get(more) or seen.get(more)
        if not all(known) or (extra is not None and extra.type is EventType.TOOL_CALL) or not all(
            said_the_same(k, e) for k, e in zip(known, events)  # type: ignore[arg-type]
        ):
            raise changed(index, events[0].id)
    return fresh


def changed(index: int, message_id: str) -> InvalidInputError:
    """The error for a message whose id is stored (or earlier in the list) with other content."""
    return InvalidInputError(
        f"messages[{index}] (id {message_id!r}) differs from the message stored under that id. LangGraph's "
        "reducer would replace it; chat-memory's log cannot replace a stored message yet (that needs "
        "retraction, memory.retract, not in this version). Give it a new id (or none) to store it as a new "
        "message. Nothing of this list was stored"
    )
