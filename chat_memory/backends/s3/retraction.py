"""How :class:`~.store.S3Store` retracts events: one conditional swap of the head.

Before the swap, the retracted events are written to a new immutable *retracted segment*
(``If-None-Match: *``, name starting with ``r``), and every window or archive segment that
held one of them is rewritten without them (a new object, as compaction does; a segment left
empty is just dropped from the manifest). The head then lists the new segments in place of
the old ones and the retracted segment beside the others, with the tail filtered, in one
``If-Match`` write: a writer that raced it (an append, a compaction, another retraction)
makes it lose, delete what it wrote and start again from the fresh head, so an append is
never lost and a retracted event never comes back. Rewriting the segments keeps their counts,
their Bloom filters and the folded search text exact, so every reader, the archive cap and
compaction work on them unchanged. Small retracted segments are folded together like the
archive's (a binary counter) so that many retractions keep the head small.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ...events import Event
from ..bookkeeping import retracted_copy, retraction_targets
from ..timeline import retraction_entry
from .layout import (
    Head,
    Segment,
    SegmentRef,
    bloom_of,
    call_key,
    chunks,
    id_key,
    segment_name,
    window_segment_name,
)
from .objects import LOOKUP_LIMIT, ConversationObjects, SegmentGone


def retracted_segment_name(first_seq: int, last_seq: int, version: int) -> str:
    """A new retracted segment's name (``r`` sets it apart in listings)."""
    return "r" + segment_name(first_seq, last_seq, version)


def fold_start(refs: Sequence[SegmentRef], count: int, limit: int) -> int:
    """Index of the first trailing retracted segment to rewrite with a new one of ``count``
    events: while the last is no bigger and not full (a binary counter, as the archive's
    :func:`~.layout.merge_start`), so each retracted event is rewritten about log2(limit) times."""
    start, size = len(refs), count
    while start > 0:
        ref = refs[start - 1]
        if not (ref.count <= size and (ref.count + size <= limit or ref.count < limit)):
            break
        size += ref.count
        start -= 1
    return start


