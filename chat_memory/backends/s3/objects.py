"""The reads and writes of a conversation's objects in the bucket, which :class:`~.store.S3Store`
is built on: the head, stored only by conditional ``PutObject`` (``If-Match`` its ETag, or
``If-None-Match: *`` to create it), with the write ids that tell a retried PUT's 412 from a
lost race; the immutable archive and window segments (read concurrently, written once,
deleted best-effort), the sealing of the head's overflowing tail into window segments
(:meth:`_sealed`, :meth:`_commit`); the look-ups by id and call id through the segments'
Bloom filters; and a consistent read of a head with its segments (:meth:`_consistently`).
"""

from __future__ import annotations

import itertools
import json
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar

from chat_memory.backoff import Backoff

from ...errors import ConcurrencyError, StorageError
from ...events import Event, EventType
from ...lifecycle.keys import scope_of_key
from ..bookkeeping import archived_copy, tool_events
from ..failures import stored_data
from .cache import HeadCache
from .client import is_conflict, is_missing, was_retried
from .layout import (
    Head,
    Layout,
    Segment,
    SegmentRef,
    bloom_of,
    call_key,
    chunks,
    id_key,
    window_segment_name,
)
from .timeline import (
    INLINE_ENTRIES,
    SEGMENT_ENTRIES,
    TimelineRef,
    decode_entries,
    encode_entries,
    timeline_segment_name,
)

T = TypeVar("T")

#: How often, at least, a read re-reads the head when a segment it lists was removed
#: meanwhile by a concurrent compaction...
READ_ATTEMPTS = 8
#: ... and for how many seconds, at least, it keeps trying: a read that takes longer than the
#: time between two compactions (a loaded machine, a conversation compacting at every add)
#: otherwise spends its attempts in a fraction of a second and fails while the writer is
#: still going, where a little patience finds a gap.
READ_PATIENCE = 5.0
#: how many write ids a head remembers; more than the writers that can race one retry
RECENT_WRITES = 16
#: Past this many ids, a look-up reads every segment instead of testing each Bloom filter.
LOOKUP_LIMIT = 64
_TOOL_TYPES = frozenset({EventType.TOOL_CALL.value, EventType.TOOL_RESULT.value})


