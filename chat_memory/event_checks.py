"""The checks an ``add()`` makes on the events it is given, before anything is written:
each is an Event of a kind a caller may add, ids are unique, pins do not collide, tool calls
and results pair up (against the batch, the window and the archive), every event is stored
as the JSON envelope all backends keep, and none is larger than the context window (a tool
result may be cut to ``max_tool_result_tokens``). Written as steps (:mod:`chat_memory.steps`):
the tool-pair check reads the store, or runs inside the store's append (:func:`tool_checked`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import steps
from .backends.bookkeeping import replaced, replaced_in_place
from .config import MemoryConfig
from .envelopes import as_stored_everywhere
from .errors import InvalidEventError
from .events import Event, EventType, Window
from .pins import check_pin_key, pin_key
from .steps import Steps
from .tokens import TokenCounter, count_event_tokens, truncate_tool_result


def prepared_batch(
    cid: str,
    events: Event | Iterable[Event],
    config: MemoryConfig,
    token_counter: TokenCounter,
    finds_events: bool = False,
    checked_in_store: bool = False,
) -> Steps[list[Event]]:
    """The events an ``add()`` was given, checked and ready to append: each an Event that is
    no summary, with its own id, tool fields set, a pin key of its own, the tool pairs right
    (:func:`checked_tool_events`), a nameless tool result named after its call, the JSON
    envelope every store keeps, and its token count (:func:`sized`). Anything wrong is an
    :class:`InvalidEventError` naming the event's index, before anything is written.
    ``finds_events``: the store looks ids up by index (see :func:`checked_tool_events`).
    ``checked_in_store``: the store runs :func:`tool_checked` inside its append (it has
    :class:`~chat_memory.backends.base.ChecksToolPairs`), so the tool pairs are left to it."""
    if isinstance(events, Event):
        batch = [events]
    elif isinstance(events, Iterable):
        batch = list(events)
    else:
        raise InvalidEventError(f"events ({events!r}) must be an Event or a list of events")
    for i, event in enumerate(batch):
        if type(event) is not Event and not isinstance(event, Event):
            raise InvalidEventError(
                f"events[{i}] ({event!r}) is not an Event; build one with Event.user(...) etc."
            )
        kind = event.type
        if kind is EventType.SUMMARY:
            raise InvalidEventError(
                f"events[{i}] has type 'summary': summaries are written by compaction only"
            )
        if kind in _TOOL_TYPES and not event.tool_call_id:
            raise InvalidEventError(
                f"events[{i}].tool_call_id ({event.tool_call_id!r}) must be set for a {kind.value}"
            )
        if kind is EventType.TOOL_CALL and not event.tool_name:
            raise InvalidEventError(
                f"events[{i}].tool_name ({event.tool_name!r}) must be set for a tool_call"
            )
    first_at: dict[str, int] = {}
    for i, event in enumerate(batch):
        j = first_at.setdefault(event.id, i)
        if j != i:
            raise InvalidEventError(
                f"events[{i}].id ({event.id!r}) repeats events[{j}].id; every event needs its own id"
            )
    batch = [as_stored_everywhere(i, e) for i, e in enumerate(batch)]
    pinned_at: dict[str, int] = {}
    system = EventType.SYSTEM  # a local: an enum member is slow to look up on its class
    for i, event in enumerate(batch):
        if event.type is system:
            check_pin_key(i, event)
            j = pinned_at.setdefault(pin_key(event), i)
            if j != i:
                raise InvalidEventError(
                    f"events[{i}] and events[{j}] are system events with the same pin key ({pin_key(event)!r}): "
                    "the later would supersede the earlier at once; add one of them"
                )
    if not checked_in_store:
        tool_names = yield from checked_tool_events(cid, batch, finds_events)
        if tool_names:
            batch = [_named_after_call(e, tool_names) for e in batch]
    # every event of ``batch`` is now one this function made (parsed back, or a copy): none
    # is the caller's, so each is sized in place (see sized)
    return [sized(i, e, config, token_counter, fresh=True) for i, e in enumerate(batch)]


def sized(
    index: int,
    event: Event,
    config: MemoryConfig,
    token_counter: TokenCounter,
    *,
    fresh: bool = False,
) -> Event:
    """The event with its token count, a tool result cut to ``max_tool_result_tokens``
    (with a visible note) when that is set; refused when it is larger than the whole
    context window, which no compaction could make room for.

    ``fresh``: nothing but the caller holds ``event`` (it was just parsed or copied for
    this add), so the store-assigned fields are set on it rather than on a copy, as
    ``model_copy`` would set them (the names join its ``model_fields_set``)."""
    tokens = count_event_tokens(event, token_counter)
    cap = config.max_tool_result_tokens
    if event.type is EventType.TOOL_RESULT and cap is not None and tokens > cap:
        event = truncate_tool_result(event, cap, tokens, token_counter)
        tokens = count_event_tokens(event, token_counter)
    window = config.context_window_tokens
    if tokens > window:
        hint = (
            " or set max_tool_result_tokens to cut tool results"
            if event.type is EventType.TOOL_RESULT
            else ""
        )
        raise InvalidEventError(
            f"events[{index}] ({event.type.value}) has {tokens} tokens, more than the whole context window "
            f"(context_window_tokens = {window}); shorten it{hint}"
        )
    changes = {"seq": None, "archived": False, "retracted": False, "tokens": tokens}
    return replaced_in_place(event, changes) if fresh else replaced(event, changes)


def checked_tool_events(
    cid: str, batch: list[Event], finds_events: bool = False
) -> Steps[dict[str, str | None]]:
    """Tool pairing (checked only when the list holds tool events), against a read before
    the append, for a store without :class:`~chat_memory.backends.base.ChecksToolPairs`
    (which runs :func:`tool_checked` inside its append instead): the rules of
    :func:`tool_checked`. Two writers racing to add different events for one call id are not
    both caught here (a retry is: by id).

    What it reads: with ``finds_events`` (the store looks ids up by index), one
    ``find_events`` call for the list's tool event ids and call ids, window and archive
    at once, costing the list, not the conversation; otherwise one window read, plus one
    :meth:`Store.find_tool_events` lookup for the results whose call is in neither the
    list nor the window.

    Returns the tool name of each call the list's results answer (by call id), so that a
    result without a name can take its call's."""
    if not any(e.type in _TOOL_TYPES for e in batch):
        return {}
    archived: list[Event] | None = None
    if finds_events:
        found = yield from steps.find_events(cid, tool_event_ids(batch), tool_call_ids(batch))
        stored = [e for e in found if not e.archived]
        archived = [e for e in found if e.archived]
    else:
        window = (yield from steps.load(cid)).window
        stored = [*window.pinned, *window.active]
    names, unresolved = _paired(cid, batch, stored)
    if unresolved:
        if archived is None:
            archived = yield from steps.find_tool_events(cid, list(unresolved))
        _answer_archived_calls(cid, names, unresolved, archived)
    return names