class Retracting(ConversationObjects):
    """Retraction on top of the object layer (a base class of :class:`~.store.S3Store`)."""

    segment_events: int

    def _retract(self, cid: str, event_ids: Collection[str]) -> list[Event]:
        """Retract ``event_ids`` (see :meth:`~.store.S3Store.retract`), retrying lost races."""
        wanted = set(event_ids)
        if not wanted:
            return []

        def attempt() -> list[Event] | None:
            # always a fresh head: a refusal (a pinned event, a summary) must not come from a stale one
            found = self._read_head(cid)
            if found is None:
                return []
            head, etag = found
            try:
                return self._retract_from(head, etag, wanted)
            except SegmentGone:  # a stale head: a newer one rewrote or retired that segment
                return None

        return self.backoff.run(attempt, what=f"retraction in conversation {cid!r}")

    def _retract_from(self, head: Head, etag: str, wanted: set[str]) -> list[Event] | None:
        """One attempt: the retracted events (written, head swapped), [] when none is stored,
        or None when another writer changed the head first (what it wrote is deleted)."""
        read: dict[str, Segment] = {}

        def segments(refs: Sequence[SegmentRef]) -> list[Segment]:
            missing = [ref for ref in refs if ref.name not in read]
            for ref, seg in zip(missing, self._read_segments(head, missing)):
                read[ref.name] = seg
            return [read[ref.name] for ref in refs]

        summary = (head.summary,) if head.summary is not None else ()
        pool = [e for e in (*head.pinned, *head.unpinned, *summary, *head.active) if e.id in wanted]
        missing = wanted - {e.id for e in pool}
        if missing and head.window:
            many = len(missing) > LOOKUP_LIMIT
            refs = [
                ref for ref in head.window if many or any(ref.may_hold(id_key(i)) for i in missing)
            ]
            pool += [
                e
                for ref, seg in zip(refs, segments(refs))
                for e in _live(seg, ref)
                if e.id in missing
            ]
            missing -= {e.id for e in pool}
        if missing and head.segments:
            # archive filters hold call ids only (adds never look archived ids up): read it all
            pool += [
                e
                for ref, seg in zip(head.segments, segments(head.segments))
                for e in _live(seg, ref)
                if e.id in missing
            ]
        # the partners: in the tail, or in the segments whose filter may hold their call id
        calls = {e.tool_call_id for e in pool if e.tool_call_id is not None}
        pool += [e for e in head.active if e.tool_call_id in calls]
        many = len(calls) > LOOKUP_LIMIT
        refs = [
            r
            for r in (*head.window, *head.segments)
            if calls and (many or any(r.may_hold(call_key(c)) for c in calls))
        ]
        pool += [
            e
            for ref, seg in zip(refs, segments(refs))
            for e in _live(seg, ref)
            if e.tool_call_id in calls
        ]
        targets = retraction_targets(pool, wanted)  # raises for a pinned event or a summary
        if not targets:
            return []
        seqs = {e.seq for e in targets}
        version = head.version + 1
        written: list[str] = []
        retired: list[SegmentRef] = []
        stale: list[str] = []  # a timeline segment the new head replaces
        try:
            window = self._without(
                head, head.window, seqs, segments, retired, written, version, archive=False
            )
            archive = self._without(
                head, head.segments, seqs, segments, retired, written, version, archive=True
            )
            taken = [retracted_copy(e) for e in targets]
            kept_retracted = self._file_retracted(head, taken, retired, written, version)
            updated = head.evolve(
                version=version,
                active=tuple(e for e in head.active if e.seq not in seqs),
                window=tuple(window),
                segments=tuple(archive),
                retracted=tuple(kept_retracted),
            )
            # the fork timeline's entry rides in the same conditional head write
            entry = retraction_entry(head.last_seq, (e.seq or 0 for e in targets))
            updated = self._recorded(updated, [entry], version, written, stale)
        except BaseException:
            self._delete_quietly(written)
            raise
        # no cleanup when this raises: the head may have been stored, and with it the segments
        if not self._write_head(updated, etag):
            self._delete_quietly(written)
            return None
        self._delete_quietly([self.layout.segment_key(head, ref) for ref in retired] + stale)
        return taken

    def _without(
        self,
        head: Head,
        refs: Sequence[SegmentRef],
        seqs: set[int | None],
        segments: Callable[[Sequence[SegmentRef]], list[Segment]],
        retired: list[SegmentRef],
        written: list[str],
        version: int,
        archive: bool,
    ) -> list[SegmentRef]:
        """The manifest ``refs`` with the events of ``seqs`` taken out: the segments whose seq
        range holds one are read and rewritten without them (dropped when nothing is left)."""
        touched = [
            ref
            for ref in refs
            if any(s is not None and ref.first_seq <= s <= ref.last_seq for s in seqs)
        ]
        contents = dict(zip((ref.name for ref in touched), segments(touched)))
        result: list[SegmentRef] = []
        for ref in refs:
            if ref.name not in contents:
                result.append(ref)
                continue
            live = _live(contents[ref.name], ref)
            kept = [e for e in live if e.seq not in seqs]
            if len(kept) == len(live):
                result.append(ref)
                continue
            retired.append(ref)
            if not kept:
                continue
            first, last = kept[0].seq or 0, kept[-1].seq or 0
            name = (segment_name if archive else window_segment_name)(first, last, version)
            new = SegmentRef(name, first, last, len(kept), bloom=bloom_of(kept, calls_only=archive))
            key = self.layout.segment_key(head, new)
            written.append(key)
            self._write_segment(key, kept)
            result.append(new)
        return result

    def _file_retracted(
        self,
        head: Head,
        taken: list[Event],
        retired: list[SegmentRef],
        written: list[str],
        version: int,
    ) -> list[SegmentRef]:
        """The retracted manifest with ``taken`` filed: folded with the trailing retracted
        segments no bigger than it (those are added to ``retired``), in new segments."""
        refs = list(head.retracted)
        start = fold_start(refs, len(taken), self.segment_events)
        folded = refs[start:]
        old = [
            e
            for ref, seg in zip(folded, self._read_segments(head, folded))
            for e in _live(seg, ref)
        ]
        retired += folded
        kept = refs[:start]
        for chunk in chunks(sorted([*old, *taken], key=lambda e: e.seq or 0), self.segment_events):
            first, last = chunk[0].seq or 0, chunk[-1].seq or 0
            ref = SegmentRef(
                retracted_segment_name(first, last, version), first, last, len(chunk), bloom=""
            )
            key = self.layout.segment_key(head, ref)
            written.append(key)
            self._write_segment(key, chunk)
            kept.append(ref)
        return kept

    def _retracted_events(self, cid: str) -> list[Event]:
        def read(head: Head) -> list[Event]:
            parts = self._read_segments(head, head.retracted)
            events = [e for ref, seg in zip(head.retracted, parts) for e in _live(seg, ref)]
            return sorted(events, key=lambda e: e.seq or 0)

        return self._consistently(cid, read)


def _live(segment: Segment, ref: SegmentRef) -> list[Event]:
    return segment.live_events(ref.skip)
