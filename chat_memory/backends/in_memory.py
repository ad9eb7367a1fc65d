"""The in-memory store: per process, thread-safe, for tests, notebooks and short-lived agents."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigurationError, InvalidInputError
from ..event_checks import tool_call_ids, tool_event_ids
from ..events import Event, EventType, window_of
from ..pins import superseded
from ..search import SearchQuery, SearchResult, search_events
from .base import (
    AppendsWithoutWindow,
    ChecksToolPairs,
    CompactionPlan,
    CompactsWhileAppending,
    Dumps,
    Forks,
    Retracts,
    Snapshot,
    Store,
    ToolPairCheck,
    check_conversation_id,
)
from .bookkeeping import (
    number,
    replaced,
    retracted_copy,
    retraction_targets,
    split_appended,
    unstored,
)
from .declarations import StoreNode, StoreOption
from .memory_lifecycle import ConversationTable, InMemoryLifecycle, now
from .memory_transfer import dump_of, fill
from .packed import Held, PackedEvents, unpack
from .timeline import (
    ConversationDump,
    compaction_entry,
    dropped_pin_entry,
    retraction_entry,
    shown_id,
    state_at,
)


@dataclass
class _Conversation:
    version: int = 0
    last_seq: int = 0
    pinned: list[Event] = field(default_factory=list)
    summary: Event | None = None
    active: deque[Event] = field(default_factory=deque)
    # the bulk of a long conversation, read only by history, search and finds: held packed
    archive: PackedEvents = field(default_factory=PackedEvents)
    compaction_error: str | None = None
    compaction_failures: int = 0
    compactions: deque[dict[str, Any]] = field(default_factory=deque)
    retracted: list[Event] = field(default_factory=list)
    # lifecycle (docs/lifecycle.md): every write refreshes last_active_at
    created_at: datetime = field(default_factory=now)
    last_active_at: datetime = field(default_factory=now)
    title: str | None = None
    tags: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    # what a fork needs to rebuild a past window (chat_memory.backends.timeline), never trimmed
    timeline: list[dict[str, Any]] = field(default_factory=list)
    timeline_from: int = 0
    # indexes, so that an add costs its batch: the window's events by id; every stored tool
    # event (its current copy, archived or not) by seq, and the seqs of each tool_call_id
    by_id: dict[str, Event] = field(default_factory=dict)
    tools: dict[int, Held] = field(default_factory=dict)
    calls: dict[str, list[int]] = field(default_factory=dict)

    def index(self, stored: list[Event]) -> None:
        """Index events just appended (numbered, in the window)."""
        for event in stored:
            self.by_id[event.id] = event
            if (
                event.type in _TOOL_TYPES
                and event.seq is not None
                and event.tool_call_id is not None
            ):
                self.tools[event.seq] = event
                self.calls.setdefault(event.tool_call_id, []).append(event.seq)

    def archived(self, moved: list[Event]) -> None:
        """Events that left the window for the archive: their archived copies held there
        (packed, never made as events), the tool index sharing what the archive holds."""
        for event in moved:
            if self.by_id.get(event.id) is not None and self.by_id[event.id].seq == event.seq:
                del self.by_id[event.id]
            held = self.archive.append(event, archived=True)
            if event.seq in self.tools:
                self.tools[event.seq] = held

    def forget(self, event: Event) -> None:
        """A window event that left by retraction (an archived one is dropped like the cap does)."""
        if event.id in self.by_id and self.by_id[event.id].seq == event.seq:
            del self.by_id[event.id]
        self.dropped(event)

    def dropped(self, event: Held) -> None:
        """An archived event the archive cap deleted (as held, packed or not)."""
        seq = event.seq or 0
        if self.tools.pop(seq, None) is None:
            return
        call_id = event.tool_call_id
        seqs = None if call_id is None else self.calls.get(call_id)
        if call_id is not None and seqs is not None:
            seqs.remove(seq)
            if not seqs:
                del self.calls[call_id]


_TOOL_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT)


class InMemoryStore(
    ChecksToolPairs,
    AppendsWithoutWindow,
    CompactsWhileAppending,
    Dumps,
    Forks,
    InMemoryLifecycle,
    Retracts,
    Store,
):
    """Keeps conversations in a dict guarded by one lock. ``memory://`` URLs open a fresh one.
    Dict indexes (window events by id, tool events by ``tool_call_id``) make
    :meth:`append_without_window` and :meth:`find_events` cost the batch, not the conversation."""

    schemes = ("memory",)
    long_term = "chat_memory.longterm.in_memory:InMemoryFiles"
    url_options = (StoreOption("max_archived_events", int, minimum=0, nullable=True),)
    node = StoreNode(
        "inMemoryChatMemory",
        "In-Memory Chat Memory",
        "Chat memory in this process only; lost on restart.",
        "memory",
        order=40,
    )
    default_max_archived_events: int | None = 1000

    def __init__(self, max_archived_events: int | None = 1000) -> None:
        self.default_max_archived_events = max_archived_events
        self._conversations: ConversationTable[_Conversation] = ConversationTable(_Conversation)
        self._lock = threading.RLock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> InMemoryStore:
        """``memory://`` (``?max_archived_events=…``): a fresh, empty store."""
        settings, _ = cls.url_settings(urlsplit(url).query, options)
        unknown = sorted(set(options) - set(settings))
        if unknown:
            raise ConfigurationError(
                f"InMemoryStore option ({unknown[0]!r}) is not supported; known options: max_archived_events"
            )
        return cls(**settings)

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        return "memory://", {}

    def _snapshot(self, cid: str, conv: _Conversation) -> Snapshot:
        return Snapshot(
            conversation_id=cid,
            version=conv.version,
            last_seq=conv.last_seq,
            window=window_of(tuple(conv.pinned), conv.summary, tuple(conv.active)),
            archived_count=len(conv.archive),
            compaction_error=conv.compaction_error,
            compaction_failures=conv.compaction_failures,
        )

    def load(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            return self._snapshot(cid, conv) if conv else Snapshot.empty(cid)

    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            events = self._checked(cid, events, check)
            conv = self._conversation(cid)
            self._append(conv, events)
            return self._snapshot(cid, conv)

    def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """Append like :meth:`append`; the stored copy of each of ``events``, found by id."""
        cid = check_conversation_id(conversation_id)
        with self._lock:
            events = self._checked(cid, events, check)
            conv = self._conversation(cid)
            before = {e.id: conv.by_id[e.id] for e in events if e.id in conv.by_id}
            stored = {e.id: e for e in self._append(conv, events)}
            return [before.get(e.id) or stored[e.id] for e in events]

    def _conversation(self, cid: str) -> _Conversation:
        """The conversation ``cid``, made empty when it is not stored yet (an empty one is
        built only then: it stamps two times and makes six containers)."""
        conv = self._conversations.get(cid)
        if conv is None:
            conv = self._conversations.setdefault(cid, _Conversation())
        return conv

    def _checked(
        self, cid: str, events: Sequence[Event], check: ToolPairCheck | None
    ) -> Sequence[Event]:
        """``events``, or what ``check`` makes of them on the indexed look-up (called under
        the lock: nothing can change between the look-up and the append)."""
        if check is None:
            return events
        return check(self.find_events(cid, tool_event_ids(events), tool_call_ids(events)))

    def _append(self, conv: _Conversation, events: Sequence[Event]) -> list[Event]:
        """Store the events whose id is not in the window (see :func:`unstored`); returns
        their numbered copies. Every event stored already: nothing is written (an empty list
        still bumps the version, as on every store)."""
        fresh = [e for e in unstored(events, ()) if e.id not in conv.by_id]
        if events and not fresh:
            return []
        numbered = number(fresh, conv.last_seq)
        pinned, real = split_appended(numbered)
        conv.pinned.extend(pinned)
        conv.index(numbered)
        if pinned:
            self._unpin_superseded(conv)
        conv.active.extend(real)
        conv.last_seq += len(numbered)
        conv.version += 1
        conv.last_active_at = now()
        return numbered

    @staticmethod
    def _unpin_superseded(conv: _Conversation) -> None:
        gone = superseded(conv.pinned)
        if gone:
            seqs = {e.seq for e in gone}
            conv.pinned = [e for e in conv.pinned if e.seq not in seqs]
            conv.archived(gone)  # the archive sorts them in

    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        with self._lock:
            snapshot = self.append(conversation_id, events, check)
            plan = planner(snapshot)
            return snapshot, plan is not None and self.apply(conversation_id, plan)

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is None or conv.version != plan.expected_version:
                return False
            moved = []
            while conv.active and (conv.active[0].seq or 0) <= plan.archive_through_seq:
                moved.append(conv.active.popleft())
            # a pin superseded after these events were written sits later in the archive: the
            # archive keeps seq order, so that the cap below drops the oldest, as every store does
            conv.archived(moved)
            if plan.summary is not None:
                if conv.summary is not None:
                    conv.archive.append(conv.summary, archived=True)
                conv.last_seq += 1
                conv.summary = replaced(plan.summary, {"seq": conv.last_seq, "archived": False})
            cap = self.archive_cap(plan)
            if cap is not None:
                for gone in conv.archive.take_oldest(len(conv.archive) - cap):
                    conv.dropped(gone)
                    if gone.type is EventType.SYSTEM:
                        conv.timeline.append(dropped_pin_entry(unpack(gone)))
            if plan.record is not None:
                conv.compactions.append(
                    json.loads(json.dumps(plan.record))
                )  # stored as JSON, like elsewhere
                while len(conv.compactions) > self.compaction_records_kept:
                    conv.compactions.popleft()
            conv.timeline.append(
                compaction_entry(
                    conv.last_seq,
                    plan.archive_through_seq,
                    None if plan.summary is None or conv.summary is None else conv.summary.seq,
                )
            )
            conv.version += 1
            conv.last_active_at = now()
            conv.compaction_error = None
            conv.compaction_failures = 0
            return True

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            return [] if conv is None else [json.loads(json.dumps(r)) for r in conv.compactions]

    def history(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is None:
                return []
            everything = [*conv.archive, *conv.pinned, *conv.active]
            if conv.summary is not None:
                everything.append(conv.summary)
        return sorted(everything, key=lambda e: e.seq or 0)

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """By the ``tool_call_id`` index: the events of the ids asked for, nothing else."""
        return self.find_events(conversation_id, (), tool_call_ids)

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is None:
                return []
            found = {e.seq: e for e in (conv.by_id.get(i) for i in set(event_ids)) if e is not None}
            for call_id in set(tool_call_ids):
                found.update((seq, unpack(conv.tools[seq])) for seq in conv.calls.get(call_id, ()))
        return sorted(found.values(), key=lambda e: e.seq or 0)

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return search_events(self.history(conversation_id), query)

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """Under the lock: the events and their tool partners leave the window, the archive
        and the indexes for the retracted list (see :class:`Retracts`)."""
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is None:
                return []
            stored = [
                *conv.archive,
                *conv.pinned,
                *conv.active,
                *([conv.summary] if conv.summary else []),
            ]
            targets = retraction_targets(stored, event_ids)
            if not targets:
                return []
            seqs = {e.seq for e in targets}
            for event in targets:
                conv.forget(event)
            conv.active = deque(e for e in conv.active if e.seq not in seqs)
            conv.archive.discard(seqs)
            taken = [retracted_copy(e) for e in targets]
            conv.retracted = sorted([*conv.retracted, *taken], key=lambda e: e.seq or 0)
            conv.timeline.append(retraction_entry(conv.last_seq, (e.seq or 0 for e in targets)))
            conv.version += 1
            conv.last_active_at = now()
            return taken

    def retracted(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            return [] if conv is None else list(conv.retracted)

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is not None:
                conv.compaction_error = message
                conv.compaction_failures = 0 if message is None else conv.compaction_failures + 1

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            self._conversations.pop(cid, None)

    def conversations(self) -> list[str]:
        with self._lock:
            return sorted(self._conversations)

    def fork(self, conversation_id: str, new_conversation_id: str, at: int | None) -> Snapshot:
        """Under the lock: the source's state at ``at`` rebuilt from its events and timeline
        (:func:`~chat_memory.backends.timeline.state_at`), stored as the new conversation."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        with self._lock:
            source = self.dump(cid)
            if source is None:
                raise InvalidInputError(
                    f"conversation_id ({shown_id(cid)!r}) is not a stored conversation"
                )
            self._refuse_existing(new_cid)
            fork = state_at(source, source.last_seq if at is None else at, new_cid)
            # a new conversation: its title, tags and values come along, its clock starts now
            started = now().isoformat()
            metadata = {**fork.metadata, "created_at": started, "last_active_at": started}
            self._restore(replace(fork, metadata=metadata))
            return self.load(new_cid)

    def dump(self, conversation_id: str) -> ConversationDump | None:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            return None if conv is None else dump_of(cid, conv)

    def restore(self, dump: ConversationDump) -> None:
        cid = check_conversation_id(dump.conversation_id)
        with self._lock:
            self._refuse_existing(cid)
            self._restore(dump)

    def _refuse_existing(self, cid: str) -> None:
        if cid in self._conversations:
            raise InvalidInputError(f"conversation_id ({shown_id(cid)!r}) is stored already")

    def _restore(self, dump: ConversationDump) -> None:
        conv = _Conversation()
        fill(conv, dump)
        self._conversations[dump.conversation_id] = conv
