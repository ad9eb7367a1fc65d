"""The SQL store's window cache: the last window read or written of each recent conversation,
kept by :class:`~chat_memory.backends.sql.operations.SQLOperations` so that a turn reads and
parses a conversation's window rows only when they changed.

An entry is valid while the conversation's row still holds the **validator** it was stored
under: the row's id, ``created_at``, ``updated_at`` and ``version``, as the driver returns them
(compared raw: the DateTime processing differs by dialect, and a value the store computes for
a row it wrote is the bind-processed value the driver stored). Every write that changes a
conversation's window rows writes the next version and ``updated_at`` (now) in the same
transaction, and a deleted conversation's row is gone with its id; so a row that still holds
the validator still holds that window, whichever process wrote it. The id alone is not enough
(SQLite gives a deleted row's id to the next row when it was the last one), nor is the version
with it (a conversation erased and created again, or restored from an older dump, counts its
versions anew); ``created_at`` and ``updated_at`` are the moments of the row's creation and of
the write that made that version, and a restore copies them only with the state they belong
to.

Entries are stored only once the transaction that produced them has committed (a write
transaction stages them: see :meth:`WindowCache.staging`), and bounded: least recently used
out beyond :data:`CONVERSATIONS` conversations, :data:`EVENTS` events or :data:`TOKENS` tokens
in all; a window above :data:`WINDOW_EVENTS` events or :data:`WINDOW_TOKENS` tokens is not
kept. Events are frozen, and shared with whoever read them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...events import Event, Window

#: The most conversations whose window is kept.
CONVERSATIONS = 256
#: The most events kept in all (about 1.7 KiB each for a typical event).
EVENTS = 8192
#: The most tokens kept in all (about 4 characters each): 1 Mi tokens, some 4 MiB of text.
TOKENS = 1 << 20
#: A window with more events than this is not kept.
WINDOW_EVENTS = 1024
#: A window with more tokens than this is not kept.
WINDOW_TOKENS = TOKENS // 4

#: A row's validator: its id, ``created_at``, ``updated_at`` and ``version``, as the driver
#: returns them.
Validator = tuple[Any, Any, Any, Any]


@dataclass(frozen=True)
class CachedWindow:
    """A window and the validator of the row that held it."""

    validator: Validator
    window: Window
    events: int
    tokens: int


def _weight(window: Window) -> tuple[int, int]:
    """The events and the tokens of ``window`` (an event without a count: a token per 4
    characters of its content)."""
    events: list[Event] = [*window.pinned, *window.active]
    if window.summary is not None:
        events.append(window.summary)
    tokens = 0
    for event in events:
        counted = event.tokens
        tokens += counted if counted is not None else len(event.content) // 4
    return len(events), tokens


class WindowCache:
    """The last window of each recent conversation, by conversation id, validated by its row
    (see the module docstring). Thread-safe: the sync store runs operations from many
    threads, and :class:`~chat_memory.backends.aio.ThreadedStore` and the async store share
    one :class:`~chat_memory.backends.sql.operations.SQLOperations`."""

    def __init__(
        self,
        *,
        conversations: int = CONVERSATIONS,
        events: int = EVENTS,
        tokens: int = TOKENS,
        window_events: int = WINDOW_EVENTS,
        window_tokens: int = WINDOW_TOKENS,
    ) -> None:
        for name, value in (
            ("conversations", conversations),
            ("events", events),
            ("tokens", tokens),
            ("window_events", window_events),
            ("window_tokens", window_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} ({value!r}) must be a whole number, 0 or more")
        self.conversations = conversations
        self.events = events
        self.tokens = tokens
        self.window_events = min(window_events, events)
        self.window_tokens = min(window_tokens, tokens)
        self._lock = threading.Lock()
        # oldest use first (a dict keeps insertion order; a use moves its entry to the end)
        self._entries: dict[str, CachedWindow] = {}
        self._held_events = 0
        self._held_tokens = 0
        # the staging areas of the write transactions running now, by id of their connection
        self._staging: dict[int, list[tuple[str, Validator, Window]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def held(self) -> tuple[int, int, int]:
        """How many conversations, events and tokens are kept now."""
        with self._lock:
            return len(self._entries), self._held_events, self._held_tokens

    def peek(self, cid: str) -> CachedWindow | None:
        """The entry of ``cid``, whatever its validator (the caller checks it against the row
        it reads), marked as used."""
        with self._lock:
            entry = self._entries.pop(cid, None)
            if entry is not None:
                self._entries[cid] = entry
            return entry

    def get(self, cid: str, validator: Validator) -> Window | None:
        """The window of ``cid`` if it was stored under ``validator``."""
        entry = self.peek(cid)
        return entry.window if entry is not None and entry.validator == validator else None

    def put(self, cid: str, validator: Validator, window: Window) -> None:
        """Keep ``window`` as the window of ``cid`` while its row holds ``validator``; unless
        the entry held is of the same row at a later version (a slower transaction of this
        process publishing after a faster one). A window too large to keep drops the entry."""
        events, tokens = _weight(window)
        with self._lock:
            held = self._entries.get(cid)
            if (
                held is not None
                and held.validator[:2] == validator[:2]
                and held.validator[3] > validator[3]
            ):
                return
            self._drop(cid)
            if events > self.window_events or tokens > self.window_tokens:
                return
            self._entries[cid] = CachedWindow(validator, window, events, tokens)
            self._held_events += events
            self._held_tokens += tokens
            while self._entries and (
                len(self._entries) > self.conversations
                or self._held_events > self.events
                or self._held_tokens > self.tokens
            ):
                self._drop(next(iter(self._entries)))

    def discard(self, cid: str) -> None:
        """Forget the window of ``cid`` (always safe: the next read reads the rows)."""
        with self._lock:
            self._drop(cid)

    def clear(self) -> None:
        """Forget every window."""
        with self._lock:
            self._entries.clear()
            self._held_events = self._held_tokens = 0

    def _drop(self, cid: str) -> None:
        entry = self._entries.pop(cid, None)
        if entry is not None:
            self._held_events -= entry.events
            self._held_tokens -= entry.tokens

    # -- write transactions ------------------------------------------------------------------

    @contextmanager
    def staging(self, connection: object) -> Iterator[list[tuple[str, Validator, Window]]]:
        """Around the body of a write transaction on ``connection``: what the body stages
        (:meth:`remember`) collects in the list yielded, for :meth:`publish` once the
        transaction has committed (and never if it does not: a window a rolled-back write
        produced must not be taken for the one another writer commits at that version)."""
        staged: list[tuple[str, Validator, Window]] = []
        key = id(connection)
        self._staging[key] = staged
        try:
            yield staged
        finally:
            del self._staging[key]

    def remember(self, connection: object, cid: str, validator: Validator, window: Window) -> None:
        """Keep ``window`` as read or written on ``connection``: staged when a write
        transaction runs there (see :meth:`staging`), stored at once otherwise (a read
        transaction sees only what was committed)."""
        staged = self._staging.get(id(connection))
        if staged is None:
            self.put(cid, validator, window)
        else:
            staged.append((cid, validator, window))

    def publish(self, staged: list[tuple[str, Validator, Window]]) -> None:
        """Store what a committed write transaction staged, in the order it was staged."""
        for cid, validator, window in staged:
            self.put(cid, validator, window)


__all__ = ["CachedWindow", "Validator", "WindowCache"]
