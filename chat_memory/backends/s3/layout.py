"""How a conversation is laid out in a bucket, and the pure bookkeeping of its archive.

Under the store's prefix::

    heads/<conversation key>                                  one small JSON object per conversation
    archive/<conversation key>/<generation>/<first>-<last>-v<version>-<nonce>   immutable segments

The head holds everything a turn needs (version, last seq, pinned events, the summary, the
active window, the compaction error and the count of failed compactions since the last
applied one; a head without the count reads as 0) plus the archive manifest: the segment keys in seq
order, with their seq ranges and counts. Segments are written once and never modified;
compaction writes new ones and swaps the manifest in the head with a conditional write.

A long active window does not live in the head: once more than :data:`TAIL_EVENTS` active
events pile up, the oldest are sealed into immutable *window segments* (same object format
as archive segments, under the same generation folder, names starting with ``w``), and the
head keeps only their manifest and its *tail* (the newest active events). Every segment's
manifest entry carries a Bloom filter of its event ids and ``tool_call_id`` values, so an append
or a tool-pair check finds a retried event or a tool call by fetching the one segment that
may hold it instead of reading the window. A head with window segments is format 2; one
without is still written as format 1 (readable by older chat-memory).

Retracted events (``S3Store.retract``) are kept in immutable *retracted segments* (names
starting with ``r``, same folder) that the head lists; the window and archive segments that
held them are rewritten without them. A head listing retracted segments is format 3, which
older chat-memory refuses (it would show retracted events again, or lose them).

Heads and segments carry a ``format`` number. A head in an older format is upgraded when it
is read (:data:`HEAD_FORMAT`'s migrations) and stored in the current one by the
conversation's next write; segments, written once, are upgraded each time they are read.
A newer format than this code knows is a :class:`SchemaError`.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import SchemaError
from ...events import Event, EventType, Window
from ...lifecycle.keys import guard_name, scope_of_key
from ...search import search_text
from ..base import Snapshot
from ..failures import stored_data
from ..migrations import Migration, StoredFormat
from .timeline import HeadTimeline, legacy_start


def _add_window(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "format": 2, "window": doc.get("window", [])}


def _add_retracted(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "format": 3, "retracted": doc.get("retracted", [])}


#: The head object's format and the migrations of its JSON document (dict -> dict).
HEAD_FORMAT: StoredFormat[dict[str, Any]] = StoredFormat(
    "S3 head object",
    current=3,
    migrations=(
        Migration(1, "window segments beside the head's tail", _add_window),
        Migration(2, "retracted segments", _add_retracted),
    ),
)
#: Default of ``S3Store(tail_events=…)``: active events the head holds before the oldest are
#: sealed into window segments of this many events each (the head then holds at most this many).
TAIL_EVENTS = 256
#: Bloom filter bits per key (an event id, or a ``tool_call_id``) and probes per key: a
#: false positive (one useless segment ``GET``) about once in 1,700 look-ups per segment.
BLOOM_BITS_PER_KEY = 16
BLOOM_PROBES = 8
#: The archive segments' format and the migrations of their JSON document (dict -> dict).
SEGMENT_FORMAT: StoredFormat[dict[str, Any]] = StoredFormat("S3 archive segment", current=1)
#: Longer encoded ids are replaced by a hash (the head keeps the id itself); S3 keys are
#: limited to 1024 bytes and the prefix needs room too.
MAX_ENCODED_ID = 200


def conversation_key(conversation_id: str) -> str:
    """A key segment for the id that no id can forge: ``b`` + unpadded urlsafe base64 of
    its UTF-8, or ``h`` + its SHA-256 when that would be too long. Neither contains ``/``."""
    raw = conversation_id.encode("utf-8")
    encoded = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) <= MAX_ENCODED_ID:
        return "b" + encoded
    return "h" + hashlib.sha256(raw).hexdigest()


def conversation_id_of(key: str) -> str | None:
    """The id a key segment encodes, or None when it is a hash (read the head instead)."""
    if not key.startswith("b"):
        return None
    encoded = key[1:]
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")


def normalize_prefix(prefix: str) -> str:
    """``a/b`` → ``a/b/``; an empty prefix stays empty."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


