"""A conversation as a whole, and as it was: what a store keeps so that a past window can be
rebuilt (the *timeline*), the exact dump of a conversation that moves between stores
(:class:`ConversationDump`), and the I/O-free rebuild of a conversation at a past seq that
a fork starts from (:func:`state_at`). See docs/lifecycle.md ("Fork") and docs/moving-stores.md.

An event does not say when it was archived or retracted, so each store keeps, per
conversation, an append-only list of timeline entries (JSON objects), never trimmed:

- ``{"kind": "compaction", "head": H, "through": T, "summary": S}``: a compaction applied
  when the conversation's last seq was ``H`` (the new summary's seq when it wrote one),
  archiving every active real event with seq ≤ ``T``; ``S`` is the seq of the summary it
  put in force, or null when it kept the one in force.
- ``{"kind": "retraction", "head": H, "seqs": [...]}``: the events retracted when the last
  seq was ``H``.
- ``{"kind": "dropped_pin", "seq": P, "key": K}``: the archive cap deleted a superseded pinned
  system event (seq ``P``, pin key ``K``); a fork of a window that still showed it is refused.

Pins need no entry: which system events are in force is a function of the system events
stored so far (:func:`chat_memory.pins.superseded`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InvalidInputError
from ..events import Event, EventType
from ..lifecycle.keys import parse_scoped_key
from ..pins import pin_key
from .bookkeeping import replaced

__all__ = [
    "ConversationDump",
    "compaction_entry",
    "dropped_pin_entry",
    "retraction_entry",
    "shown_id",
    "state_at",
]

COMPACTION = "compaction"
RETRACTION = "retraction"
DROPPED_PIN = "dropped_pin"


def compaction_entry(head: int, through: int, summary: int | None) -> dict[str, Any]:
    """The timeline entry of a compaction applied at last seq ``head``."""
    return {"kind": COMPACTION, "head": head, "through": through, "summary": summary}


def retraction_entry(head: int, seqs: Iterable[int]) -> dict[str, Any]:
    """The timeline entry of a retraction made at last seq ``head``."""
    return {"kind": RETRACTION, "head": head, "seqs": sorted(seqs)}


def dropped_pin_entry(event: Event) -> dict[str, Any]:
    """The timeline entry of a superseded pin the archive cap deleted."""
    return {"kind": DROPPED_PIN, "seq": event.seq or 0, "key": pin_key(event)}


@dataclass(frozen=True)
class ConversationDump:
    """Everything a store keeps of one conversation, exactly: every stored event (window,
    summary, archive and retracted ones, each with its ``seq``, ``tokens`` and its
    ``archived``/``retracted`` flags, in seq order), the compaction records, the timeline,
    the compaction error and failure count, and the metadata (title, tags, values, scope:
    what the store's lifecycle ability keeps; opaque here). Restoring it rebuilds the same
    conversation without re-running compaction. ``version`` is informative: a store may
    number versions its own way after a restore."""

    conversation_id: str
    last_seq: int
    events: tuple[Event, ...]
    records: tuple[dict[str, Any], ...] = ()
    timeline: tuple[dict[str, Any], ...] = ()
    compaction_error: str | None = None
    compaction_failures: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    version: int = 0
    #: the last seq when the store began keeping this conversation's timeline (0: from its
    #: start); a state before it cannot be rebuilt, and a fork there is refused
    timeline_from: int = 0

    def renamed(self, conversation_id: str) -> ConversationDump:
        """The same dump under another id."""
        return replace(self, conversation_id=conversation_id)

    def counts(self) -> dict[str, int]:
        """Counts by kind: events, archived, retracted, summaries, records, timeline entries."""
        return {
            "events": len(self.events),
            "archived": sum(1 for e in self.events if e.archived),
            "retracted": sum(1 for e in self.events if e.retracted),
            "summaries": sum(1 for e in self.events if e.type is EventType.SUMMARY),
            "records": len(self.records),
            "timeline": len(self.timeline),
        }

    def checksum(self) -> str:
        """SHA-256 of the content, independent of the store and of the id it lives under:
        events as stored (envelopes with their flags), records, timeline, the compaction
        error, metadata and last seq. Two stores holding the same conversation agree."""
        digest = hashlib.sha256()
        head = {
            "last_seq": self.last_seq,
            "compaction_error": self.compaction_error,
            "compaction_failures": self.compaction_failures,
            "metadata": dict(self.metadata),
            "timeline_from": self.timeline_from,
        }
        for part in (head, *self.records, *self.timeline):
            digest.update(_canonical(part).encode())
            digest.update(b"\n")
        for event in self.events:
            digest.update(_canonical(event.model_dump(mode="json")).encode())
            digest.update(b"\n")
        return digest.hexdigest()


def shown_id(key: str) -> str:
    """The id a message names: a scoped key's bare conversation id (the caller's own name for
    it; the scope is the caller's), any other key as is."""
    return parse_scoped_key(key)[1]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def state_at(dump: ConversationDump, at: int, new_id: str) -> ConversationDump:
    """The conversation as it was at the last moment its highest seq was ``at`` (after the
    event with seq ``at`` was stored and whatever followed before the next one: the
    compaction of the same ``add``, retractions, a ``compact()``), as a new conversation
    ``new_id`` whose window is exactly that window and whose history is the history then.

    Raises :class:`InvalidInputError` naming ``at`` when it is out of range, or when the
    archive cap has since deleted an event that window showed (it cannot be rebuilt)."""
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= dump.last_seq:
        raise InvalidInputError(
            f"at ({at!r}) must be a seq of conversation {shown_id(dump.conversation_id)!r}: "
            f"a whole number from 0 to {dump.last_seq}"
        )
    if at == dump.last_seq:
        return replace(dump, conversation_id=new_id, version=1)
    if at < dump.timeline_from:
        raise InvalidInputError(
            f"at ({at}) is before conversation {shown_id(dump.conversation_id)!r} kept the "
            f"timeline a fork needs (from seq {dump.timeline_from}); fork at a later seq"
        )
    entries = [e for e in dump.timeline if e["kind"] != DROPPED_PIN and e["head"] <= at]
    compactions = [e for e in entries if e["kind"] == COMPACTION]
    through = max((e["through"] for e in compactions), default=0)
    summaries = [e["summary"] for e in compactions if e["summary"] is not None]
    summary_seq = summaries[-1] if summaries else None
    retracted = {s for e in entries if e["kind"] == RETRACTION for s in e["seqs"]}
    by_seq = {e.seq or 0: e for e in dump.events if (e.seq or 0) <= at}
    pins = _pins_in_force(by_seq.values(), dump.timeline, at)
    _check_rebuildable(dump, at, by_seq, through, summary_seq, pins)
    events = [
        _as_then(event, seq, retracted, summary_seq, pins, through)
        for seq, event in sorted(by_seq.items())
    ]
    records = tuple(r for r in dump.records if int(r.get("archived_through_seq", 0)) <= through)
    timeline = tuple(
        e for e in dump.timeline if (e["seq"] if e["kind"] == DROPPED_PIN else e["head"]) <= at
    )
    return ConversationDump(
        conversation_id=new_id,
        last_seq=at,
        events=tuple(events),
        records=records,
        timeline=timeline,
        metadata=dict(dump.metadata),
        version=1,
        timeline_from=dump.timeline_from,
    )


def _pins_in_force(
    stored: Iterable[Event], timeline: Sequence[dict[str, Any]], at: int
) -> set[int]:
    """The seqs of the pinned system events in force at ``at`` (newest per pin key), those
    the archive cap dropped since included (so that the check below can refuse them)."""
    newest: dict[str, int] = {}
    known = [(e.seq or 0, pin_key(e)) for e in stored if e.type is EventType.SYSTEM]
    known += [(e["seq"], e["key"]) for e in timeline if e["kind"] == DROPPED_PIN and e["seq"] <= at]
    for seq, key in sorted(known):
        newest[key] = seq
    return set(newest.values())


def _check_rebuildable(
    dump: ConversationDump,
    at: int,
    by_seq: Mapping[int, Event],
    through: int,
    summary_seq: int | None,
    pins: set[int],
) -> None:
    # every seq up to `at` was stored, and retracted events are kept: one missing now is an
    # archived event (or a superseded pin) the archive cap deleted. The window at `at` needed
    # it if it was active then (after `through`), the summary then, or a pin in force then.
    missing = [s for s in range(1, at + 1) if s not in by_seq]
    needed = [s for s in missing if s > through or s == summary_seq or s in pins]
    if needed:
        raise InvalidInputError(
            f"at ({at}) is too far back in conversation {shown_id(dump.conversation_id)!r}: the archive "
            f"cap (max_archived_events) has deleted events its window showed (seq {needed[0]}"
            f"{'…' + str(needed[-1]) if len(needed) > 1 else ''}); fork at a later seq"
        )


def _as_then(
    event: Event,
    seq: int,
    retracted: set[int],
    summary_seq: int | None,
    pins: set[int],
    through: int,
) -> Event:
    if seq in retracted:
        return replaced(event, {"archived": False, "retracted": True})
    if event.type is EventType.SUMMARY:
        archived = seq != summary_seq
    elif event.type is EventType.SYSTEM:
        archived = seq not in pins
    else:
        archived = seq <= through
    return replaced(event, {"archived": archived, "retracted": False})
