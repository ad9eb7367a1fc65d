"""Archived events held compactly, for stores that keep events as Python objects (memory://).

An :class:`~chat_memory.events.Event` costs its field values plus a 13-key ``__dict__``
(464 bytes) and the object (80 bytes): more than half of what an event of a long conversation
holds. The archive (most of a long conversation, read only by ``history``, search and finds)
keeps each event as a :class:`PackedEvent` instead: one tuple of the same field values (its
strings, time and dicts shared, an empty ``metadata`` left out), about 160 bytes. A read
unpacks it into an event equal to the one packed, field set included, without parsing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator
from operator import itemgetter
from typing import Any, TypeAlias

from ..events import Event, EventType
from .bookkeeping import archived_copy

_FIELDS: tuple[str, ...] = tuple(Event.model_fields)
_values = itemgetter(*_FIELDS)
_ID = _FIELDS.index("id")
_TYPE = _FIELDS.index("type")
_TOOL_CALL_ID = _FIELDS.index("tool_call_id")
_METADATA = _FIELDS.index("metadata")
_ARCHIVED = _FIELDS.index("archived")
_SEQ = _FIELDS.index("seq")
_FIELDS_SET = len(_FIELDS)  # the event's model_fields_set, after its values

_new_event = object.__new__
_set = object.__setattr__


class PackedEvent(tuple[Any, ...]):
    """An event's field values in :class:`Event`'s field order, then its fields set. The
    fields a store indexes and orders by are properties, as on an event, so that code keeping
    or sorting stored items needs no unpacking; :meth:`event` rebuilds the event."""

    __slots__ = ()

    @property
    def id(self) -> str:
        """The event's ``id``."""
        value: str = self[_ID]
        return value

    @property
    def type(self) -> EventType:
        """The event's ``type``."""
        value: EventType = self[_TYPE]
        return value

    @property
    def tool_call_id(self) -> str | None:
        """The event's ``tool_call_id``."""
        value: str | None = self[_TOOL_CALL_ID]
        return value

    @property
    def seq(self) -> int | None:
        """The event's ``seq``."""
        value: int | None = self[_SEQ]
        return value

    def event(self) -> Event:
        """The event packed: equal to it, sharing its values (a fresh ``{}`` for an empty
        ``metadata``), its ``model_fields_set`` the same."""
        fields = dict(zip(_FIELDS, self))
        if fields["metadata"] is None:
            fields["metadata"] = {}
        event = _new_event(Event)
        _set(event, "__dict__", fields)
        _set(event, "__pydantic_extra__", None)
        _set(event, "__pydantic_fields_set__", self[_FIELDS_SET])
        _set(event, "__pydantic_private__", None)
        return event


Held: TypeAlias = "Event | PackedEvent"
"""What a store holding packed events keeps: a :class:`PackedEvent`, or an event that
:func:`pack` keeps whole."""


def pack(event: Event, *, archived: bool = False) -> Held:
    """``event`` as a :class:`PackedEvent`; an event it could not rebuild exactly (a subclass,
    private attributes, a ``metadata`` that is not a dict) is returned as is. ``archived``:
    pack its archived copy (:func:`~chat_memory.backends.bookkeeping.archived_copy`),
    without making the copy where its field set names ``archived`` already."""
    if archived and "archived" not in event.__pydantic_fields_set__:
        event = archived_copy(event)
    fields = event.__dict__
    metadata = fields.get("metadata")
    if (
        type(event) is not Event
        or event.__pydantic_extra__ is not None
        or event.__pydantic_private__ is not None
        or len(fields) != _FIELDS_SET
        or type(metadata) is not dict
    ):
        return event
    values = list(_values(fields))
    if archived:
        values[_ARCHIVED] = True
    if not metadata:
        values[_METADATA] = None  # unpacked as a fresh {}: 64 bytes an event not held
    values.append(event.__pydantic_fields_set__)
    return PackedEvent(values)


def unpack(held: Held) -> Event:
    """The event ``held`` stands for (see :func:`pack`)."""
    return held.event() if isinstance(held, PackedEvent) else held


def _seq_of(held: Held) -> int:
    return held.seq or 0


class PackedEvents:
    """Events in seq order, held packed (:func:`pack`): a deque of events to its readers,
    which get each one unpacked (iteration, :meth:`popleft`, indexing). :meth:`append`
    returns what it holds, so that an index can share it rather than keep a second copy."""

    __slots__ = ("_held", "_ordered")

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._held: deque[Held] = deque()
        self._ordered = True
        for event in events:
            self.append(event)

    def __len__(self) -> int:
        return len(self._held)

    def __bool__(self) -> bool:
        return bool(self._held)

    def __iter__(self) -> Iterator[Event]:
        self._order()
        return map(unpack, self._held)

    def __getitem__(self, index: int) -> Event:
        self._order()
        return unpack(self._held[index])

    def append(self, event: Event, *, archived: bool = False) -> Held:
        """Hold ``event`` (its archived copy, with ``archived``: see :func:`pack`), in seq
        order (an older one than the newest held is sorted in before the next read);
        returns what is held."""
        held = pack(event, archived=archived)
        if self._held and (self._held[-1].seq or 0) > (held.seq or 0):
            self._ordered = False
        self._held.append(held)
        return held

    def extend(self, events: Iterable[Event]) -> None:
        """:meth:`append` each of ``events``."""
        for event in events:
            self.append(event)

    def popleft(self) -> Event:
        """Take out the oldest event."""
        self._order()
        return unpack(self._held.popleft())

    def take_oldest(self, count: int) -> list[Held]:
        """Take out the ``count`` oldest events (all of them at most; none for 0 or less), as
        held, not unpacked: for bookkeeping that reads only their ``id``, ``type``,
        ``tool_call_id`` or ``seq`` (the archive cap's)."""
        if count <= 0:
            return []
        self._order()
        popleft = self._held.popleft
        return [popleft() for _ in range(min(count, len(self._held)))]

    def discard(self, seqs: Collection[int | None]) -> None:
        """Take out the events with one of ``seqs``, unpacking none."""
        self._held = deque(h for h in self._held if h.seq not in seqs)

    def _order(self) -> None:
        if not self._ordered:
            # stable, like the sorts it replaces: two items never share a seq anyway
            self._held = deque(sorted(self._held, key=_seq_of))
            self._ordered = True
