"""The store protocol every backend implements, and the pieces they share.

A store keeps, per conversation: a version (bumped by every write), the last assigned
``seq``, pinned system events, the current summary, active real events, and the archive.
Stores apply compaction plans; they never make them (that is the engine's job).
"""

from __future__ import annotations

import functools
import inspect
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl

from ..errors import ChatMemoryError, ConcurrencyError, ConfigurationError, InvalidInputError, StorageError
from ..events import Event, EventType, Window
from ..search import SearchQuery, SearchResult

MAX_CONVERSATION_ID_LENGTH = 1024


def check_conversation_id(conversation_id: Any) -> str:
    """Return the id if usable, else raise :class:`InvalidInputError` naming it. Any
    non-empty string without NUL characters (and encodable as UTF-8) is allowed."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidInputError(f"conversation_id ({conversation_id!r}) must be a non-empty string")
    if len(conversation_id) > MAX_CONVERSATION_ID_LENGTH:
        raise InvalidInputError(
            f"conversation_id ({conversation_id[:40]!r}…) is {len(conversation_id)} characters; "
            f"at most {MAX_CONVERSATION_ID_LENGTH} are allowed"
        )
    if "\x00" in conversation_id:
        raise InvalidInputError(f"conversation_id ({conversation_id!r}) must not contain NUL characters")
    try:
        conversation_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"conversation_id ({conversation_id!r}) is not valid Unicode text") from None
    return conversation_id


@dataclass(frozen=True)
class Snapshot:
    """A consistent read of one conversation's window plus the bookkeeping needed to plan
    and apply compaction. Reading it never touches the archive."""

    conversation_id: str
    version: int
    last_seq: int
    window: Window
    archived_count: int
    compaction_error: str | None = None

    @classmethod
    def empty(cls, conversation_id: str) -> Snapshot:
        return cls(conversation_id, version=0, last_seq=0, window=Window(), archived_count=0)

    def appended(self, count: int) -> list[Event]:
        """The last ``count`` events by seq (what an append just stored), oldest first."""
        first = self.last_seq - count + 1
        found = [e for e in (*self.window.pinned, *self.window.active) if e.seq is not None and e.seq >= first]
        return sorted(found, key=lambda e: e.seq or 0)


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction changes, to be applied only if the conversation is still at
    ``expected_version`` (compare-and-swap).

    Every active real event with ``seq <= archive_through_seq`` moves to the archive. When
    ``summary`` is given, it is stored as the new current summary (the store assigns its
    seq) and the previous summary is archived. Afterwards the archive is trimmed to
    ``max_archived_events`` (None: the store's default), oldest first. ``record`` (a JSON
    object describing the compaction) is kept in the same atomic write among the
    conversation's newest records (:attr:`Store.compaction_records_kept`; see :meth:`Store.compactions`).
    """

    expected_version: int
    archive_through_seq: int
    summary: Event | None = None
    max_archived_events: int | None = None
    record: dict[str, Any] | None = None


#: How many compaction records a store keeps per conversation (the newest), by default.
COMPACTION_RECORDS_KEPT = 50


# -- what a store declares -------------------------------------------------------------------

_NONE_WORDS = ("", "none")
_TRUE_WORDS, _FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class StoreOption:
    """A setting a store reads from its URL's query string (``?max_archived_events=500``) or
    from a keyword of :func:`~chat_memory.open_store`. Every store parses its options with
    :meth:`Store.url_settings`, so ``500``, ``none`` and ``true`` mean the same everywhere."""

    name: str
    kind: type = str
    #: the smallest number allowed (``int`` options)
    minimum: int | None = None
    #: whether an empty value or ``none`` means None (no limit)
    nullable: bool = False

    def parse(self, value: Any, store: str) -> Any:
        """The value as the store takes it; a bad one is a :class:`ConfigurationError`
        naming the store, the option and the value."""
        where = f"{store} option {self.name}"
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
            if self.nullable:
                return None
            if self.kind is not str:
                raise ConfigurationError(f"{where} ({value!r}) must be given")
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word not in (*_TRUE_WORDS, *_FALSE_WORDS):
                raise ConfigurationError(f"{where} ({value!r}) must be true or false")
            return word in _TRUE_WORDS
        if self.kind is int:
            if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
                raise ConfigurationError(f"{where} ({value!r}) must be a whole number")
            try:
                number = int(value.strip() if isinstance(value, str) else value)
            except (TypeError, ValueError):
                raise ConfigurationError(f"{where} ({value!r}) must be a whole number") from None
            if self.minimum is not None and number < self.minimum:
                raise ConfigurationError(f"{where} ({value!r}) must be a whole number, {self.minimum} or more")
            return number
        if self.kind is str and not isinstance(value, str):
            raise ConfigurationError(f"{where} ({value!r}) must be text")
        return value