@dataclass(frozen=True)
class Layout:
    """Key names under one prefix."""

    prefix: str

    @property
    def heads(self) -> str:
        return f"{self.prefix}heads/"

    def head(self, conversation_id: str) -> str:
        """A bare id's head is ``heads/<key>``; a scoped conversation's lives under its scope's
        own prefix (:meth:`scope_heads`), so listing a scope lists nothing else."""
        scope = scope_of_key(conversation_id)
        if scope:
            return self.scope_heads(scope) + conversation_key(conversation_id)
        return self.heads + conversation_key(conversation_id)

    @property
    def scopes(self) -> str:
        return f"{self.prefix}scopes/"

    def scope_heads(self, scope: str) -> str:
        """Where the heads of a scope (a scope prefix; ``""``: the bare ids) are stored."""
        if not scope:
            return self.heads
        return f"{self.scopes}{conversation_key(scope)}/heads/"

    def archive(self, conversation_id: str) -> str:
        """Every generation's segments of the conversation."""
        return f"{self.prefix}archive/{conversation_key(conversation_id)}/"

    @property
    def namespaces(self) -> str:
        """Where long-term memory namespaces live (:mod:`chat_memory.longterm.s3`)."""
        return f"{self.prefix}memory/"

    def namespace_root(self, namespace: str) -> str:
        """A namespace's folder: ``memory/<digest>/``, or, for a user's namespace, under its
        scope's own folder (:meth:`scope_namespaces`), so that an erasure finds it by listing."""
        digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()
        scope = scope_of_key(namespace)
        if scope:
            return f"{self.scope_namespaces(scope)}{digest}/"
        return f"{self.namespaces}{digest}/"

    def scope_namespaces(self, scope: str) -> str:
        """The folder of a scope's long-term namespaces (a scope prefix, not ``""``)."""
        return f"{self.namespaces}scopes/{conversation_key(scope)}/"

    def guard(self, key_or_scope: str) -> str:
        """The erasure guard of a key or scope prefix (named by digest: no user id in it)."""
        return f"{self.prefix}guards/{guard_name(key_or_scope)}"

    def segments(self, conversation_id: str, generation: str) -> str:
        return f"{self.prefix}archive/{conversation_key(conversation_id)}/{generation}/"

    def segment_key(self, head: Head, ref: SegmentRef) -> str:
        return self.segments(head.conversation_id, head.generation) + ref.name


def segment_name(first_seq: int, last_seq: int, version: int) -> str:
    """A new segment's name (relative to its conversation's generation folder); the nonce
    keeps two writers racing for the same version from ever sharing a key."""
    return f"{first_seq}-{last_seq}-v{version}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class SegmentRef:
    """One archive segment as the manifest lists it (its name is relative to the folder of
    the conversation's generation, which keeps the head small). The first ``skip`` events of
    the object were dropped by the archive cap (cheaper than rewriting the object)."""

    name: str
    first_seq: int
    last_seq: int
    count: int
    skip: int = 0
    #: base64 Bloom filter of the segment's keys (:func:`bloom_keys`; an archive segment's
    #: holds only call ids, empty when it has no tool events); None: unknown (listed by an
    #: older chat-memory), so any look-up must fetch it
    bloom: str | None = field(default=None, compare=False)

    @property
    def live(self) -> int:
        """How many of the segment's events still count (as archived, or as active for a
        window segment whose first events a compaction archived)."""
        return self.count - self.skip

    @functools.cached_property
    def _bits(self) -> bytes | None:
        return None if self.bloom is None else base64.b64decode(self.bloom)

    def may_hold(self, key: str) -> bool:
        """False only when the segment surely holds no event with ``key`` (:func:`bloom_keys`)."""
        bits = self._bits
        if bits is None:
            return True
        if not bits:  # a filter of no keys
            return False
        size = len(bits) * 8
        return all(bits[(p % size) >> 3] >> ((p % size) & 7) & 1 for p in _probes(key))

    def to_json(self) -> list[Any]:
        return [self.name, self.first_seq, self.last_seq, self.count, self.skip]

    @classmethod
    def from_json(cls, item: list[Any], bloom: str | None = None) -> SegmentRef:
        name, first_seq, last_seq, count, skip = item[:5]
        return cls(
            name=name, first_seq=first_seq, last_seq=last_seq, count=count, skip=skip, bloom=bloom
        )


