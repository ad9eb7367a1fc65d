"""The event bookkeeping every store does alike: which events an append stores
(:func:`unstored`, the idempotency rule), pinned system events apart from real ones
(:func:`split_appended`), numbering (:func:`number`), archived copies, finding tool events
(:func:`tool_events`), and how an envelope's text spells an id or a ``tool_call_id`` (for
stores that keep envelopes as text).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from ..events import Event, EventType

def tool_events(events: Iterable[Event], tool_call_ids: Collection[str]) -> list[Event]:
    """The tool calls and results among ``events`` whose ``tool_call_id`` is one of ``tool_call_ids``."""
    wanted = set(tool_call_ids)
    return [e for e in events if e.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT) and e.tool_call_id in wanted]


def split_appended(events: Iterable[Event]) -> tuple[list[Event], list[Event]]:
    """Split events to append into (pinned system events, real events)."""
    pinned, real = [], []
    for event in events:
        (pinned if event.type is EventType.SYSTEM else real).append(event)
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
        e.model_copy(update={"seq": after_seq + i, "archived": False})
        for i, e in enumerate(events, start=1)
    ]


def archived_copy(event: Event) -> Event:
    return event.model_copy(update={"archived": True})
