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
from datetime import datetime
from typing import Any, ClassVar

from ..errors import ConfigurationError, InvalidInputError
from ..events import Event, Window
from ..lifecycle.keys import SCOPE_PREFIX, ScopedKey
from ..lifecycle.records import ConversationRecord, ErasureCounts
from ..search import SearchQuery, SearchResult
from .bookkeeping import (
    tool_events,
)
from .declarations import StoreNode, StoreOption, settings_from_url
from .failures import DriverErrors, wrap_driver_errors
from .registry import register
from .timeline import ConversationDump

__all__ = [
    "COMPACTION_RECORDS_KEPT",
    "MAX_CONVERSATION_ID_LENGTH",
    "CompactionPlan",
    "AppendsWithoutWindow",
    "ChecksToolPairs",
    "CompactsWhileAppending",
    "KeepsLifecycle",
    "Dumps",
    "Forks",
    "Retracts",
    "Snapshot",
    "Store",
    "ToolPairCheck",
    "check_conversation_id",
]

MAX_CONVERSATION_ID_LENGTH = 1024

#: The engine's tool-pair check of one ``add()``, run by a store with :class:`ChecksToolPairs`
#: inside its append: given the stored events the batch's tool events need (see
#: :class:`ChecksToolPairs`), it returns the batch to append (each nameless tool result named
#: after its call) or raises :class:`~chat_memory.errors.InvalidEventError`.
ToolPairCheck = Callable[[list[Event]], list[Event]]


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
    if conversation_id.startswith(SCOPE_PREFIX) and not isinstance(conversation_id, ScopedKey):
        # only a scoped view (memory.for_user) makes these: an id from data never names one
        raise InvalidInputError(
            f"conversation_id ({conversation_id[:80]!r}) starts with {SCOPE_PREFIX!r}, reserved "
            "for scoped conversations: reach them through memory.for_user(user, app)"
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
        "fork",
        "dump",
        "restore",
        "conversation_record",
        "set_metadata",
        "list_conversations",
        "idle_conversations",
        "delete_idle",
        "erase",
        "erase_scope",
        "erase_namespaces",
        "sweep_namespaces",
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


class ChecksToolPairs(ABC):
    """Optional ability of a store: run the engine's tool-pair check of an ``add()`` inside
    the append's own atomic write (under its lock, in its transaction or script), so that the
    check sees exactly what the append writes after: one read and one write per append, and
    two writers racing to add a result for one call (or one call id twice) cannot both pass.

    Each append method takes ``check``. When it is given, the store, atomically with the
    append, finds the stored events whose ``id`` is one of
    :func:`~chat_memory.event_checks.tool_event_ids` of the batch or whose ``tool_call_id`` is
    one of :func:`~chat_memory.event_checks.tool_call_ids` of it (window and archive, archived
    ones marked ``archived=True``; never the summary), oldest first, each once; calls
    ``check(found)``; and appends what it returns in place of the batch. A check that raises
    (:class:`~chat_memory.errors.InvalidEventError`) propagates, nothing written. A store that
    must read again (its write found the conversation changed since the look-up) calls
    ``check`` again on the new look-up. The engine passes ``check`` only to a store with this
    ability (async stores say so with ``checks_tool_pairs``) and only for a batch holding tool
    events; to any other store it keeps checking against a read before the append."""

    @abstractmethod
    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        """:meth:`Store.append`, running ``check`` inside the write when it is given."""

    @abstractmethod
    def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """:meth:`AppendsWithoutWindow.append_without_window`, running ``check`` inside the
        write when it is given."""

    @abstractmethod
    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        """:meth:`CompactsWhileAppending.append_compacting`, running ``check`` inside the
        write when it is given (before ``planner``, which sees the batch ``check`` returned)."""


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


class Forks(ABC):
    """Optional ability of a store: fork a conversation, as cheaply as the store can (one
    transaction, one script, server-side copies), keeping the timeline it needs
    (:mod:`chat_memory.backends.timeline`: a compaction, retraction and dropped-pin entry per
    :meth:`Store.apply`, :meth:`Retracts.retract` and archive-cap deletion of a superseded pin).
    Async stores offer the same method as a coroutine (the engine finds it by name)."""

    @abstractmethod
    def fork(self, conversation_id: str, new_conversation_id: str, at: int | None) -> Snapshot:
        """Create ``new_conversation_id`` as the conversation was at seq ``at`` (None: now;
        see :func:`~chat_memory.backends.timeline.state_at`), atomically, and return its
        snapshot. :class:`~chat_memory.errors.InvalidInputError`, writing nothing, when the
        source is not stored, the new id is, or ``at`` is out of range (each named)."""


class Dumps(ABC):
    """Optional ability of a store: dump one conversation exactly and restore it, without
    re-running compaction (export, import and ``chat-memory copy``; docs/moving-stores.md).
    Async stores offer the same methods as coroutines."""

    @abstractmethod
    def dump(self, conversation_id: str) -> ConversationDump | None:
        """The whole conversation (:class:`~chat_memory.backends.timeline.ConversationDump`),
        None when it is not stored."""

    @abstractmethod
    def restore(self, dump: ConversationDump) -> None:
        """Store ``dump`` as conversation ``dump.conversation_id``, atomically, exactly (seqs,
        flags, summary, records, timeline, metadata); refuses with
        :class:`~chat_memory.errors.InvalidInputError` naming the id when it is stored already."""


class KeepsLifecycle(ABC):
    """Optional ability of a store: conversation metadata, listing by scope, retention sweeps
    and erasure (docs/lifecycle.md, "The store ability"). Keys are store keys (bare or
    scoped, :mod:`chat_memory.lifecycle.keys`); a ``scope`` is a scope prefix
    (:func:`~chat_memory.lifecycle.keys.scope_prefix`, ``""``: the unscoped conversations).
    Keys a method returns are marked with :func:`~chat_memory.lifecycle.keys.stored_key`, so
    they may be passed back. Every write of a conversation (append, apply, retract,
    :meth:`set_metadata`) refreshes its ``last_active_at``. Async stores offer the same
    methods as coroutines (the engine finds them by name)."""

    @abstractmethod
    def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's metadata, None when it is not stored."""

    @abstractmethod
    def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        """Atomically: ``title``/``tags`` replace the stored ones unless None; ``values`` are
        merged into the free key-values (a value None removes its key); ``last_active_at`` is
        refreshed. A conversation not stored yet is created, empty. Returns the new record."""

    @abstractmethod
    def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        """The scope's conversations (with ``tag`` if given), newest ``last_active_at`` first
        (ties by key), the ``offset``/``limit`` slice, through an index (never a scan of the
        whole store)."""

    @abstractmethod
    def idle_conversations(self, scope: str | None, cutoff: datetime, limit: int) -> list[str]:
        """Up to ``limit`` keys of conversations whose ``last_active_at`` is before ``cutoff``
        (an aware UTC datetime), oldest activity first; in ``scope`` or, None, in every scope."""

    @abstractmethod
    def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        """Delete the conversation, with everything it owns, only if its ``last_active_at`` is
        still before ``cutoff`` at the moment of the delete (a conditional delete: one written
        to since it was found idle is kept); returns what was deleted, None when kept or gone."""

    @abstractmethod
    def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        """Delete the conversation with everything it owns (zeros when it is not stored), and
        refuse, for ``guard_seconds``, a write that would create it again
        (:class:`~chat_memory.errors.ConcurrencyError`): a writer racing the erasure is
        refused, never left behind."""

    @abstractmethod
    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        """Guard the scope as :meth:`erase` does (first), then delete up to ``limit`` of its
        conversations, atomically per call; the caller repeats while a call deletes
        ``limit`` (erase until empty). ``scope`` must not be ``""``."""

    @abstractmethod
    def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        """Delete the long-term namespaces of ``scope`` (named with
        :func:`~chat_memory.lifecycle.keys.scoped_namespace`), files and kept versions,
        guarded as :meth:`erase_scope`; ``long_term_files`` and ``long_term_versions`` count
        them. ``scope`` must not be ``""``."""

    @abstractmethod
    def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        """Delete the long-term namespaces (of ``scope``; None: all) that have a retention
        and were not written to within it before ``now``; returns how many and what they held."""
