"""The fork timeline of an S3 conversation (:mod:`chat_memory.backends.timeline`), as its head
keeps it: pure bookkeeping, no I/O.

The head carries a ``timeline`` object (an optional key in every head format; older
chat-memory ignores it and drops it when it rewrites the head)::

    {"from": N, "entries": [...], "segments": [[name, first, last], ...], "pins": [[seq, key], ...]}

- ``entries``: the newest entries, inline, written by the same conditional head ``PUT`` as the
  compaction or retraction they record. Past :data:`INLINE_ENTRIES` they are *spilled*: written
  with the entries of the last timeline segment while it holds fewer than
  :data:`SEGMENT_ENTRIES` (else alone) as a new immutable timeline segment
  (``t<first>-<last>-v<version>-<nonce>``, gzipped JSON, in the conversation's generation
  folder, ``If-None-Match: *``) before that same head ``PUT``, which lists it under
  ``segments`` (entry numbers ``first``..``last``, from 0) in place of the one it replaces. So a
  turn writes a bounded head, and the entries stay in order: segments first, then inline ones.
- ``pins``: the seq and pin key of each superseded pinned system event filed in the archive
  segments and not yet deleted by the archive cap, so that a compaction whose cap deletes one
  records a ``dropped_pin`` entry without reading the segments it drops.
- ``from``: the last seq when the conversation began keeping a timeline
  (``ConversationDump.timeline_from``). A head without the key was written before this code (or
  rewritten since by older chat-memory, which dropped the key and with it the entries): its
  timeline starts at its last seq, or at 0 when every seq it ever stored is still in its window
  (nothing was compacted, retracted or deleted yet), see :func:`legacy_start`.
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import SchemaError
from ..timeline import DROPPED_PIN

#: Inline entries a head holds before they are spilled into a timeline segment (about 60
#: bytes each: at most ~1 KiB of every head write).
INLINE_ENTRIES = 16
#: Entries a timeline segment gathers (spills append to the last one until it holds this
#: many: a timeline of 10,000 entries is 10 objects).
SEGMENT_ENTRIES = 1024
#: The timeline segments' format number.
TIMELINE_SEGMENT_FORMAT = 1


@dataclass(frozen=True)
class TimelineRef:
    """A spilled timeline segment: its name (relative to the generation folder) and the
    numbers of its first and last entries."""

    name: str
    first: int
    last: int

    def to_json(self) -> list[Any]:
        return [self.name, self.first, self.last]


@dataclass(frozen=True)
class HeadTimeline:
    """What the head keeps of the timeline (see the module docstring)."""

    start: int = 0
    entries: tuple[dict[str, Any], ...] = ()
    segments: tuple[TimelineRef, ...] = ()
    #: (seq, pin key) of the archived superseded pins the archive cap has not deleted yet
    pins: tuple[tuple[int, str], ...] = field(default_factory=tuple)

    @property
    def spilled(self) -> int:
        """How many entries the segments hold."""
        return self.segments[-1].last + 1 if self.segments else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.start,
            "entries": list(self.entries),
            "segments": [ref.to_json() for ref in self.segments],
            "pins": [list(pin) for pin in self.pins],
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> HeadTimeline:
        if not isinstance(doc, Mapping):
            raise SchemaError(f"{where} holds a timeline ({doc!r}) that is not a JSON object")
        return cls(
            start=int(doc.get("from", 0)),
            entries=tuple(dict(e) for e in doc.get("entries", ())),
            segments=tuple(
                TimelineRef(str(n), int(a), int(b)) for n, a, b in doc.get("segments", ())
            ),
            pins=tuple((int(s), str(k)) for s, k in doc.get("pins", ())),
        )

    def with_pins(self, pins: Iterable[tuple[int, str]]) -> HeadTimeline:
        return replace(self, pins=tuple(sorted(set(pins))))


def legacy_start(last_seq: int, window_events: int, archived: bool) -> int:
    """``timeline_from`` of a head written without a timeline: 0 when its window still holds
    every seq it stored (``window_events == last_seq``) and it has no archive, summary or
    retraction, so no state of it was ever other than a prefix of now; else its last seq."""
    return 0 if window_events == last_seq and not archived else last_seq


def timeline_segment_name(first: int, last: int, version: int) -> str:
    """A new timeline segment's name (``t`` sets it apart in listings; the nonce keeps two
    writers racing for one version apart)."""
    return f"t{first}-{last}-v{version}-{uuid.uuid4().hex[:8]}"


def encode_entries(entries: Sequence[Mapping[str, Any]]) -> bytes:
    doc = {"format": TIMELINE_SEGMENT_FORMAT, "entries": list(entries)}
    return gzip.compress(
        json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), 6, mtime=0
    )


def decode_entries(data: bytes, where: str) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    if not isinstance(doc, dict) or doc.get("format") != TIMELINE_SEGMENT_FORMAT:
        raise SchemaError(
            f"{where} is not a chat-memory timeline segment of format {TIMELINE_SEGMENT_FORMAT} "
            f"(format {doc.get('format') if isinstance(doc, dict) else None!r})"
        )
    return [dict(e) for e in doc["entries"]]


def dropped_pin(seq: int, key: str) -> dict[str, Any]:
    """The entry of a superseded pin (seq, pin key) the archive cap deleted."""
    return {"kind": DROPPED_PIN, "seq": seq, "key": key}


__all__ = [
    "INLINE_ENTRIES",
    "SEGMENT_ENTRIES",
    "HeadTimeline",
    "TimelineRef",
    "decode_entries",
    "dropped_pin",
    "encode_entries",
    "legacy_start",
    "timeline_segment_name",
]
