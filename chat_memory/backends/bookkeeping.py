"""The event bookkeeping every store does alike: which events an append stores
(:func:`unstored`, the idempotency rule), pinned system events apart from real ones
(:func:`split_appended`), numbering (:func:`number`), archived copies, finding tool events
(:func:`tool_events`), and how an envelope's text spells an id or a ``tool_call_id`` (for
stores that keep envelopes as text).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..events import Event, EventType


def tool_events(events: Iterable[Event], tool_call_ids: Collection[str]) -> list[Event]:
    """The tool calls and results among ``events`` whose ``tool_call_id`` is one of ``tool_call_ids``."""
    wanted = set(tool_call_ids)
    return [e for e in events if e.type in _TOOL_TYPES and e.tool_call_id in wanted]


def split_appended(events: Iterable[Event]) -> tuple[list[Event], list[Event]]:
    """Split events to append into (pinned system events, real events)."""
    pinned: list[Event] = []
    real: list[Event] = []
    system = EventType.SYSTEM  # a local: an enum member is slow to look up on its class
    for event in events:
        (pinned if event.type is system else real).append(event)
    return pinned, real


def unstored(events: Iterable[Event], window_events: Iterable[Event]) -> list[Event]:
    """The events an append stores: those whose ``id`` is neither among ``window_events``
    (the conversation's pinned and active events) nor earlier in ``events``, in order.

    This is what makes a retried ``add()`` safe: every store calls it inside its atomic
    write, so two concurrent retries of one event cannot both store it."""
    seen = {e.id for e in window_events}
    fresh: list[Event] = []
    for event in events:
        if event.id not in seen:
            seen.add(event.id)
            fresh.append(event)
    return fresh


def envelope_id_prefix(envelope: str) -> str:
    """The start of an envelope (:meth:`Event.to_json`) that spells its ``id``: ``{"id":"…"``.
    The id is the first field, and no JSON string holds an unescaped ``,"type":``, so the
    first one ends the id. Stores that keep envelopes as text compare ids by this."""
    return envelope[: envelope.index(',"type":')]


def tool_call_fragment(tool_call_id: str) -> str:
    """How an envelope spells ``"tool_call_id":<id>`` (the same JSON string encoding), for
    stores that look tool events up in stored envelope text."""
    probe = Event.tool_result(tool_call_id, "").to_json()
    start = probe.index('"tool_call_id":')
    return probe[start : probe.index(',"tool_name":', start)]


def number(events: Sequence[Event], after_seq: int) -> list[Event]:
    """Copies of ``events`` with consecutive seq values starting after ``after_seq``."""
    return [
        replaced(e, {"seq": after_seq + i, "archived": False, "retracted": False})
        for i, e in enumerate(events, start=1)
    ]


def archived_copy(event: Event) -> Event:
    """The copy of an event the archive keeps (the event itself when archived already)."""
    return replaced(event, {"archived": True})


def replaced(event: Event, changes: dict[str, Any]) -> Event:
    """``event.model_copy(update=changes)``, for the store-assigned fields, made cheaper:
    ``event`` itself when every change is a value it holds already (and a field it set), else
    a shallow copy that shares its ``model_fields_set`` with every copy setting the same
    fields (a frozen event never changes that set; ``model_copy`` copies it before adding to
    it). Like ``model_copy``, the changes are not validated."""
    fields = event.__dict__
    owned = event.__pydantic_fields_set__
    for name, value in changes.items():
        held = fields[name]
        if held != value or type(held) is not type(value) or name not in owned:
            break
    else:
        return event
    if (
        type(event) is not Event
        or event.__pydantic_extra__ is not None
        or event.__pydantic_private__ is not None
    ):
        return event.model_copy(update=changes)
    copied = _new_event(Event)
    _set(copied, "__dict__", {**fields, **changes})
    _set(copied, "__pydantic_extra__", None)
    _set(copied, "__pydantic_fields_set__", _shared_fields_set(owned, changes))
    _set(copied, "__pydantic_private__", None)
    return copied


def with_every_field_set(event: Event, changes: dict[str, Any]) -> Event:
    """A copy of ``event`` (an Event itself, without extra or private attributes) with
    ``changes``, whose ``model_fields_set`` names every field, as that of an event parsed
    from its envelope does (a shared set, as :func:`replaced` gives)."""
    copied = _new_event(Event)
    _set(copied, "__dict__", {**event.__dict__, **changes})
    _set(copied, "__pydantic_extra__", None)
    _set(copied, "__pydantic_fields_set__", _ALL_FIELDS)
    _set(copied, "__pydantic_private__", None)
    return copied


def replaced_in_place(event: Event, changes: dict[str, Any]) -> Event:
    """:func:`replaced` made on ``event`` itself, for an event nothing else holds yet (one an
    ``add()`` has just parsed or copied): the same fields and field set, no copy. An event
    :func:`replaced` would not copy cheaply is copied as it would."""
    if (
        type(event) is not Event
        or event.__pydantic_extra__ is not None
        or event.__pydantic_private__ is not None
    ):
        return replaced(event, changes)
    event.__dict__.update(changes)
    # a shared set, never the event's own set changed: it may be one shared already
    _set(
        event, "__pydantic_fields_set__", _shared_fields_set(event.__pydantic_fields_set__, changes)
    )
    return event


def _shared_fields_set(owned: set[str], changes: dict[str, Any]) -> set[str]:
    """The shared set of the names in ``owned`` and ``changes`` (both Event field names)."""
    if len(owned) == _FIELD_COUNT:
        return _ALL_FIELDS  # every field named already (as a parsed envelope names them)
    if _SHARED_BY_ID.get(id(owned)) is owned and owned.issuperset(changes):
        return owned  # a shared set already, and the changes add no name to it
    return _shared(frozenset(owned.union(changes)))


def _shared(key: frozenset[str]) -> set[str]:
    shared = _FIELDS_SETS.get(key)
    if shared is None:
        # at most one set per combination of Event's 13 field names; kept for good, so
        # that the ids in _SHARED_BY_ID are never reused
        shared = _FIELDS_SETS.setdefault(key, set(key))
        _SHARED_BY_ID[id(shared)] = shared
    return shared


_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
_SHARED_BY_ID: dict[int, set[str]] = {}
_FIELD_COUNT = len(Event.model_fields)
_ALL_FIELDS = _shared(frozenset(Event.model_fields))
_new_event = object.__new__
_set = object.__setattr__


def retraction_targets(events: Iterable[Event], event_ids: Collection[str]) -> list[Event]:
    """What a retraction of ``event_ids`` takes back among ``events`` (the conversation's
    stored, not retracted events, or at least those with one of the ids and the tool events
    of their call ids): the real events with one of the ids, plus every tool call and result
    sharing a ``tool_call_id`` with one of them (a pair goes whole), oldest first. An id
    naming a pinned system event or a summary raises :class:`InvalidInputError`, before
    anything is written."""
    wanted = set(event_ids)
    pool = list(events)
    chosen: dict[int, Event] = {}
    for event in pool:
        if event.id not in wanted:
            continue
        if not event.is_real:
            raise InvalidInputError(
                f"event_ids: {event.id!r} names a {event.type.value} event (seq {event.seq}); "
                "pinned system events and summaries cannot be retracted"
            )
        chosen[event.seq or 0] = event
    call_ids = {e.tool_call_id for e in chosen.values() if e.type in _TOOL_TYPES and e.tool_call_id}
    for event in tool_events(pool, call_ids):
        chosen.setdefault(event.seq or 0, event)
    return sorted(chosen.values(), key=lambda e: e.seq or 0)


def retracted_copy(event: Event) -> Event:
    """The copy of an event a retraction keeps (and returns): out of the window and archive."""
    return replaced(event, {"archived": False, "retracted": True})


_TOOL_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT)
