"""How :class:`~.store.S3Store` applies a compaction plan to a head: the events it archives are
merged into new immutable segments (rewriting the tail segments they join, trimming the
archive to the cap), written first; then the head with the new manifest is stored with one
conditional write. A plan that loses the race deletes its new segments again; one that wins
deletes the segments nothing references any more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from ...events import Event, EventType
from ...pins import pin_key
from ..base import CompactionPlan
from ..bookkeeping import archived_copy
from ..timeline import compaction_entry
from .layout import Head, SegmentRef, bloom_of, chunks, merge_start, segment_name, trim
from .objects import ConversationObjects, SegmentGone
from .timeline import HeadTimeline, dropped_pin


class Compacting(ConversationObjects):
    """Compaction on top of the object layer (a base class of :class:`~.store.S3Store`, whose
    :class:`~chat_memory.backends.base.Store` side supplies the cap and the records kept)."""

    segment_events: int
    compaction_records_kept: ClassVar[int]
    archive_cap: Callable[[CompactionPlan], int | None]

    def _write_compacted(
        self,
        head: Head,
        etag: str | None,
        plan: CompactionPlan,
        window: list[list[Event]] | None = None,
    ) -> bool | None:
        """Store ``head`` (as read, or with events appended) with ``plan`` applied: new archive
        segments first, then the head with If-Match ``etag`` (the stored head's). ``window``
        holds the live events of each of the head's window segments when the caller read them.
        True when it won; None when it lost a race (its new segments are deleted again)."""
        cap = self.archive_cap(plan)
        through = plan.archive_through_seq
        written: list[str] = []
        stale: list[str] = []  # a timeline segment the new head replaces
        try:
            parts = self._read_window_parts(head) if window is None else window
        except SegmentGone:
            return None
        # window segments wholly archived are retired; one archived in part skips its first events
        kept_window: list[SegmentRef] = []
        retired_window: list[SegmentRef] = []
        for ref, part in zip(head.window, parts):
            gone = sum(1 for e in part if (e.seq or 0) <= through)
            if gone == len(part):
                retired_window.append(ref)
            else:
                kept_window.append(replace(ref, skip=ref.skip + gone) if gone else ref)
        moving = [e for part in parts for e in part if (e.seq or 0) <= through]
        moving += [e for e in head.active if (e.seq or 0) <= through]
        # superseded pins wait in the head until a compaction files them with the rest of the
        # archive, so that the cap drops the oldest archived events exactly (a pin superseded
        # long after it was written makes this one compaction rewrite the archive from it)
        batch = [archived_copy(e) for e in moving] + list(head.unpinned)
        last_seq, summary = head.last_seq, head.summary
        if plan.summary is not None:
            if summary is not None:
                batch.append(archived_copy(summary))
            last_seq += 1
            summary = plan.summary.model_copy(update={"seq": last_seq, "archived": False})
        version = head.version + 1
        try:
            segments, retired, (timeline, entries) = self._rearchive(
                head, batch, cap, version, written
            )
            in_force = summary.seq if plan.summary is not None and summary is not None else None
            entries.append(compaction_entry(last_seq, through, in_force))
            updated = head.evolve(
                version=version,
                last_seq=last_seq,
                summary=summary,
                active=tuple(e for e in head.active if (e.seq or 0) > through),
                window=tuple(kept_window),
                segments=tuple(segments),
                unpinned=(),
                compaction_error=None,
                compaction_failures=0,
                compactions=(*head.compactions, plan.record)[-self.compaction_records_kept :]
                if plan.record
                else head.compactions,
                timeline=timeline,
            )
            updated = self._recorded(updated, entries, version, written, stale)
            updated = self._sealed(updated, written)
        except SegmentGone:
            # a segment to rewrite was retired by a compaction that won meanwhile
            self._delete_quietly(written)
            return None
        except BaseException:
            self._delete_quietly(written)
            raise
        # no cleanup when this raises: the head may have been stored, and with it the segments
        won = self._write_head(updated, etag)
        if not won:
            self._delete_quietly(written)
            return None
        self._delete_quietly(
            [self.layout.segment_key(head, ref) for ref in (*retired, *retired_window)] + stale
        )
        return True

    def _rearchive(
        self,
        head: Head,
        batch: list[Event],
        cap: int | None,
        version: int,
        written: list[str],
    ) -> tuple[list[SegmentRef], list[SegmentRef], tuple[HeadTimeline, list[dict[str, Any]]]]:
        """The new manifest after archiving ``batch`` and applying the cap, writing the new
        segments (their keys are added to ``written`` as they are stored). Returns (manifest,
        segments no longer referenced, (the timeline with the archived pins still filed, a
        ``dropped_pin`` entry per pin the cap deleted))."""
        kept: list[SegmentRef] = list(head.segments)
        merged: list[Event] = []
        retired: list[SegmentRef] = []
        if batch:
            batch.sort(key=lambda e: e.seq or 0)
            start = merge_start(kept, batch[0].seq or 0, len(batch), self.segment_events)
            rewritten = kept[start:]
            kept = kept[:start]
            old = self._read_segments(head, rewritten)
            merged = sorted(
                [e for ref, seg in zip(rewritten, old) for e in seg.live_events(ref.skip)] + batch,
                key=lambda e: e.seq or 0,
            )
            retired += rewritten
        before, filed = list(kept), merged
        kept, dropped, merged = trim(kept, merged, cap)
        retired += dropped
        pins = self._pins_after_cap(head, before, kept, dropped, filed, len(merged))
        for chunk in chunks(merged, self.segment_events):
            first, last = chunk[0].seq or 0, chunk[-1].seq or 0
            name = segment_name(first, last, version)
            ref = SegmentRef(
                name=name,
                first_seq=first,
                last_seq=last,
                count=len(chunk),
                bloom=bloom_of(chunk, calls_only=True),
            )
            key = self.layout.segment_key(head, ref)
            self._write_segment(key, chunk)
            written.append(key)
            kept.append(ref)
        return kept, retired, pins

    def _pins_after_cap(
        self,
        head: Head,
        before: list[SegmentRef],
        kept: list[SegmentRef],
        dropped: list[SegmentRef],
        filed: list[Event],
        still_filed: int,
    ) -> tuple[HeadTimeline, list[dict[str, Any]]]:
        """The archived pins (seq, pin key) the archive holds after the cap, and a
        ``dropped_pin`` entry per pin it deleted: found by the seq ranges of the segments it
        dropped, the first events of the one it skipped into (read only when a pin is in its
        range) and the front it cut off the events being filed (``filed``, of which the last
        ``still_filed`` are written)."""
        pins = set(head.timeline.pins)
        pins.update((e.seq or 0, pin_key(e)) for e in filed if e.type is EventType.SYSTEM)
        cut_off = filed[: len(filed) - still_filed]
        gone = {(e.seq or 0, pin_key(e)) for e in cut_off if e.type is EventType.SYSTEM}
        for ref in dropped:
            gone.update(p for p in pins if ref.first_seq <= p[0] <= ref.last_seq)
        skips = {ref.name: ref.skip for ref in before}
        for ref in kept:
            was = skips.get(ref.name)
            inside = [p for p in pins if ref.first_seq <= p[0] <= ref.last_seq]
            if was is not None and ref.skip > was and inside:
                segment = self._read_segments(head, [ref])[0]
                cut = {raw["seq"] for raw in segment.events[was : ref.skip]}
                gone.update(p for p in inside if p[0] in cut)
        entries = [dropped_pin(seq, key) for seq, key in sorted(pins & gone)]
        return head.timeline.with_pins(pins - gone), entries
