"""Events, the unit of the log, and turns, the unit of compaction."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from enum import Enum
from functools import _CacheInfo, lru_cache
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class EventType(str, Enum):
    """What an event is. ``user``, ``assistant``, ``tool_call`` and ``tool_result`` are real
    events; ``system`` events are pinned; ``summary`` events are written by compaction."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    SYSTEM = "system"
    SUMMARY = "summary"


REAL_TYPES = frozenset(
    {EventType.USER, EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT}
)


def _new_id() -> str:
    """``uuid.uuid4().hex``, the same random version-4 UUID, without building a ``UUID``
    (half the cost: every event an agent adds gets one)."""
    n = int.from_bytes(os.urandom(16), "big")
    return "%032x" % ((n & _UUID4_CLEAR) | _UUID4_SET)


# uuid.UUID(version=4): the variant bits (10) and the version nibble (4)
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


_UTC = timezone.utc


def _as_utc(value: datetime) -> datetime:
    """``created_at`` in UTC: a naive time is taken as UTC, an aware one converted (its
    ``tzinfo`` becomes :data:`datetime.timezone.utc` itself, whatever pydantic parsed)."""
    zone = value.tzinfo
    if zone is _UTC:
        return value
    if zone is None:
        return value.replace(tzinfo=_UTC)
    try:
        return value.astimezone(_UTC)
    except OverflowError:
        raise ValueError(f"created_at ({value.isoformat()}) is out of range in UTC") from None


# A plain function validator (not a classmethod ``field_validator``): pydantic-core calls it
# without binding a class, and a time already in ``timezone.utc`` returns at once.
_UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class Event(BaseModel):
    """One stored item of a conversation.

    Build events with the constructors (:meth:`user`, :meth:`assistant`, :meth:`tool_call`,
    :meth:`tool_result`, :meth:`system`). ``seq``, ``archived``, ``retracted`` and ``tokens``
    are set by the store when the event is appended (an event added with ``archived`` or
    ``retracted`` set is stored as neither); ``retracted`` marks an event taken back by
    ``memory.retract``/``memory.rewind``, seen only in ``history(include_retracted=True)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    id: str = Field(default_factory=_new_id)
    type: EventType
    content: str = ""
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    is_error: bool = False
    created_at: _UtcDatetime = Field(default_factory=_utcnow)
    metadata: dict[str, Any] = Field(default_factory=dict)
    seq: int | None = None
    archived: bool = False
    retracted: bool = False
    tokens: int | None = None

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def user(cls, text: str, **fields: Any) -> Event:
        """A message from the user."""
        return cls(type=EventType.USER, content=text, **fields)

    @classmethod
    def assistant(cls, text: str, **fields: Any) -> Event:
        """A text reply from the assistant."""
        return cls(type=EventType.ASSISTANT, content=text, **fields)

    @classmethod
    def system(cls, text: str, **fields: Any) -> Event:
        """A pinned system instruction: always in the window, never archived."""
        return cls(type=EventType.SYSTEM, content=text, **fields)

    @classmethod
    def summary(cls, text: str, **fields: Any) -> Event:
        """A summary of archived events (written by compaction)."""
        return cls(type=EventType.SUMMARY, content=text, **fields)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: dict[str, Any] | None = None,
        call_id: str | None = None,
        **fields: Any,
    ) -> Event:
        """The assistant asking for tool ``name`` with ``arguments``; ``call_id`` pairs it with
        its result (one is generated when not given)."""
        return cls(
            type=EventType.TOOL_CALL,
            tool_name=name,
            arguments=dict(arguments or {}),
            tool_call_id=call_id or f"call_{_new_id()[:24]}",
            **fields,
        )

    @classmethod
    def tool_result(
        cls,
        call_id: str,
        content: str,
        name: str | None = None,
        is_error: bool = False,
        **fields: Any,
    ) -> Event:
        """What the tool returned for the call ``call_id``."""
        return cls(
            type=EventType.TOOL_RESULT,
            tool_call_id=call_id,
            content=content,
            tool_name=name,
            is_error=is_error,
            **fields,
        )

    # -- derived ------------------------------------------------------------------------

    @property
    def is_real(self) -> bool:
        """True for user, assistant, tool call and tool result events."""
        return self.type in REAL_TYPES

    def text(self) -> str:
        """The event as plain text: what is searched and what tokens are counted over."""
        if self.type is EventType.TOOL_CALL:
            args = json.dumps(self.arguments or {}, ensure_ascii=False, sort_keys=True)
            return f"{self.tool_name} {args}"
        return self.content

    def stored(self, *, seq: int, tokens: int, archived: bool = False) -> Event:
        """A copy with the fields the store assigns."""
        return self.model_copy(
            update={"seq": seq, "tokens": tokens, "archived": archived, "retracted": False}
        )

    def to_json(self) -> str:
        """The envelope every backend stores."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Event:
        """Read an envelope written by :meth:`to_json`.

        A small envelope (see :data:`PARSE_CACHE_MAX_LENGTH`) read a second time is cached:
        the last :data:`PARSE_CACHE_ENTRIES` of them map to their events, so a window read
        again returns the same frozen events, ``metadata`` and ``arguments`` dicts included
        (treat events as read-only). An envelope seen once (a new event's round trip, a
        history read through) is parsed without evicting the window's. What is refused is
        refused every time, with the same error."""
        if (
            cls is Event
            and (type(data) is str or type(data) is bytes)  # not bytearray…: unhashable
            and len(data) <= PARSE_CACHE_MAX_LENGTH
        ):
            key = hash(data)  # str and bytes keep it: the cache's lookup does not hash again
            if key in _SEEN:
                try:
                    return _parse_cached(data)
                except _Uncached as uncached:
                    return uncached.event
            if len(_SEEN) >= _SEEN_LIMIT:
                _SEEN.clear()
            _SEEN.add(key)
        return cls.model_validate_json(data)