def tool_checked(cid: str, batch: list[Event], found: list[Event]) -> list[Event]:
    """The tool-pair check of ``batch`` against ``found``, the stored events a store with
    :class:`~chat_memory.backends.base.ChecksToolPairs` looked up for it (those whose id is
    one of :func:`tool_event_ids`, or whose ``tool_call_id`` is one of :func:`tool_call_ids`,
    window and archive, archived ones marked): the batch to append, each nameless tool result
    named after its call, or :class:`InvalidEventError` naming the event's index.

    The rules: a call's id is new to the window; a result answers a call earlier in the list,
    in the window or, only when neither has it, in the archive, and that call has no result
    yet. Events already in the window (a retry) are skipped: they are not stored again. Pure:
    a store calls it inside its append (a ``functools.partial`` over ``cid`` and ``batch`` is
    the :data:`~chat_memory.backends.base.ToolPairCheck` the engine passes)."""
    names, unresolved = _paired(cid, batch, [e for e in found if not e.archived])
    if unresolved:
        _answer_archived_calls(cid, names, unresolved, [e for e in found if e.archived])
    return [_named_after_call(e, names) for e in batch]


def tool_event_ids(batch: Sequence[Event]) -> list[str]:
    """The ids of the batch's tool calls and results, each once, in order: a stored event
    with one of them (in the window) is a retry, not stored again."""
    return list(dict.fromkeys(e.id for e in batch if e.type in _TOOL_TYPES))


def tool_call_ids(batch: Sequence[Event]) -> list[str]:
    """The ``tool_call_id`` of the batch's tool calls and results, each once, in order: the
    stored calls and results with one of them (window and archive) decide the pairing."""
    return list(
        dict.fromkeys(e.tool_call_id for e in batch if e.type in _TOOL_TYPES and e.tool_call_id)
    )


def found_in_window(batch: Sequence[Event], window: Window) -> list[Event] | None:
    """What :func:`tool_checked` needs of ``batch``, from a window alone: its pinned and
    active events with one of the batch's tool event ids or call ids, oldest first; None when
    the archive is needed too (a result whose call is in neither the batch nor the window:
    the late result of an archived call, or of none). A store holding a window it knows is
    current (by version) checks the batch on it, with no read."""
    ids, calls = set(tool_event_ids(batch)), set(tool_call_ids(batch))
    found = [
        e
        for e in (*window.pinned, *window.active)
        if e.id in ids or (e.type in _TOOL_TYPES and e.tool_call_id in calls)
    ]
    stored = {e.id for e in found}
    known = {e.tool_call_id for e in (*found, *batch) if e.type is EventType.TOOL_CALL}
    for event in batch:
        if (
            event.type is EventType.TOOL_RESULT
            and event.id not in stored
            and event.tool_call_id not in known
        ):
            return None
    return sorted(found, key=lambda e: e.seq or 0)


