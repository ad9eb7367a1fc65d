"""An event as every store keeps it: its JSON envelope (:meth:`Event.to_json`) read back.

Every event an ``add()`` stores goes through :func:`as_stored_everywhere`, so that what JSON
changes (a tuple becomes a list, NaN becomes null, a ``str`` subclass a ``str``) is changed
alike on every store, the in-memory one included, and what JSON cannot carry is refused alike.
Most events hold nothing JSON would change: those are copied, not dumped and parsed
(:func:`read_back_alike`, checked against the round trip by tests/engine/test_read_back.py).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from .backends.bookkeeping import with_every_field_set
from .errors import InvalidEventError
from .events import Event, EventType


def as_stored_everywhere(index: int, event: Event) -> Event:
    """``event`` (``events[index]`` of an add) as every backend keeps it: its JSON envelope
    read back. What JSON cannot carry (a lone surrogate, a tool argument that is no JSON
    value) is an :class:`InvalidEventError`, alike on every backend, instead of failing in
    one driver and being kept as is by the in-memory store. The event returned is new, never
    the caller's nor one a read shares (``Event.from_json``'s cache is not used)."""
    copied = read_back_alike(event)
    if copied is not None:
        return copied
    try:
        return Event.model_validate_json(event.to_json())
    except ValueError as exc:
        raise InvalidEventError(f"events[{index}] cannot be stored as JSON: {exc}") from None


def read_back_alike(event: Event) -> Event | None:
    """What ``Event.model_validate_json(event.to_json())`` returns, made without the JSON
    (an equal copy naming every field in its field set, with dicts of its own), for an event
    whose every value JSON carries unchanged: an Event itself; strings of type ``str``
    exactly that UTF-8 can encode; an empty ``metadata``; no ``arguments``, or a flat dict
    of them (string keys; strings, exact ints, bools, finite floats or None); a
    ``created_at`` of type ``datetime`` in ``timezone.utc`` itself, fold 0; exact bools and
    ints. None for any other event: it takes the round trip."""
    if not reads_back_alike(event):
        return None
    fresh: dict[str, Any] = {"metadata": {}}
    arguments = event.arguments
    if arguments is not None:
        fresh["arguments"] = dict(arguments)
    return with_every_field_set(event, fresh)


def reads_back_alike(event: Event) -> bool:
    """Whether ``Event.model_validate_json(event.to_json())`` equals ``event`` value for value
    and type for type (see :func:`read_back_alike` for what that takes): a store may then keep
    ``event`` itself as what a read of its envelope would return."""
    if (
        type(event) is not Event
        or event.__pydantic_extra__ is not None
        or event.__pydantic_private__ is not None
    ):
        return False
    fields = event.__dict__
    arguments = fields["arguments"]
    created = fields["created_at"]
    seq = fields["seq"]
    tokens = fields["tokens"]
    if (
        len(fields) != _FIELD_COUNT
        or type(fields["type"]) is not EventType
        or not _plain_text(fields["id"])
        or not _plain_text(fields["content"])
        or (fields["tool_call_id"] is not None and not _plain_text(fields["tool_call_id"]))
        or (fields["tool_name"] is not None and not _plain_text(fields["tool_name"]))
        or (arguments is not None and not _flat_json(arguments))
        or type(fields["metadata"]) is not dict
        or fields["metadata"]
        or type(fields["is_error"]) is not bool
        or type(fields["archived"]) is not bool
        or type(fields["retracted"]) is not bool
        or (seq is not None and type(seq) is not int)
        or (tokens is not None and type(tokens) is not int)
        or type(created) is not datetime
        or created.tzinfo is not timezone.utc
        or created.fold
    ):
        return False
    return True


def _plain_text(value: object) -> bool:
    """A ``str`` itself that UTF-8 can encode (no lone surrogate)."""
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _flat_json(arguments: object) -> bool:
    """A ``dict`` itself of plain-text keys and values JSON gives back as they are."""
    if type(arguments) is not dict:
        return False
    for key, value in arguments.items():
        kind = type(value)
        if not _plain_text(key):
            return False
        if kind is str:
            if not _plain_text(value):
                return False
        elif kind is float:
            if not math.isfinite(value):  # inf and NaN are written as null
                return False
        elif value is not None and kind is not int and kind is not bool:
            return False
    return True


_FIELD_COUNT = len(Event.model_fields)

__all__ = ["as_stored_everywhere", "read_back_alike", "reads_back_alike"]
