"""Pinned system events and which of them are current: a newer system event with the same
pin key supersedes an older one, which every store archives (never deletes).

The key is ``metadata["key"]`` when given, else :data:`DEFAULT_PIN_KEY`: all plain system
events share it, so a new system prompt replaces the old one; give distinct keys to keep
several instructions pinned side by side (``Event.system("Reply in French", metadata={"key": "language"})``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import InvalidEventError
from .events import Event, EventType

DEFAULT_PIN_KEY = "system"


def pin_key(event: Event) -> str:
    """The key under which a system event is pinned (the Redis script applies the same rule)."""
    key = event.metadata.get("key")
    return key if isinstance(key, str) and key else DEFAULT_PIN_KEY


def check_pin_key(index: int, event: Event) -> None:
    """Refuse a system event whose ``metadata["key"]`` is given but is not a non-empty string."""
    if event.type is not EventType.SYSTEM or event.metadata.get("key") is None:
        return
    key = event.metadata["key"]
    if not isinstance(key, str) or not key:
        raise InvalidEventError(
            f"events[{index}].metadata['key'] ({key!r}) must be a non-empty string (the pin key)"
        )


def superseded(pinned: Iterable[Event]) -> list[Event]:
    """The pinned events (oldest first) that a newer one with the same key supersedes."""
    ordered = sorted(pinned, key=lambda e: e.seq or 0)
    newest = {pin_key(e): e for e in ordered}
    kept = {id(e) for e in newest.values()}
    return [e for e in ordered if id(e) not in kept]


def current(pinned: Sequence[Event]) -> list[Event]:
    """The pinned events no newer one supersedes, in their order."""
    gone = {id(e) for e in superseded(pinned)}
    return [e for e in pinned if id(e) not in gone]