def _paired(
    cid: str, batch: list[Event], stored: list[Event]
) -> tuple[dict[str, str | None], dict[str, int]]:
    """The pairing of ``batch`` against ``stored``, the window's events it needs (pinned and
    active): raises for a call id already in the window or in the batch, and for a second
    result; returns the tool name of each call known so far (the window's and the batch's),
    and the call ids of the results that answer neither (by their first index): those
    answer an archived call, or none."""
    stored_ids = {e.id for e in stored}
    in_window = [e for e in stored if e.type in _TOOL_TYPES]
    calls = {e.tool_call_id: e for e in in_window if e.type is EventType.TOOL_CALL}
    results = {e.tool_call_id: e for e in in_window if e.type is EventType.TOOL_RESULT}
    batch_calls: dict[str | None, int] = {}
    batch_results: dict[str | None, int] = {}
    unresolved: dict[str, int] = {}
    for i, event in enumerate(batch):
        call_id = event.tool_call_id
        if event.id in stored_ids or event.type not in _TOOL_TYPES:
            continue
        assert call_id is not None
        if event.type is EventType.TOOL_CALL:
            if call_id in batch_calls:
                raise InvalidEventError(
                    f"events[{i}].tool_call_id ({call_id!r}) repeats the tool_call of events[{batch_calls[call_id]}]; "
                    "every tool call needs its own id"
                )
            earlier = calls.get(call_id) or results.get(call_id)
            if earlier is not None:
                raise InvalidEventError(
                    f"events[{i}].tool_call_id ({call_id!r}) is already in the window of conversation {cid!r} "
                    f"(the {earlier.type.value} at seq {earlier.seq}); every tool call needs its own id"
                )
            batch_calls[call_id] = i
            continue
        if call_id in batch_results:
            raise InvalidEventError(
                f"events[{i}] is a second tool_result for tool_call_id {call_id!r} (events[{batch_results[call_id]}] "
                "is the first); a call takes one result"
            )
        answered = results.get(call_id)
        if answered is not None:
            raise _answered_already(i, call_id, cid, answered)
        batch_results[call_id] = i
        if call_id not in batch_calls and call_id not in calls:
            unresolved[call_id] = i
    names: dict[str, str | None] = {call_id: e.tool_name for call_id, e in calls.items() if call_id}
    names.update(
        {
            e.tool_call_id: e.tool_name
            for e in batch
            if e.type is EventType.TOOL_CALL and e.tool_call_id
        }
    )
    return names, unresolved


def _answer_archived_calls(
    cid: str, names: dict[str, str | None], unresolved: dict[str, int], archived: list[Event]
) -> None:
    """Each unresolved result must answer an archived call that has no result yet; adds the
    call's tool name to ``names``."""
    for call_id, i in unresolved.items():
        # (the window holds no event of an unresolved call id: these are archived ones)
        matches = [e for e in archived if e.tool_call_id == call_id and e.type in _TOOL_TYPES]
        answered = next((e for e in matches if e.type is EventType.TOOL_RESULT), None)
        if answered is not None:
            raise _answered_already(i, call_id, cid, answered)
        found_call = next((e for e in matches if e.type is EventType.TOOL_CALL), None)
        if found_call is None:
            raise InvalidEventError(
                f"events[{i}].tool_call_id ({call_id!r}) matches no tool_call in conversation {cid!r} "
                "(window or archive); add the tool_call first (or earlier in the same list)"
            )
        names[call_id] = found_call.tool_name


def _named_after_call(event: Event, tool_names: dict[str, str | None]) -> Event:
    """A tool result without a name takes its call's: search tells the recall tools' own
    results apart by name, whoever wrote the result."""
    if (
        event.type is not EventType.TOOL_RESULT
        or event.tool_name
        or event.tool_call_id not in tool_names
    ):
        return event
    return replaced(event, {"tool_name": tool_names[event.tool_call_id]})


_TOOL_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT)


def _answered_already(index: int, call_id: str, cid: str, result: Event) -> InvalidEventError:
    where = "archived" if result.archived else "in the window"
    return InvalidEventError(
        f"events[{index}] is a second tool_result for tool_call_id {call_id!r} in conversation {cid!r}: "
        f"the call already has its result (seq {result.seq}, {where}); a call takes one result"
    )


__all__ = [
    "checked_tool_events",
    "found_in_window",
    "prepared_batch",
    "sized",
    "tool_call_ids",
    "tool_checked",
    "tool_event_ids",
]
