"""Packed events (chat_memory/backends/packed.py): an event packed and unpacked is the event,
field for field, ``model_fields_set`` and envelope included, whatever it holds; what cannot
be rebuilt exactly is kept whole; a :class:`PackedEvents` archive reads in seq order."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chat_memory import Event, EventType
from chat_memory.backends.bookkeeping import archived_copy, number
from chat_memory.backends.packed import PackedEvent, PackedEvents, pack, unpack

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@st.composite
def events(draw: Any) -> Event:
    fields: dict[str, Any] = {"type": draw(st.sampled_from(list(EventType)))}
    optional = {
        "content": st.text(max_size=20),
        "tool_call_id": st.text(min_size=1, max_size=8),
        "tool_name": st.text(max_size=8),
        "arguments": st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=3),
        "is_error": st.booleans(),
        "created_at": st.datetimes(timezones=st.just(timezone(timedelta(hours=2)))),
        "metadata": st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=3),
        "tokens": st.integers(0, 10**6),
    }
    for name, values in optional.items():
        if draw(st.booleans()):  # unset fields stay out of model_fields_set
            fields[name] = draw(values)
    event = Event(**fields)
    if draw(st.booleans()):
        event = archived_copy(number([event], draw(st.integers(0, 10**9)))[0])
    if draw(st.booleans()):
        event = Event.from_json(event.to_json())
    return event


def same(copy: Event, event: Event) -> None:
    assert type(copy) is Event and copy == event
    assert copy.model_fields_set == event.model_fields_set
    assert copy.to_json() == event.to_json()
    assert copy.model_dump(exclude_unset=True) == event.model_dump(exclude_unset=True)


@given(events())
def test_an_event_packed_and_unpacked_is_the_event(event):
    held = pack(event)
    assert isinstance(held, PackedEvent)
    assert (held.id, held.type, held.seq, held.tool_call_id) == (
        event.id,
        event.type,
        event.seq,
        event.tool_call_id,
    )
    same(unpack(held), event)
    same(unpack(held), unpack(held))


@given(events())
def test_an_event_packed_archived_is_its_archived_copy(event):
    same(unpack(pack(event, archived=True)), archived_copy(event))


def test_an_empty_metadata_is_unpacked_as_a_fresh_dict_each_time():
    held = pack(Event.user("hi"))
    first, second = unpack(held), unpack(held)
    assert first.metadata == {} and first.metadata is not second.metadata
    kept = Event.user("hi", metadata={"k": [1]})
    assert unpack(pack(kept)).metadata is kept.metadata  # shared, as a stored event shares it


class Tagged(Event):
    """An event subclass: packing would lose its class."""


def test_what_cannot_be_rebuilt_exactly_is_kept_whole():
    tagged = Tagged(type=EventType.USER, content="x")
    assert pack(tagged) is tagged and unpack(tagged) is tagged
    odd = Event.model_construct(type=EventType.USER, metadata=None)  # not a dict: as it is
    assert pack(odd) is odd


def test_an_archive_reads_in_seq_order_and_unpacks_what_it_returns():
    stored = number([Event.user(str(k)) for k in range(6)], 0)
    archive = PackedEvents(stored[2:4])
    held = archive.append(stored[0])  # older than the newest held: sorted in
    assert isinstance(held, PackedEvent) and held.seq == 1
    archive.extend([stored[5], stored[1]])
    assert len(archive) == 5 and archive
    assert [e.seq for e in archive] == [1, 2, 3, 4, 6]
    assert archive[-1] == stored[5] and archive[0] == stored[0]
    archive.discard({2, 6})
    assert list(archive) == [stored[0], stored[2], stored[3]]
    assert archive.popleft() == stored[0]
    assert [e.seq for e in archive] == [3, 4]
    archive.discard({3, 4})
    assert not archive and len(archive) == 0


def test_unpacking_is_not_validation_and_keeps_the_time_as_stored():
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    event = Event.assistant("a", created_at=at)
    assert unpack(pack(event)).created_at is event.created_at
