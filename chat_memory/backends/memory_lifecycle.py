"""The lifecycle half of memory:// (:class:`~chat_memory.backends.base.KeepsLifecycle`):
the conversations table that indexes keys by scope and refuses writes to what is being erased,
and the metadata, listing, sweep and erasure methods the in-memory store mixes in
(docs/lifecycle.md)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from ..errors import ConcurrencyError, InvalidInputError
from ..events import Event, EventType
from ..lifecycle.keys import guard_name, scope_of_key, stored_key
from ..lifecycle.records import ConversationRecord, ErasureCounts, merged_values
from .base import KeepsLifecycle, check_conversation_id

V = TypeVar("V")


class KeptConversation(Protocol):
    """What the lifecycle reads and writes of a conversation memory:// keeps."""

    pinned: list[Event]
    active: deque[Event]
    archive: Any  # iterable of events, with a length
    summary: Event | None
    compactions: deque[dict[str, Any]]
    retracted: list[Event]
    created_at: datetime
    last_active_at: datetime
    title: str | None
    tags: tuple[str, ...]
    values: dict[str, Any]


def now() -> datetime:
    """The time a write is stamped with (aware, UTC)."""
    return datetime.now(timezone.utc)


class ConversationTable(dict[str, V]):
    """The store's conversations by key, with, kept by the table itself whatever code inserts
    or removes a conversation: ``scopes``, the keys of each scope prefix (the listing index:
    a scope's listing never looks at another scope's keys), and ``guards``, keys and scope
    prefixes being erased, until a deadline (``time.monotonic``): creating a conversation
    under a live guard raises :class:`ConcurrencyError`."""

    def __init__(self, new: Callable[[], V]) -> None:
        super().__init__()
        #: makes an empty conversation (for set_metadata on one not stored yet)
        self.new = new
        self.scopes: dict[str, dict[str, None]] = {}
        self.guards: dict[str, float] = {}

    def _admit(self, key: str) -> None:
        if self.guards:
            deadline = time.monotonic()
            for guarded in (key, scope_of_key(key)):
                until = self.guards.get(guard_name(guarded))
                if until is not None and until > deadline:
                    raise ConcurrencyError(
                        f"conversation {key[:80]!r} is being erased (forget); writes that would "
                        f"create it again are refused for {until - deadline:.0f} more seconds"
                    )
        self.scopes.setdefault(scope_of_key(key), {})[key] = None

    def _dismiss(self, key: str) -> None:
        scope = scope_of_key(key)
        keys = self.scopes.get(scope)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.scopes[scope]

    def __setitem__(self, key: str, value: V) -> None:
        if key not in self:
            self._admit(key)
        super().__setitem__(key, value)

    def setdefault(self, key: str, default: V) -> V:
        if key not in self:
            self._admit(key)
        return super().setdefault(key, default)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._dismiss(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self._dismiss(key)
        return super().pop(key, *default)

    def guard(self, key_or_scope: str, seconds: float) -> None:
        """Refuse creating ``key_or_scope`` (a key, or every key of a scope prefix) for ``seconds``."""
        moment = time.monotonic()
        self.guards = {k: v for k, v in self.guards.items() if v > moment}
        if seconds > 0:
            self.guards[guard_name(key_or_scope)] = moment + seconds


def counts_of(conv: KeptConversation) -> ErasureCounts:
    """What deleting ``conv`` removes, by kind."""
    archived = summaries = 0
    for event in conv.archive:
        if event.type is EventType.SUMMARY:
            summaries += 1
        else:
            archived += 1
    return ErasureCounts(
        conversations=1,
        events=len(conv.pinned) + len(conv.active),
        archived_events=archived,
        summaries=summaries + (conv.summary is not None),
        compaction_records=len(conv.compactions),
        retracted_events=len(conv.retracted),
    )


def _record(key: str, conv: KeptConversation) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=stored_key(key),
        created_at=conv.created_at,
        last_active_at=conv.last_active_at,
        events=len(conv.pinned) + len(conv.active) + len(conv.archive) + (conv.summary is not None),
        title=conv.title,
        tags=conv.tags,
        values=dict(conv.values),
    )


def _check_scope(scope: Any) -> str:
    if not isinstance(scope, str) or not scope:
        raise InvalidInputError(f"scope ({scope!r}) must be a scope prefix, not empty")
    return scope


class InMemoryLifecycle(KeepsLifecycle):
    """:class:`KeepsLifecycle` for :class:`~chat_memory.backends.in_memory.InMemoryStore`: every
    method holds the store's lock, so each is atomic with every append."""

    _conversations: ConversationTable[Any]
    _lock: threading.RLock

    def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            return None if conv is None else _record(cid, conv)

    def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            new_values = merged_values({} if conv is None else conv.values, values)
            if conv is None:
                conv = self._conversations.setdefault(cid, self._conversations.new())
            if title is not None:
                conv.title = title
            if tags is not None:
                conv.tags = tuple(sorted(set(tags)))
            conv.values = new_values
            conv.last_active_at = now()
            return _record(cid, conv)

    def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        with self._lock:
            keys = self._conversations.scopes.get(scope, {})
            found = [
                (key, conv)
                for key, conv in ((k, self._conversations[k]) for k in keys)
                if tag is None or tag in conv.tags
            ]
            # newest activity first, ties by key (a stable order for paging)
            found.sort(key=lambda kc: kc[0])
            found.sort(key=lambda kc: kc[1].last_active_at, reverse=True)
            return [_record(key, conv) for key, conv in found[offset : offset + limit]]

    def idle_conversations(self, scope: str | None, cutoff: datetime, limit: int) -> list[str]:
        with self._lock:
            if scope is None:
                keys: Any = self._conversations
            else:
                keys = self._conversations.scopes.get(scope, {})
            idle = [
                (conv.last_active_at, key)
                for key, conv in ((k, self._conversations[k]) for k in keys)
                if conv.last_active_at < cutoff
            ]
        idle.sort()
        return [stored_key(key) for _, key in idle[:limit]]

    def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            conv = self._conversations.get(cid)
            if conv is None or conv.last_active_at >= cutoff:
                return None
            self._conversations.pop(cid)
            return counts_of(conv)

    def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        cid = check_conversation_id(conversation_id)
        with self._lock:
            self._conversations.guard(cid, guard_seconds)
            conv = self._conversations.pop(cid, None)
            return ErasureCounts() if conv is None else counts_of(conv)

    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        scope = _check_scope(scope)
        with self._lock:
            self._conversations.guard(scope, guard_seconds)
            keys = list(self._conversations.scopes.get(scope, {}))[:limit]
            total = ErasureCounts()
            for key in keys:
                total += counts_of(self._conversations.pop(key))
            return total

    def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        from ..longterm.in_memory import erase_namespaces

        return erase_namespaces(self, _check_scope(scope), guard_seconds)

    def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        from ..longterm.in_memory import sweep_namespaces

        return sweep_namespaces(self, scope, now)


__all__ = ["ConversationTable", "InMemoryLifecycle", "KeptConversation", "counts_of", "now"]