def stamped(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with ``last_active_at`` set to now (and ``created_at`` on a first write)."""
    moment = datetime.now(timezone.utc).isoformat()
    return {"created_at": moment, **meta, "last_active_at": moment}


class SegmentGone(Exception):
    """A segment listed by the head we read no longer exists (a newer head dropped it)."""


class ConversationObjects:
    """The object layer of :class:`~.store.S3Store` (a base class: the store sets these
    attributes in its ``__init__``)."""

    client: Any
    bucket: str
    layout: Layout
    backoff: Backoff
    read_workers: int
    tail_events: int
    _heads: HeadCache

    def _read_head(self, cid: str) -> tuple[Head, str] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.layout.head(cid))
        except Exception as exc:
            if is_missing(exc):
                self._heads.drop(cid)
                return None
            raise
        head = Head.from_bytes(response["Body"].read(), f"S3 head object {self.layout.head(cid)!r}")
        if head.conversation_id != cid:
            raise StorageError(
                f"S3 head {self.layout.head(cid)!r} belongs to {head.conversation_id!r}, not {cid!r}"
            )
        self._heads.put(cid, head, response.get("ETag"))
        return head, response["ETag"]

    def _write_head(self, head: Head, etag: str | None, stamp: bool = True) -> bool:
        """Conditionally store the head; False when another writer changed (or deleted) it.
        ``stamp``: set ``last_active_at`` (a restore keeps the dump's).

        Each write adds its own id to the head's ``writes``: when botocore retried the PUT
        (a 5xx or a dropped connection after the server had stored it), the retry's 412 is
        our own first attempt's doing, and the id tells that apart from a lost race, so
        the caller neither appends its events twice nor deletes segments the head uses."""
        write_id = uuid.uuid4().hex[:16]
        head = head.evolve(
            writes=(*head.writes, write_id)[-RECENT_WRITES:],
            meta=stamped(head.meta) if stamp else head.meta,
        )
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        cid = head.conversation_id
        try:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=self.layout.head(cid),
                Body=head.to_bytes(),
                ContentType="application/json",
                **condition,
            )
        except Exception as exc:
            self._heads.drop(cid)
            # If-Match on a head deleted meanwhile (clear) answers 404
            if is_conflict(exc) or (etag is not None and is_missing(exc)):
                stored = was_retried(exc) and self._stored_by(cid, write_id)
                if stored and etag is None:  # our retried create did land
                    self._refuse_if_guarded(head)
                return stored
            raise
        self._heads.put(cid, head, response.get("ETag"))
        if etag is None:
            self._refuse_if_guarded(head)
        return True

    def _refuse_if_guarded(self, head: Head) -> None:
        """After creating a head: when an erasure guard of its key or scope is live, delete
        what was just written and raise :class:`ConcurrencyError`. Checked after the create,
        not before, so that an erasure either lists this head (it was stored before the
        erasure listed the scope) or this check sees its guard (written before that listing)."""
        cid = head.conversation_id
        scope = scope_of_key(cid)
        for guarded in (cid, scope) if scope else (cid,):
            until = self._guard_until(self.layout.guard(guarded))
            if until is not None and until > time.time():
                self._heads.drop(cid)
                self.client.delete_object(Bucket=self.bucket, Key=self.layout.head(cid))
                self._delete_prefix(self.layout.segments(cid, head.generation))
                raise ConcurrencyError(
                    f"conversation {cid[:80]!r} is being erased (forget); writes that would "
                    f"create it again are refused for {until - time.time():.0f} more seconds"
                )

    def _guard_until(self, key: str) -> float | None:
        """The deadline (epoch seconds) of the erasure guard at ``key``, None when there is none."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        with stored_data(f"S3 erasure guard {key!r}"):
            return float(json.loads(body)["until"])

    def _keys_under(self, prefix: str) -> list[str]:
        return [
            obj["Key"]
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for obj in page.get("Contents", [])
        ]

    def _delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; how many there were."""
        keys = self._keys_under(prefix)
        self._delete_quietly(keys)
        return len(keys)

    def _stored_by(self, cid: str, write_id: str) -> bool:
        """True when the stored head is, or descends from, the write ``write_id``."""
        found = self._read_head(cid)
        return found is not None and write_id in found[0].writes

    def _read_segment(self, key: str) -> Segment:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                raise SegmentGone(key) from exc
            raise
        return Segment.from_bytes(response["Body"].read(), f"S3 archive segment {key!r}")

    def _read_segments(self, head: Head, refs: Sequence[SegmentRef]) -> list[Segment]:
        keys = [self.layout.segment_key(head, ref) for ref in refs]
        if len(keys) <= 1 or self.read_workers <= 1:
            return [self._read_segment(key) for key in keys]
        with ThreadPoolExecutor(max_workers=min(self.read_workers, len(keys))) as pool:
            return list(pool.map(self._read_segment, keys))

    def _write_segment(self, key: str, events: Sequence[Event]) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=Segment.of(events).to_bytes(),
            ContentType="application/gzip",
            IfNoneMatch="*",
        )

    def _delete_quietly(self, keys: Sequence[str]) -> None:
        """Best-effort removal of segments nothing references any more."""
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except Exception:
                pass

    def racing_reads(self) -> Iterator[float]:
        """The delays between the attempts of a read that compactions keep racing: the
        store's backoff, at least :data:`READ_ATTEMPTS` of them and for at least
        :data:`READ_PATIENCE` seconds from the first (then at most its cap each, with jitter)."""
        started = time.monotonic()
        backoff = self.backoff
        later = (random.uniform(0, backoff.cap) for _ in itertools.count())
        for attempt, delay in enumerate(itertools.chain(backoff.delays(), later)):
            if attempt >= READ_ATTEMPTS and time.monotonic() - started >= READ_PATIENCE:
                return
            yield delay

    def _consistently(self, cid: str, read: Callable[[Head], T]) -> T:
        """``read`` of a fresh head (a new one when the conversation is not stored), again
        with a newer head when a segment it fetches was removed meanwhile by a concurrent
        compaction or seal (:class:`SegmentGone`)."""
        for delay in self.racing_reads():
            found = self._read_head(cid)
            try:
                return read(found[0] if found else Head.new(cid))
            except SegmentGone:
                time.sleep(delay)
        raise ConcurrencyError(
            f"reading the archive of conversation {cid!r} kept racing with compactions"
        )

    def _with_archive(self, cid: str, read: Callable[[Head, list[Segment], list[Event]], T]) -> T:
        """Read the head, its archive segments and its window's events, consistently."""

        def everything(head: Head) -> T:
            segments = self._read_segments(head, (*head.segments, *head.window))
            archive, window = segments[: len(head.segments)], segments[len(head.segments) :]
            events = [e for ref, seg in zip(head.window, window) for e in seg.live_events(ref.skip)]
            return read(head, archive, events)

        return self._consistently(cid, everything)

    def _read_window_parts(self, head: Head) -> list[list[Event]]:
        """The live events of each of the head's window segments (raises :class:`SegmentGone`)."""
        return [
            seg.live_events(ref.skip)
            for ref, seg in zip(head.window, self._read_segments(head, head.window))
        ]

    def _read_window(self, head: Head) -> list[Event]:
        """The active events of the window segments, in seq order (the head holds the rest)."""
        return [e for part in self._read_window_parts(head) for e in part]

    def _sealed(self, head: Head, written: list[str]) -> Head:
        """``head`` with its oldest active events sealed into new window segments when it
        holds more than ``tail_events`` of them, in segments of that many (their keys are added
        to ``written`` as they are stored, for the caller to delete should its head write lose)."""
        size = self.tail_events
        if len(head.active) <= size:
            return head
        cut = len(head.active) // size * size
        refs: list[SegmentRef] = []
        jobs: list[tuple[str, list[Event]]] = []
        for chunk in chunks(head.active[:cut], size):
            first, last = chunk[0].seq or 0, chunk[-1].seq or 0
            ref = SegmentRef(
                window_segment_name(first, last, head.version),
                first,
                last,
                len(chunk),
                bloom=bloom_of(chunk),
            )
            key = self.layout.segment_key(head, ref)
            written.append(key)
            jobs.append((key, chunk))
            refs.append(ref)
        if len(jobs) == 1 or self.read_workers <= 1:
            for key, chunk in jobs:
                self._write_segment(key, chunk)
        else:
            with ThreadPoolExecutor(max_workers=min(self.read_workers, len(jobs))) as pool:
                list(pool.map(lambda job: self._write_segment(*job), jobs))
        return head.evolve(window=(*head.window, *refs), active=head.active[cut:])

    def _commit(self, head: Head, etag: str | None) -> bool:
        """Seal the head's overflowing tail, then store the head conditionally; False when
        another writer changed it first (the new window segments are deleted again)."""
        written: list[str] = []
        try:
            sealed = self._sealed(head, written)
        except BaseException:
            self._delete_quietly(written)
            raise
        # no cleanup when this raises: the head may have been stored, and with it the segments
        if self._write_head(sealed, etag):
            return True
        self._delete_quietly(written)
        return False

    def _recorded(
        self,
        head: Head,
        entries: Sequence[dict[str, Any]],
        version: int,
        written: list[str],
        stale: list[str],
    ) -> Head:
        """``head`` with timeline ``entries`` added (for the caller's head write to store:
        the entry and the change it records are one conditional write). Past
        :data:`~.timeline.INLINE_ENTRIES` inline entries they are spilled first: appended to
        the last timeline segment while it holds fewer than
        :data:`~.timeline.SEGMENT_ENTRIES` (rewritten as a new object), else to a new one, so
        a long timeline is a few objects. The new key is added to ``written`` (for the caller
        to delete if its head write loses), the replaced one to ``stale`` (to delete if it wins).
        Raises :class:`SegmentGone` for a stale head."""
        timeline = head.timeline
        inline = [*timeline.entries, *entries]
        if len(inline) <= INLINE_ENTRIES:
            return head.evolve(timeline=replace(timeline, entries=tuple(inline)))
        folder = self.layout.segments(head.conversation_id, head.generation)
        refs = list(timeline.segments)
        first = timeline.spilled
        if refs and refs[-1].last - refs[-1].first + 1 < SEGMENT_ENTRIES:
            joined = refs.pop()
            inline = self._timeline_segment(folder, joined) + inline
            first = joined.first
            stale.append(folder + joined.name)
        last = first + len(inline) - 1
        ref = TimelineRef(timeline_segment_name(first, last, version), first, last)
        written.append(folder + ref.name)
        self.client.put_object(
            Bucket=self.bucket,
            Key=folder + ref.name,
            Body=encode_entries(inline),
            ContentType="application/gzip",
            IfNoneMatch="*",
        )
        return head.evolve(timeline=replace(timeline, entries=(), segments=(*refs, ref)))

    def _timeline_segment(self, folder: str, ref: TimelineRef) -> list[dict[str, Any]]:
        """The entries of one timeline segment (raises :class:`SegmentGone` when it is gone)."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=folder + ref.name)
        except Exception as exc:
            if is_missing(exc):
                raise SegmentGone(folder + ref.name) from exc
            raise
        where = f"S3 timeline segment {folder + ref.name!r}"
        with stored_data(where):
            return decode_entries(body["Body"].read(), where)

    def _timeline_entries(self, head: Head) -> list[dict[str, Any]]:
        """Every timeline entry of ``head``, oldest first: its segments' (read), then its
        inline ones. Raises :class:`SegmentGone` for a stale head."""
        folder = self.layout.segments(head.conversation_id, head.generation)
        entries = [e for ref in head.timeline.segments for e in self._timeline_segment(folder, ref)]
        return [*entries, *head.timeline.entries]

    def _read_head_by_key(self, key: str) -> str | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        return Head.from_bytes(response["Body"].read(), f"S3 head object {key!r}").conversation_id

    def _window_by_id(self, head: Head, event_ids: Collection[str]) -> dict[str, Event]:
        """The pinned and active events whose id is one of ``event_ids``, by id: the head's,
        then those of the window segments whose Bloom filter may hold a missing id (all of
        them past :data:`LOOKUP_LIMIT` ids). Raises :class:`SegmentGone` for a stale head."""
        wanted = set(event_ids)
        found = {e.id: e for e in (*head.active, *head.pinned) if e.id in wanted}
        missing = wanted - found.keys()
        if not missing or not head.window:
            return found
        many = len(missing) > LOOKUP_LIMIT
        refs = [ref for ref in head.window if many or any(ref.may_hold(id_key(i)) for i in missing)]
        for ref, segment in zip(refs, self._read_segments(head, refs)):
            for raw in segment.events[ref.skip :]:
                if raw["id"] in missing:
                    found.setdefault(raw["id"], Event.model_validate(raw))
        return found

    def _tool_events(self, head: Head, tool_call_ids: Collection[str]) -> list[Event]:
        """The tool calls and results whose ``tool_call_id`` is one of ``tool_call_ids``, from
        the tail and from the window and archive segments whose Bloom filter may hold one
        (archived ones marked). Raises :class:`SegmentGone` for a stale head."""
        wanted = set(tool_call_ids)
        if not wanted:
            return []
        found = tool_events(head.active, wanted)
        many = len(wanted) > LOOKUP_LIMIT
        refs = [
            ref
            for ref in (*head.window, *head.segments)
            if many or any(ref.may_hold(call_key(c)) for c in wanted)
        ]
        archived = {ref.name for ref in head.segments}
        for ref, segment in zip(refs, self._read_segments(head, refs)):
            for raw in segment.events[ref.skip :]:
                if raw.get("tool_call_id") in wanted and raw.get("type") in _TOOL_TYPES:
                    event = Event.model_validate(raw)
                    found.append(archived_copy(event) if ref.name in archived else event)
        return found
