"""Which messages of a list are already stored: LangChain's identity, the message ``id``.

LangGraph's ``add_messages`` reducer merges by id: a message whose id is already in the state
replaces it, the others are appended (an id-less one is given a ``uuid4`` first), a
``RemoveMessage`` deletes by id and ``REMOVE_ALL_MESSAGES`` drops everything before it. Here:

- a message whose id is stored and which says the same (its events' digests match) is a
  re-sent copy: nothing is stored;
- a message whose id is stored but which says something else replaces it: the stored message
  is retracted (``memory.retract``) and the new one appended at the end (the reducer keeps
  the old place; a log appends); a tool call goes with its result (pairs stay whole);
- a ``RemoveMessage`` by id retracts the message (an id never stored is refused, as the
  reducer refuses it, before anything is written); ``REMOVE_ALL_MESSAGES`` clears the
  conversation (what ``clear()`` does) and the messages after it are added;
- messages with a :data:`~.convert.RENDERED_ID_PREFIX` id (a summary, a stand-in result, a
  note) stand for stored events and are never stored.

Where it looks: the window, always (a re-sent transcript's newest messages are there). The
whole history is read only when the list removes an id the window does not hold, or holds a
message that is not in the window *before* one that is: a re-sent transcript longer than the window, whose older messages may have been
archived. A list of new messages, or a re-sent transcript that fits in the window, costs one
window read. Messages of such a list before the first one the store has are older than what
it keeps (the archive cap erased them) and are not stored again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage, RemoveMessage

from ...errors import InvalidInputError
from ...events import Event, EventType
from ..memory import MemorySteps, add_to, history_of, retract_from
from .convert import RENDERED_ID_PREFIX, said_the_same

try:
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
except ImportError:  # pragma: no cover - langgraph comes with the `langchain` package
    REMOVE_ALL_MESSAGES = "__remove_all__"


def is_rendered(message: BaseMessage) -> bool:
    """Whether ``message`` is one that only a rendering adds (see :data:`RENDERED_ID_PREFIX`)."""
    return (
        isinstance(message, BaseMessage)
        and bool(message.id)
        and str(message.id).startswith(RENDERED_ID_PREFIX)
    )


def removals(messages: Sequence[BaseMessage]) -> tuple[bool, list[tuple[int, BaseMessage]]]:
    """``(clears, kept)``: whether the list clears the conversation (it holds
    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)``: what comes before the last one is dropped, as
    LangGraph's reducer drops it), and the messages after it with their indexes, a
    ``RemoveMessage`` by id among them; rendered messages are left out."""
    start, clears = 0, False
    for index, message in enumerate(messages):
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            start, clears = index + 1, True
    kept = [
        (index, messages[index])
        for index in range(start, len(messages))
        if not is_rendered(messages[index])
    ]
    return clears, kept


@dataclass
class Changes:
    """What a list of messages does to the stored conversation: the stored events to retract
    first (messages removed or replaced), then the events to add, in order."""

    retract: list[str] = field(default_factory=list)
    add: list[Event] = field(default_factory=list)


def apply_changes(cid: str, changes: Changes) -> MemorySteps[None]:
    """Retract, then add (two writes: a replaced message's id must leave the window before
    its new version can be stored under it)."""
    if changes.retract:
        yield from retract_from(cid, changes.retract)
    if changes.add:
        yield from add_to(cid, changes.add)


def _by_message(stored: dict[str, Event]) -> dict[str, list[Event]]:
    """The stored events of each message id: the event of that id, then ``<id>#k`` for its
    tool calls (one pass over ``stored``, so a long re-sent transcript costs its length)."""
    groups: dict[str, list[Event]] = {}
    for key, event in stored.items():
        groups.setdefault(key, []).append(event)
        base, _, k = key.rpartition("#")
        if base and k.isdigit() and k != "0":
            groups.setdefault(base, []).append(event)
    return groups


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


def new_events(
    cid: str,
    parts: Sequence[tuple[int, list[Event]]],
    stored: dict[str, Event],
    look_back: bool = True,
    removed: Sequence[tuple[int, str]] = (),
) -> MemorySteps[Changes]:
    """What ``parts`` (``(message index, its events)``) and the ``RemoveMessage`` ids of
    ``removed`` (``(message index, id)``) change, as LangGraph's ``add_messages`` merges by
    id; ``stored`` is the window by event id. Per message id, the last word counts: a re-sent
    copy saying the same is not stored again; one saying something else replaces the stored
    message (retracted, and the new version appended at the end); a ``RemoveMessage`` retracts
    it (a message removed and added again in one list is added). A ``RemoveMessage`` of an id
    that was never stored is refused, as the reducer refuses it; one already retracted does
    nothing. A re-sent ``ToolMessage`` whose call a replacement takes with it (pairs go whole)
    is stored again after the new call.

    ``look_back``: when the list holds an unknown message before a known one, or removes an id
    the window does not hold, read the history; then the messages before the first one found
    anywhere are older than anything the store keeps (erased by the archive cap,
    ``max_archived_events``) and are not stored again. A ``SystemMessage`` saying what a pinned
    system event says is not stored again whatever its id."""
    pinned = {e.content for e in stored.values() if e.type is EventType.SYSTEM}
    flat = [e for _, events in parts for e in events]
    listed = {events[0].id for _, events in parts}
    last_known = max((k for k, e in enumerate(flat) if e.id in stored), default=-1)
    before_kept = 0  # events of the list before the first one found: older than the store keeps
    gone: set[str] = set()  # ids retracted already
    unknown_removals = [mid for _, mid in removed if mid not in listed and mid not in stored]
    if look_back and (
        unknown_removals or (last_known > 0 and any(e.id not in stored for e in flat[:last_known]))
    ):
        history = yield from history_of(cid, True)  # retracted ones too
        gone = {e.id for e in history if e.retracted}
        window_ids = set(stored)
        stored = {**{e.id: e for e in history if not e.retracted}, **stored}
        if last_known > 0 and any(e.id not in window_ids for e in flat[:last_known]):
            before_kept = next(k for k, e in enumerate(flat) if e.id in stored)
    of_message = _by_message(stored)
    # the last word per message id: its events, or None when a RemoveMessage came last
    last_word: dict[str, tuple[int, list[Event] | None]] = {}
    ops = sorted(
        [
            *((i, events[0].id, events) for i, events in parts),
            *((i, mid, None) for i, mid in removed),
        ],
        key=lambda op: op[0],
    )
    for index, mid, events in ops:
        last_word[mid] = (index, events)
    changes = Changes()
    doomed_calls: set[str | None] = set()
    for mid, (index, events) in last_word.items():
        old = of_message.get(mid, [])
        if events is None:
            if not old and mid not in listed and mid not in gone:
                raise InvalidInputError(
                    f"messages[{index}] is a RemoveMessage of id {mid!r}, which is not stored in conversation "
                    f"{cid!r} (LangGraph's reducer refuses it too). Nothing of this list was stored"
                )
            changes.retract += [e.id for e in old]
        elif old and not _same_message(old, events):
            changes.retract += [e.id for e in old]
        else:
            continue
        doomed_calls |= {e.tool_call_id for e in old if e.tool_call_id}
    final = [words for words in last_word.values() if words[1] is not None]
    fresh_calls = {
        e.tool_call_id for _, events in final for e in events or () if e.type is EventType.TOOL_CALL
    }
    position, emitted = 0, set()
    for _, listed_events in parts:
        first, position = position, position + len(listed_events)
        mid = listed_events[0].id
        events = last_word[mid][1]
        if events is None or mid in emitted:
            continue  # removed, or emitted at its first place in the list (as the reducer keeps it)
        emitted.add(mid)
        old = of_message.get(mid, [])
        if old and _same_message(old, events):
            resent_result = (
                events[0].type is EventType.TOOL_RESULT and events[0].tool_call_id in doomed_calls
            )
            if resent_result and events[0].tool_call_id in fresh_calls:
                changes.add += events  # its call was replaced: answer the new one
            continue
        if not old and (
            first < before_kept
            or (events[0].type is EventType.SYSTEM and events[0].content in pinned)
        ):
            continue
        changes.add += events
    return changes


def _same_message(old: list[Event], events: list[Event]) -> bool:
    """Whether the stored events of a message say what ``events`` say (no call missing or extra)."""
    by_id = {e.id: e for e in old}
    if len(old) != len(events) or any(e.id not in by_id for e in events):
        return False
    return all(said_the_same(by_id[e.id], e) for e in events)