def id_key(event_id: str) -> str:
    return "i:" + event_id


def call_key(tool_call_id: str) -> str:
    return "c:" + tool_call_id


def bloom_keys(event: Event) -> list[str]:
    """What a segment's Bloom filter holds for ``event``: its id, and the ``tool_call_id`` of
    a tool call or result."""
    keys = [id_key(event.id)]
    if (
        event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT)
        and event.tool_call_id is not None
    ):
        keys.append(call_key(event.tool_call_id))
    return keys


def _probes(key: str) -> list[int]:
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=4 * BLOOM_PROBES).digest()
    return [int.from_bytes(digest[i : i + 4], "big") for i in range(0, 4 * BLOOM_PROBES, 4)]


def bloom_of(events: Sequence[Event], calls_only: bool = False) -> str:
    """The base64 Bloom filter of the events' keys (:func:`bloom_keys`; only the call ids when
    ``calls_only``: archived events are looked up by call id, never by id). Empty when there
    are no keys."""
    keys = [
        key
        for event in events
        for key in bloom_keys(event)
        if not calls_only or key.startswith("c:")
    ]
    if not keys:
        return ""
    size = max(64, -(-BLOOM_BITS_PER_KEY * len(keys) // 64) * 64)
    bits = bytearray(size // 8)
    for key in keys:
        for p in _probes(key):
            bits[(p % size) >> 3] |= 1 << ((p % size) & 7)
    return base64.b64encode(bytes(bits)).decode("ascii")


def window_segment_name(first_seq: int, last_seq: int, version: int) -> str:
    """A new window segment's name (``w`` sets it apart from archive segments in listings)."""
    return "w" + segment_name(first_seq, last_seq, version)


def _dump(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json")


@dataclass(frozen=True)
class Head:
    """The per-conversation head object."""

    conversation_id: str
    generation: str
    version: int = 0
    last_seq: int = 0
    pinned: tuple[Event, ...] = ()
    summary: Event | None = None
    active: tuple[Event, ...] = ()
    compaction_error: str | None = None
    #: failed compactions since the last applied one (see ``Snapshot.compaction_failures``)
    compaction_failures: int = 0
    segments: tuple[SegmentRef, ...] = field(default_factory=tuple)
    #: pinned events a newer one with the same pin key superseded: archived, kept here (they
    #: are few, and moving one into the seq-ordered segments would rewrite the whole archive)
    unpinned: tuple[Event, ...] = ()
    #: ids of the last few writes that stored this head (see ``S3Store._write_head``)
    writes: tuple[str, ...] = ()
    #: the newest compaction records, oldest first (S3Store.compaction_records_kept of them)
    compactions: tuple[dict[str, Any], ...] = ()
    #: sealed window segments, in seq order: the active events before ``active`` (the tail)
    window: tuple[SegmentRef, ...] = field(default_factory=tuple)
    #: retracted segments: the events taken back by ``retract`` (each segment in seq order)
    retracted: tuple[SegmentRef, ...] = field(default_factory=tuple)
    #: the lifecycle metadata (docs/lifecycle.md): ``created_at`` and ``last_active_at`` (ISO
    #: UTC, stamped by every head write), ``title``, ``tags`` and free ``values``; an optional
    #: ``meta`` key in every format (older chat-memory ignores it)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: the fork timeline (:mod:`.timeline`): an optional ``timeline`` key in every format
    timeline: HeadTimeline = field(default_factory=HeadTimeline, compare=False)

    @classmethod
    def new(cls, conversation_id: str) -> Head:
        """A conversation not stored yet; its generation scopes its segment keys, so that
        segments of a cleared conversation can never mix with those of its successor."""
        return cls(conversation_id=conversation_id, generation=uuid.uuid4().hex)

    @property
    def archived_count(self) -> int:
        return sum(ref.live for ref in self.segments) + len(self.unpinned)

    def snapshot(self, window_events: Sequence[Event] = ()) -> Snapshot:
        """The snapshot, given the live events of the window segments (read by the caller)."""
        return Snapshot(
            conversation_id=self.conversation_id,
            version=self.version,
            last_seq=self.last_seq,
            window=Window(
                pinned=self.pinned, summary=self.summary, active=(*window_events, *self.active)
            ),
            archived_count=self.archived_count,
            compaction_error=self.compaction_error,
            compaction_failures=self.compaction_failures,
        )

    def evolve(self, **changes: Any) -> Head:
        return replace(self, **changes)

    def to_bytes(self) -> bytes:
        # without retractions, the format 2 older chat-memory reads; without window segments
        # either, format 1 (it writes it back without the Bloom filters, which only makes
        # look-ups fetch more); with retractions, older code must refuse the head
        fmt = HEAD_FORMAT.current if self.retracted else 2 if self.window else 1
        doc = {
            "format": fmt,
            "conversation_id": self.conversation_id,
            "generation": self.generation,
            "version": self.version,
            "last_seq": self.last_seq,
            "compaction_error": self.compaction_error,
            "pinned": [_dump(e) for e in self.pinned],
            "summary": _dump(self.summary) if self.summary is not None else None,
            "active": [_dump(e) for e in self.active],
            "archive": [ref.to_json() for ref in self.segments],
            "unpinned": [_dump(e) for e in self.unpinned],
            "writes": list(self.writes),
            "compactions": list(self.compactions),
            "archive_blooms": [ref.bloom for ref in self.segments],
        }
        if self.meta:
            doc["meta"] = dict(self.meta)
        doc["timeline"] = self.timeline.to_json()
        if self.compaction_failures:
            # an optional key in every format: read as 0 when missing; older code ignores it
            doc["compaction_failures"] = self.compaction_failures
        if fmt >= 2:
            doc["window"] = [[*ref.to_json(), ref.bloom] for ref in self.window]
        if fmt >= 3:
            doc["retracted"] = [ref.to_json() for ref in self.retracted]
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "S3 head object") -> Head:
        """Parse a stored head, upgrading an older format (``where`` names it in errors)."""
        with stored_data(where):
            doc = _document(json.loads(data), HEAD_FORMAT, where)
            return cls(
                conversation_id=doc["conversation_id"],
                generation=doc["generation"],
                version=doc["version"],
                last_seq=doc["last_seq"],
                compaction_error=doc["compaction_error"],
                compaction_failures=_count(doc.get("compaction_failures", 0), where),
                pinned=tuple(Event.model_validate(e) for e in doc["pinned"]),
                summary=Event.model_validate(doc["summary"])
                if doc["summary"] is not None
                else None,
                active=tuple(Event.model_validate(e) for e in doc["active"]),
                segments=_refs(doc["archive"], doc.get("archive_blooms")),
                window=tuple(SegmentRef.from_json(ref, ref[5]) for ref in doc["window"]),
                retracted=tuple(SegmentRef.from_json(ref) for ref in doc["retracted"]),
                writes=tuple(doc.get("writes", ())),
                unpinned=tuple(Event.model_validate(e) for e in doc.get("unpinned", ())),
                compactions=tuple(doc.get("compactions", ())),
                meta=doc.get("meta") or {},
                timeline=_timeline(doc, where),
            )


def _timeline(doc: dict[str, Any], where: str) -> HeadTimeline:
    """The head's timeline; for a head written without one, where it starts (:func:`legacy_start`)."""
    if "timeline" in doc:
        return HeadTimeline.from_json(doc["timeline"], where)
    live_window = sum(ref[3] - ref[4] for ref in doc["window"])
    held = len(doc["pinned"]) + live_window + len(doc["active"])
    archived = bool(doc["archive"] or doc.get("unpinned") or doc["summary"] or doc["retracted"])
    return HeadTimeline(start=legacy_start(doc["last_seq"], held, archived))


def _count(value: Any, where: str) -> int:
    """A head's ``compaction_failures``: a whole number, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(
            f"{where} holds compaction_failures ({value!r}), which is not a whole number, 0 or more"
        )
    return value


def _refs(items: list[Any], blooms: Any) -> tuple[SegmentRef, ...]:
    # blooms written beside a manifest that an older chat-memory has rewritten since are gone
    # with it (it drops the key): a missing or misaligned list means "unknown"
    if not isinstance(blooms, list) or len(blooms) != len(items):
        blooms = [None] * len(items)
    return tuple(SegmentRef.from_json(item, bloom) for item, bloom in zip(items, blooms))


@dataclass(frozen=True)
class Segment:
    """The content of an archive segment: events as stored (JSON objects, seq order) and,
    aligned with them, the folded text search matches on (None: never searched)."""

    events: list[dict[str, Any]]
    text: list[str | None]

    @classmethod
    def of(cls, events: Sequence[Event]) -> Segment:
        return cls(events=[_dump(e) for e in events], text=[search_text(e) for e in events])

    def to_bytes(self) -> bytes:
        """Gzipped JSON: segments are written once and read whole, and chat text shrinks
        several times, so compaction sends and search fetches a fraction of the bytes."""
        doc = {"format": SEGMENT_FORMAT.current, "events": self.events, "text": self.text}
        return gzip.compress(
            json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), 6, mtime=0
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "S3 archive segment") -> Segment:
        """Parse a stored segment, upgrading an older format (``where`` names it in errors)."""
        with stored_data(where):
            doc = _document(
                json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data),
                SEGMENT_FORMAT,
                where,
            )
            return cls(events=doc["events"], text=doc["text"])

    def live_events(self, skip: int) -> list[Event]:
        return [Event.model_validate(raw) for raw in self.events[skip:]]


def _document(doc: Any, stored: StoredFormat[dict[str, Any]], where: str) -> dict[str, Any]:
    """A stored JSON object brought up to the current format."""
    if not isinstance(doc, dict) or "format" not in doc:
        raise SchemaError(
            f"{where} is not a chat-memory {stored.name} (a JSON object with a format field)"
        )
    return stored.upgrade(doc, doc["format"], where)


# -- archive bookkeeping (pure) ------------------------------------------------------------


def merge_start(
    segments: Sequence[SegmentRef], batch_first_seq: int, batch_count: int, segment_events: int
) -> int:
    """Index of the first trailing segment to rewrite together with a new batch.

    Trailing segments are folded in like the carries of a binary counter: while the last one
    is no bigger than what is being written and is not full yet (or the sum still fits in
    ``segment_events``). Small compactions thus build segments of doubling size instead of
    one object each, so an archived event is rewritten about log2(segment_events / batch)
    times, never once per compaction, and a large batch tops up a partial segment before it
    is cut into full ones. Each rewrite is bounded by ``segment_events``, whatever the size
    of the archive. A trailing segment that reaches past the batch's first seq is always
    folded in (an archived summary can be newer than events archived after it), which keeps
    the segments in seq order without overlaps."""
    start, size = len(segments), batch_count
    while start > 0:
        ref = segments[start - 1]
        overlaps = ref.last_seq > batch_first_seq
        fits = ref.live <= size and (ref.live + size <= segment_events or ref.live < segment_events)
        if not (overlaps or fits):
            break
        size += ref.live
        start -= 1
    return start


def trim(
    kept: Sequence[SegmentRef], merged: Sequence[Event], cap: int | None
) -> tuple[list[SegmentRef], list[SegmentRef], list[Event]]:
    """Apply the archive cap exactly, oldest first: drop whole segments, then skip the first
    events of the next one, then cut the front of the events about to be written.
    Returns (segments kept, segments dropped, events to write)."""
    excess = sum(ref.live for ref in kept) + len(merged) - cap if cap is not None else 0
    survivors: list[SegmentRef] = []
    dropped: list[SegmentRef] = []
    for ref in kept:
        if excess >= ref.live > 0 or ref.live == 0:
            excess -= ref.live
            dropped.append(ref)
        elif excess > 0:
            survivors.append(replace(ref, skip=ref.skip + excess))
            excess = 0
        else:
            survivors.append(ref)
    return survivors, dropped, list(merged[max(excess, 0) :])


def chunks(events: Sequence[Event], size: int) -> Iterator[list[Event]]:
    """Consecutive slices of at most ``size`` events."""
    for start in range(0, len(events), size):
        yield list(events[start : start + size])
