"""The dump and restore of one memory:// conversation (the
:class:`~chat_memory.backends.base.Dumps` ability; forks restore a rebuilt dump): what
:class:`~chat_memory.backends.in_memory.InMemoryStore` keeps per conversation, to and from a
:class:`~chat_memory.backends.timeline.ConversationDump`. Called under the store's lock."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..events import EventType
from .timeline import ConversationDump

if TYPE_CHECKING:
    from .in_memory import _Conversation
    from .packed import Held

_TOOL_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT)


def _copied(value: Any) -> Any:
    """A deep copy through JSON: what the store keeps as JSON is never shared with a dump."""
    return json.loads(json.dumps(value))


def dump_of(cid: str, conv: _Conversation) -> ConversationDump:
    """Everything ``conv`` holds, events in seq order."""
    stored = [*conv.archive, *conv.pinned, *conv.active, *conv.retracted]
    if conv.summary is not None:
        stored.append(conv.summary)
    return ConversationDump(
        conversation_id=cid,
        last_seq=conv.last_seq,
        events=tuple(sorted(stored, key=lambda e: e.seq or 0)),
        records=tuple(map(_copied, conv.compactions)),
        timeline=tuple(map(_copied, conv.timeline)),
        compaction_error=conv.compaction_error,
        compaction_failures=conv.compaction_failures,
        metadata={
            "title": conv.title,
            "tags": list(conv.tags),
            "values": _copied(conv.values),
            "created_at": conv.created_at.isoformat(),
            "last_active_at": conv.last_active_at.isoformat(),
        },
        version=conv.version,
        timeline_from=conv.timeline_from,
    )


def fill(conv: _Conversation, dump: ConversationDump) -> None:
    """Make the new, empty ``conv`` hold ``dump``: each event where its flags put it, the
    indexes an append and a look-up by call id need, records, timeline and metadata."""
    conv.version = max(dump.version, 1)
    conv.last_seq = dump.last_seq
    conv.compaction_error = dump.compaction_error
    conv.compaction_failures = dump.compaction_failures
    conv.compactions = deque(map(_copied, dump.records))
    conv.timeline = list(map(_copied, dump.timeline))
    conv.timeline_from = dump.timeline_from
    _fill_metadata(conv, dump.metadata)
    held: dict[int, Held] = {}
    for event in sorted(dump.events, key=lambda e: e.seq or 0):
        if event.retracted:
            conv.retracted.append(event)
        elif event.archived:
            held[event.seq or 0] = conv.archive.append(event)
        elif event.type is EventType.SUMMARY:
            conv.summary = event
        elif event.type is EventType.SYSTEM:
            conv.pinned.append(event)
        else:
            conv.active.append(event)
    conv.index([*conv.pinned, *conv.active])
    # archived tool events stay reachable by call id (late results, fetch_tool_result)
    for event in conv.archive:
        if event.type in _TOOL_TYPES and event.seq is not None and event.tool_call_id:
            conv.tools[event.seq] = held[event.seq]
            conv.calls.setdefault(event.tool_call_id, []).append(event.seq)
    for calls in conv.calls.values():
        calls.sort()


def _fill_metadata(conv: _Conversation, metadata: Mapping[str, Any]) -> None:
    """The lifecycle fields of a dump (a dump from a store that keeps none leaves the new
    conversation's defaults)."""
    if metadata.get("title") is not None:
        conv.title = str(metadata["title"])
    conv.tags = tuple(sorted(set(metadata.get("tags") or ())))
    conv.values = dict(metadata.get("values") or {})
    for name in ("created_at", "last_active_at"):
        if metadata.get(name):
            setattr(conv, name, datetime.fromisoformat(metadata[name]))


__all__ = ["dump_of", "fill"]