PARSE_CACHE_ENTRIES = 1024
"""How many envelopes :meth:`Event.from_json` keeps parsed (least recently used go first)."""

PARSE_CACHE_MAX_LENGTH = 2048
"""The longest envelope (``len`` of the ``str`` or ``bytes``) :meth:`Event.from_json`
caches. An event with ``metadata`` or ``arguments`` is kept only if its envelope holds at
most :data:`PARSE_CACHE_MAX_CONTAINERS` ``{`` and ``[`` and :data:`PARSE_CACHE_MAX_ITEMS`
commas, so that its dicts, lists and values (which cost many times their text) stay few.
One entry then holds at most about 16 KiB (for 2,048 four-byte characters: the text, the
UTF-8 copy parsing leaves on it, and the event's content), the whole cache 16 MiB; a
typical 300-character envelope costs about 1.7 KiB (tests/engine/test_event_costs.py
measures both)."""

PARSE_CACHE_MAX_CONTAINERS = 32
"""The most ``{`` and ``[`` in an envelope :meth:`Event.from_json` caches."""

PARSE_CACHE_MAX_ITEMS = 128
"""The most commas in an envelope :meth:`Event.from_json` caches (an envelope has 12)."""

_SEEN: set[int] = set()
"""The hashes of envelopes :meth:`Event.from_json` has parsed once (a collision only
caches an envelope on its first sighting); emptied when it reaches ``_SEEN_LIMIT``."""

_SEEN_LIMIT = 2 * PARSE_CACHE_ENTRIES


class _Uncached(Exception):
    """Raised by :func:`_parse_cached` with an event it must not keep (``functools``
    caches no call that raises)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


@lru_cache(maxsize=PARSE_CACHE_ENTRIES)
def _parse_cached(data: str | bytes) -> Event:
    event = Event.model_validate_json(data)
    if event.metadata or event.arguments:  # counted only here: most events hold neither
        if isinstance(data, str):
            containers, items = data.count("{") + data.count("["), data.count(",")
        else:
            containers, items = data.count(b"{") + data.count(b"["), data.count(b",")
        if containers > PARSE_CACHE_MAX_CONTAINERS or items > PARSE_CACHE_MAX_ITEMS:
            raise _Uncached(event)
    return event


def parse_cache_info() -> _CacheInfo:
    """Hits, misses and size of :meth:`Event.from_json`'s cache (``functools`` cache info)."""
    return _parse_cached.cache_info()


def clear_parse_cache() -> None:
    """Forget every envelope :meth:`Event.from_json` has cached or seen."""
    _parse_cached.cache_clear()
    _SEEN.clear()


def split_turns(events: Sequence[Event]) -> list[list[Event]]:
    """Group real events into turns: each ``user`` event starts one; real events before the
    first ``user`` event form one leading turn."""
    turns: list[list[Event]] = []
    user = EventType.USER  # a local: an enum member is slow to look up on its class
    for event in events:
        if event.type is user or not turns:
            turns.append([event])
        else:
            turns[-1].append(event)
    return turns


def turn_starts(events: Sequence[Event]) -> list[int]:
    """Indexes in ``events`` where a turn starts (always includes 0 when not empty)."""
    user = EventType.USER  # a local: an enum member is slow to look up on its class
    return [i for i, e in enumerate(events) if i == 0 or e.type is user]


class Window(BaseModel):
    """What the model sees, split in its parts: pinned system events, the current summary,
    and the active real events, each list oldest first."""

    model_config = ConfigDict(frozen=True)

    pinned: tuple[Event, ...] = ()
    summary: Event | None = None
    active: tuple[Event, ...] = ()

    def events(self) -> list[Event]:
        """Pinned events, then the summary (if any), then the active events."""
        head = list(self.pinned)
        if self.summary is not None:
            head.append(self.summary)
        return head + list(self.active)

    def tokens(self) -> int:
        """Estimated tokens of the whole window (token counts are stored with each event)."""
        return sum(e.tokens or 0 for e in self.events())

    def turn_count(self) -> int:
        """How many turns the active events form."""
        return len(turn_starts(self.active))


_WINDOW_FIELDS_SET = frozenset(Window.model_fields)


def window_of(
    pinned: tuple[Event, ...], summary: Event | None, active: tuple[Event, ...]
) -> Window:
    """``Window(pinned=pinned, summary=summary, active=active)`` for a store that holds its
    parts as events already: equal to it, its fields set the same, without validating each
    event again (a store builds one for every read and write)."""
    window = _new_model(Window)
    _set_attribute(window, "__dict__", {"pinned": pinned, "summary": summary, "active": active})
    _set_attribute(window, "__pydantic_extra__", None)
    _set_attribute(window, "__pydantic_fields_set__", set(_WINDOW_FIELDS_SET))
    _set_attribute(window, "__pydantic_private__", None)
    return window


_new_model = object.__new__
_set_attribute = object.__setattr__