@dataclass(frozen=True)
class ConnectionField:
    """A connection setting the store's canvas node shows (plain data: the node definitions in
    :mod:`chat_memory.components` turn it into a JSON Schema property)."""

    name: str
    label: str
    description: str
    kind: str = "string"
    default: Any = None
    required: bool = False
    nullable: bool = False
    minimum: int | None = None
    min_length: int | None = None
    placeholder: str | None = None
    advanced: bool = False


@dataclass(frozen=True)
class StoreNode:
    """The Chat Memory canvas node of a store: its name, title, storage kind and connection
    fields. ``order`` places it among the five nodes."""

    name: str
    title: str
    description: str
    storage: str
    fields: tuple[ConnectionField, ...] = ()
    order: int = 100


class Store(ABC):
    """The protocol of every storage backend.

    Public methods are wrapped so that a driver exception that escapes becomes a
    :class:`StorageError` (raised from the original), once, here.
    """

    #: URL schemes :func:`~chat_memory.open_store` maps to this class. A class that sets it
    #: registers itself (see :mod:`chat_memory.backends.registry`); a scheme ``a+b`` falls
    #: back to ``a`` (``postgresql+psycopg`` is ``postgresql``'s).
    schemes: ClassVar[tuple[str, ...]] = ()
    #: The pip extra that installs this store's driver (``pip install 'chat-memory[extra]'``).
    extra: ClassVar[str | None] = None
    #: The options this store reads from its URL's query string and from keywords.
    url_options: ClassVar[tuple[StoreOption, ...]] = ()
    #: Whether query options that are not in :attr:`url_options` go to the driver (SQL,
    #: Redis) or are refused (the rest).
    passes_query_to_driver: ClassVar[bool] = False
    #: The store's canvas node, if it has one.
    node: ClassVar[StoreNode | None] = None
    #: Archive cap used when a plan does not name one (None: unbounded).
    default_max_archived_events: ClassVar[int | None] = 1000
    #: How many compaction records it keeps per conversation (the newest).
    compaction_records_kept: ClassVar[int] = COMPACTION_RECORDS_KEPT

    _WRAPPED: ClassVar[tuple[str, ...]] = (
        "load",
        "append",
        "append_compacting",
        "apply",
        "history",
        "find_tool_events",
        "search",
        "record_compaction_error",
        "compactions",
        "clear",
        "conversations",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._WRAPPED:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "_wraps_driver_errors", False):
                setattr(cls, name, wrap_driver_errors(method))
        if cls.__dict__.get("schemes"):
            from .registry import register  # the registry imports this module

            register(cls)

    @classmethod
    @abstractmethod
    def from_url(cls, url: str, **options: Any) -> Store:
        """Build the store from a URL with one of :attr:`schemes`."""

    @classmethod
    def extra_for(cls, scheme: str) -> str | None:
        """The pip extra whose driver a URL with this scheme needs."""
        return cls.extra

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The URL and keyword options :func:`~chat_memory.open_store` takes for the values
        of this store's node connection fields."""
        raise ConfigurationError(f"{cls.__name__} has no canvas node")

    @classmethod
    def url_settings(cls, query: str, keywords: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Parse a URL's query string and keyword options with :attr:`url_options`: returns
        (the store's settings, keywords winning over the URL; the query pairs left for the
        driver). An unknown query option is refused, naming it, unless the store
        :attr:`passes_query_to_driver`; keywords not declared are left to the caller."""
        declared = {option.name: option for option in cls.url_options}
        settings: dict[str, Any] = {}
        rest: list[tuple[str, str]] = []
        for name, value in parse_qsl(query, keep_blank_values=True):
            option = declared.get(name)
            if option is not None:
                if name in settings:
                    raise ConfigurationError(f"{cls.__name__} URL option {name} is given more than once")
                settings[name] = option.parse(value, cls.__name__)
            elif cls.passes_query_to_driver:
                rest.append((name, value))
            else:
                known = ", ".join(sorted(declared)) or "none"
                raise ConfigurationError(f"{cls.__name__} URL option ({name!r}) is not supported; known options: {known}")
        for name, value in (keywords or {}).items():
            if name in declared:
                settings[name] = declared[name].parse(value, cls.__name__)
        return settings, rest

    @abstractmethod
    def load(self, conversation_id: str) -> Snapshot:
        """The conversation's window and bookkeeping (an empty snapshot when it does not exist)."""

    @abstractmethod
    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        """Append events atomically and in order, assigning gap-free ``seq`` values after the
        last one and bumping the version; ``system`` events become pinned. Events arrive with
        ``tokens`` already counted. Returns the snapshot right after this append.

        Idempotent per event id, in the same atomic step: an event whose ``id`` is already in
        the window (pinned or active) is not stored again (see :func:`unstored`); when every
        event is, nothing is written and the current snapshot is returned."""

    @abstractmethod
    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        """Apply a compaction plan if the version still equals ``plan.expected_version``;
        return False (changing nothing) when another write got there first. A successful
        apply bumps the version and clears the recorded compaction error."""

    @abstractmethod
    def history(self, conversation_id: str) -> list[Event]:
        """Every stored event, archived included, oldest (lowest seq) first."""

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """Stored tool calls and results (archived ones included) whose ``tool_call_id`` is
        one of ``tool_call_ids``, oldest first.

        The engine calls this only off the hot path: for a tool result whose call is neither
        in the same ``add()`` nor in the window (a late result of an archived call). This
        default reads the whole history; stores that can look the ids up in place (SQL, in
        memory) override it."""
        wanted = set(tool_call_ids)
        return [
            e
            for e in self.history(conversation_id)
            if e.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT) and e.tool_call_id in wanted
        ]

    @abstractmethod
    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        """Matching events (archived and active, never summaries or system events), oldest
        first, filtered before the ``offset``/``limit`` slice is taken."""

    @abstractmethod
    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        """Remember (or with None, forget) why the last automatic compaction failed."""

    @abstractmethod
    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        """The records of the conversation's applied compactions (``CompactionPlan.record``),
        oldest first, at most the newest :attr:`compaction_records_kept`."""

    @abstractmethod
    def clear(self, conversation_id: str) -> None:
        """Delete the conversation entirely; a later append starts again at seq 1."""

    @abstractmethod
    def conversations(self) -> list[str]:
        """Ids of the stored conversations, sorted (for tools and the command line)."""

    def archive_cap(self, plan: CompactionPlan) -> int | None:
        """How many archived events to keep after applying ``plan``: the plan's cap, else this
        store's default (None: unbounded)."""
        return plan.max_archived_events if plan.max_archived_events is not None else self.default_max_archived_events

    def close(self) -> None:
        """Release connections this store owns (clients passed in by the caller are left open)."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CompactsWhileAppending(ABC):
    """Optional ability of a store: apply a compaction in the same atomic write as an append.

    The engine uses it for strategies that need no summarizer (planning is pure and fast, so
    it may run inside the store's write): one write per turn instead of two."""

    @abstractmethod
    def append_compacting(
        self, conversation_id: str, events: Sequence[Event], planner: Callable[[Snapshot], CompactionPlan | None]
    ) -> tuple[Snapshot, bool]:
        """Append like :meth:`Store.append`; then call ``planner`` with the snapshot right
        after the append and, if it returns a plan, apply it in the same atomic write.
        Returns that snapshot (before compaction) and whether a plan was applied."""


F = TypeVar("F", bound=Callable[..., Any])


def wrap_driver_errors(method: F) -> F:
    """Turn any non-chat-memory exception escaping ``method`` (a function or a coroutine
    function) into a :class:`StorageError`."""
    if inspect.iscoroutinefunction(method):  # an AsyncStore's coroutine

        @functools.wraps(method)
        async def awaiting(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _driver_errors(self, method.__name__):
                return await method(self, *args, **kwargs)

        awaiting._wraps_driver_errors = True  # type: ignore[attr-defined]
        return awaiting  # type: ignore[return-value]

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        with _driver_errors(self, method.__name__):
            return method(self, *args, **kwargs)

    wrapper._wraps_driver_errors = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


@contextmanager
def _driver_errors(store: Any, method: str) -> Iterator[None]:
    try:
        yield
    except ChatMemoryError:
        raise
    except Exception as exc:
        raise StorageError(f"{type(store).__name__}.{method} failed: {type(exc).__name__}: {exc}") from exc


# -- helpers shared by backends ------------------------------------------------------------


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


@dataclass
class Backoff:
    """Bounded, jittered exponential backoff for optimistic-concurrency retries."""

    attempts: int = 40
    base: float = 0.002
    cap: float = 0.25

    def delays(self) -> Iterable[float]:
        for attempt in range(self.attempts):
            yield random.uniform(0, min(self.cap, self.base * (2**attempt)))

    def run(self, operation: Callable[[], Any], *, what: str) -> Any:
        """Call ``operation`` until it returns something other than None; sleep between tries.
        Raises :class:`ConcurrencyError` when every attempt lost its race."""
        for delay in self.delays():
            result = operation()
            if result is not None:
                return result
            time.sleep(delay)
        raise ConcurrencyError(f"{what} lost {self.attempts} optimistic-concurrency races in a row; giving up")
