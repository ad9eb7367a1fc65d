"""The store protocol every backend implements: :class:`Store`, its optional abilities
(:class:`CompactsWhileAppending`), and what crosses it (:class:`Snapshot`,
:class:`CompactionPlan`, conversation ids).

A store keeps, per conversation: a version (bumped by every write), the last assigned
``seq``, pinned system events, the current summary, active real events, and the archive.
Stores apply compaction plans; they never make them (that is the engine's job).

What a store declares for the registry and the canvas is in :mod:`.declarations`; driver
errors in :mod:`.failures`; the event bookkeeping stores share in :mod:`.bookkeeping`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigurationError, InvalidInputError
from ..events import Event, Window
from ..search import SearchQuery, SearchResult
from .bookkeeping import (
    tool_events,
)
from .declarations import StoreNode, StoreOption, settings_from_url
from .failures import DriverErrors, wrap_driver_errors
from .registry import register

__all__ = [
    "COMPACTION_RECORDS_KEPT",
    "MAX_CONVERSATION_ID_LENGTH",
    "CompactionPlan",
    "AppendsWithoutWindow",
    "CompactsWhileAppending",
    "Retracts",
    "Snapshot",
    "Store",
    "check_conversation_id",
]

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
        raise InvalidInputError(
            f"conversation_id ({conversation_id!r}) must not contain NUL characters"
        )
    try:
        conversation_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"conversation_id ({conversation_id!r}) is not valid Unicode text"
        ) from None
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
    #: failed compactions recorded since the last one that applied: each
    #: ``record_compaction_error`` with a message counts one; an apply (or recording None)
    #: resets it to 0. Kept in the store beside ``compaction_error``, so that every worker
    #: and a restarted process see the same count (the summarizer's fallback is decided on it).
    compaction_failures: int = 0

    @classmethod
    def empty(cls, conversation_id: str) -> Snapshot:
        return cls(conversation_id, version=0, last_seq=0, window=Window(), archived_count=0)

    def appended(self, count: int) -> list[Event]:
        """The last ``count`` events by seq (what an append just stored), oldest first."""
        first = self.last_seq - count + 1
        found = [
            e
            for e in (*self.window.pinned, *self.window.active)
            if e.seq is not None and e.seq >= first
        ]
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


class Store(ABC):
    """The protocol of every storage backend.

    Public methods are wrapped so that an exception of the store's driver (one
    :attr:`driver_errors` declares) that escapes becomes a :class:`StorageError` naming the
    store and the method (raised from the original), once, here; any other exception
    propagates as itself.
    """

    #: The driver's exception classes that become :class:`StorageError` (classes or lazy
    #: ``"module:Class"`` names, see :data:`~chat_memory.backends.failures.DriverErrors`);
    #: none for a store without a driver.
    driver_errors: ClassVar[DriverErrors] = ()

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
    #: Its native async twin for :func:`~chat_memory.open_async_store`, as
    #: ``"package.module:Class"`` (an :class:`~chat_memory.backends.aio.AsyncStore` subclass,
    #: imported only when an async store is opened); None: the async API runs this store in
    #: threads. The twin serves the schemes it declares, or all of this store's if none.
    async_twin: ClassVar[str | None] = None
    #: Its long-term memory for :func:`~chat_memory.longterm.long_term_memory`, as
    #: ``"package.module:Class"`` (a :class:`~chat_memory.longterm.MemoryFiles` subclass taking
    #: ``(store, namespace, **options)``, imported only when used); None: it has none.
    long_term: ClassVar[str | None] = None
    #: Archive cap used when a plan does not name one (None: unbounded); a store sets its own
    #: from its ``max_archived_events`` option, so it is per instance.
    default_max_archived_events: int | None = 1000
    #: How many compaction records it keeps per conversation (the newest).
    compaction_records_kept: ClassVar[int] = COMPACTION_RECORDS_KEPT

    _WRAPPED: ClassVar[tuple[str, ...]] = (
        "load",
        "append",
        "append_compacting",
        "apply",
        "history",
        "find_tool_events",
        "append_without_window",
        "find_events",
        "retract",
        "retracted",
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
    def url_settings(
        cls, query: str, keywords: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Parse a URL's query string and keyword options with :attr:`url_options`: returns
        (the store's settings, keywords winning over the URL; the query pairs left for the
        driver). An unknown query option is refused, naming it, unless the store
        :attr:`passes_query_to_driver`; keywords not declared are left to the caller."""
        return settings_from_url(cls, query, keywords)

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
        apply bumps the version, clears the recorded compaction error and resets
        :attr:`Snapshot.compaction_failures` to 0."""

    @abstractmethod
    def history(self, conversation_id: str) -> list[Event]:
        """Every stored event, archived included, oldest (lowest seq) first."""

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """Stored tool calls and results (archived ones included) whose ``tool_call_id`` is
        one of ``tool_call_ids``, oldest first.

        The engine calls this for a tool result whose call is neither in the same ``add()``
        nor in the window (a late result of an archived call) on a store without
        :class:`AppendsWithoutWindow`, and for ``fetch_tool_result``. This default reads the
        whole history; stores that look the ids up by index (in memory, SQL, Redis) override it."""
        return tool_events(self.history(conversation_id), tool_call_ids)

    @abstractmethod
    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        """Matching events (archived and active, never summaries or system events), oldest
        first, filtered before the ``offset``/``limit`` slice is taken."""

    @abstractmethod
    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        """Remember why the last compaction failed and count the failure
        (:attr:`Snapshot.compaction_failures` + 1), atomically; with None, forget the error and
        reset the count to 0. :meth:`apply` does the same reset. Nothing is written for a
        conversation that is not stored."""

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
        return (
            plan.max_archived_events
            if plan.max_archived_events is not None
            else self.default_max_archived_events
        )

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
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> tuple[Snapshot, bool]:
        """Append like :meth:`Store.append`; then call ``planner`` with the snapshot right
        after the append and, if it returns a plan, apply it in the same atomic write.
        Returns that snapshot (before compaction) and whether a plan was applied."""


class AppendsWithoutWindow(ABC):
    """Optional ability of a store: an append, and the look-ups the engine's checks of an
    ``add()`` need, that cost the batch, not the conversation's length (indexes by event id
    and by ``tool_call_id`` instead of reading the window).

    The engine calls :meth:`find_events` for the tool-pair check of every ``add()`` holding
    tool events, and :meth:`append_without_window` instead of :meth:`Store.append` for a
    strategy that never compacts. A store with this ability also looks
    :meth:`Store.find_tool_events` up by index. Async stores offer the same two methods as
    coroutines (the engine finds them by name)."""

    @abstractmethod
    def append_without_window(self, conversation_id: str, events: Sequence[Event]) -> list[Event]:
        """Append like :meth:`Store.append` (atomic, in order, idempotent per event id against
        the window) and return the stored copy of each of ``events``, in order: the one just
        stored or, for an event whose id was in the window already, the one stored before."""

    @abstractmethod
    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """The stored events a tool-pair check needs, oldest first, each once: the pinned and
        active events whose ``id`` is one of ``event_ids`` (never archived ones, never the
        summary), and the tool calls and results, archived ones included (marked so), whose
        ``tool_call_id`` is one of ``tool_call_ids``."""


class Retracts(ABC):
    """Optional ability of a store: take events back (retraction, the engine's "remove").

    A retracted event leaves the window, the archive, search and the event-id and call-id
    indexes (so its id and its ``tool_call_id`` may be added again), but is kept, content
    intact, where :meth:`retracted` finds it, until :meth:`Store.clear` deletes it. ``seq``
    numbers are never reused: the next append continues after the highest seq ever stored.
    Async stores offer the same two methods as coroutines (the engine finds them by name)."""

    @abstractmethod
    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """Retract, atomically (one transaction, one script, one conditional write or under
        the lock), the conversation's non-retracted real events (window and archive) whose
        ``id`` is one of ``event_ids``, plus each tool event's partner by ``tool_call_id``;
        bump the version and return them, oldest first, marked ``retracted=True``. Unknown or
        already retracted ids are ignored. An id naming a pinned system event or a summary
        raises :class:`~chat_memory.errors.InvalidInputError` naming it, writing nothing."""

    @abstractmethod
    def retracted(self, conversation_id: str) -> list[Event]:
        """The conversation's retracted events, oldest first, marked ``retracted=True``."""
