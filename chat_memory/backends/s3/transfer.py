"""Fork, dump and restore on S3 (the :class:`~chat_memory.backends.base.Forks` and
:class:`~chat_memory.backends.base.Dumps` abilities of :class:`~.store.S3Store`; docs/s3.md,
"Fork, dump and restore").

- **dump** reads the head and every segment it lists (archive, window, retracted, timeline)
  in one consistent read (again from a fresh head when a compaction retired a segment
  meanwhile) and returns the conversation exactly, flags and timeline included.
- **restore** writes the conversation's segments under a new generation, then creates the
  head with ``If-None-Match: *``: the conversation appears whole or not at all; a head created
  meanwhile by someone else makes it delete what it wrote and refuse, naming the id.
- **fork** at the last seq (``at=None``, the common "branch from here") copies the head's
  manifests as they are and every segment server-side (``CopyObject``, nothing downloaded or
  uploaded but the head). At an earlier seq it reads the events up to ``at`` and the
  timeline, rebuilds the state then (:func:`~chat_memory.backends.timeline.state_at`), and
  still copies server-side every segment whose live events are exactly the fork's events of
  that kind over its seq range (usually every archive segment but the newest); only the
  others are written anew. Both end with the conditional create of the new head.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ...errors import ConcurrencyError, InvalidInputError
from ...events import Event, EventType
from ...lifecycle.keys import stored_key
from ...pins import pin_key
from ..base import Dumps, Forks, Snapshot, check_conversation_id
from ..timeline import ConversationDump, shown_id, state_at
from .client import is_missing
from .layout import (
    Head,
    Segment,
    SegmentRef,
    bloom_of,
    chunks,
    segment_name,
    window_segment_name,
)
from .objects import ConversationObjects, SegmentGone
from .retraction import retracted_segment_name
from .timeline import (
    INLINE_ENTRIES,
    SEGMENT_ENTRIES,
    HeadTimeline,
    TimelineRef,
    encode_entries,
    timeline_segment_name,
)

ARCHIVE, WINDOW, RETRACTED = "archive", "window", "retracted"


def _kind(event: Event) -> str | None:
    """Which segments hold ``event`` (None: the head itself, a pin or the summary in force)."""
    if event.retracted:
        return RETRACTED
    if event.archived:
        return ARCHIVE
    if event.type in (EventType.SYSTEM, EventType.SUMMARY):
        return None
    return WINDOW


@dataclass(frozen=True)
class _Source:
    """A segment of the conversation forked: its manifest entry, its live events (as
    stored) and its key."""

    ref: SegmentRef
    kind: str
    events: list[Event]
    key: str


@dataclass
class _Plan:
    """What a restore or fork writes before its head: new segments and server-side copies."""

    writes: list[tuple[str, bytes]]
    copies: list[tuple[str, str]]

    def keys(self) -> list[str]:
        return [key for key, _ in self.writes] + [dst for _, dst in self.copies]


def _metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A head's lifecycle metadata as a dump carries it (the fields of every lifecycle store:
    title, tags, values, created_at, last_active_at; unknown ones kept as they are)."""
    return {
        "title": None,
        **dict(meta),
        "tags": sorted(meta.get("tags") or ()),
        "values": dict(meta.get("values") or {}),
    }


class S3Transfer(ConversationObjects, Forks, Dumps):
    """:class:`Forks` and :class:`Dumps` for :class:`~.store.S3Store` (a base class of it)."""

    segment_events: int
    load: Callable[[str], Snapshot]

    # -- dump --------------------------------------------------------------------------------

    def dump(self, conversation_id: str) -> ConversationDump | None:
        """Everything the conversation holds, read consistently (see the module docstring)."""
        cid = check_conversation_id(conversation_id)
        dumped: ConversationDump | None = self._read_consistently(
            cid, lambda head: self._dumped(head)[0]
        )
        return dumped

    def _read_consistently(self, cid: str, read: Callable[[Head], Any]) -> Any:
        """``read`` of the stored head (None when it is not stored), again from a fresh head
        when a segment it lists was retired meanwhile."""
        for delay in self.racing_reads():
            found = self._read_head(cid)
            if found is None:
                return None
            try:
                return read(found[0])
            except SegmentGone:
                time.sleep(delay)
        raise ConcurrencyError(f"reading conversation {cid!r} kept racing with compactions")

    def _dumped(
        self, head: Head, upto: int | None = None
    ) -> tuple[ConversationDump, list[_Source]]:
        """The dump of ``head`` (only the events with seq ≤ ``upto`` when it is given: the
        segments wholly after it are not read) and the segments read, with their events."""
        limit = head.last_seq if upto is None else upto
        listed = [
            *((ref, ARCHIVE) for ref in head.segments),
            *((ref, WINDOW) for ref in head.window),
            *((ref, RETRACTED) for ref in head.retracted),
        ]
        listed = [(ref, kind) for ref, kind in listed if ref.first_seq <= limit]
        read = self._read_segments(head, [ref for ref, _ in listed])
        sources = [
            _Source(ref, kind, segment.live_events(ref.skip), self.layout.segment_key(head, ref))
            for (ref, kind), segment in zip(listed, read)
        ]
        events = [e for source in sources for e in source.events]
        events += [*head.pinned, *head.unpinned, *head.active]
        if head.summary is not None:
            events.append(head.summary)
        dump = ConversationDump(
            # the key as a store hands it back (a scoped one marked: export, copy)
            conversation_id=stored_key(head.conversation_id),
            last_seq=head.last_seq,
            events=tuple(sorted((e for e in events if (e.seq or 0) <= limit), key=_seq)),
            records=tuple(dict(r) for r in head.compactions),
            timeline=tuple(self._timeline_entries(head)),
            compaction_error=head.compaction_error,
            compaction_failures=head.compaction_failures,
            metadata=_metadata(head.meta),
            version=head.version,
            timeline_from=head.timeline.start,
        )
        return dump, sources

    # -- restore -----------------------------------------------------------------------------

    def restore(self, dump: ConversationDump) -> None:
        """Store ``dump`` under a new generation, then create its head with ``If-None-Match``
        (see the module docstring)."""
        cid = check_conversation_id(dump.conversation_id)
        self._refuse_stored(cid)
        meta = dict(dump.metadata)
        self._create(cid, dump, meta, [], stamp=not meta.get("last_active_at"))

    def _refuse_stored(self, cid: str) -> None:
        if self._read_head(cid) is not None:
            raise InvalidInputError(f"conversation_id ({shown_id(cid)!r}) is stored already")

    def _create(
        self,
        cid: str,
        dump: ConversationDump,
        meta: Mapping[str, Any],
        sources: Sequence[_Source],
        stamp: bool,
    ) -> None:
        """Write the segments of ``dump`` (copying ``sources`` that hold exactly what it
        needs), then create the head of ``cid``; refuse, deleting what was written, when the
        head was created meanwhile."""
        plan = _Plan([], [])
        written: list[str] = []
        try:
            head = self._laid_out(Head.new(cid), dump, meta, sources, plan)
            written = plan.keys()  # deleting one not written yet is harmless
            self._run(plan)
            head = self._sealed(head, written)
        except BaseException:
            self._delete_quietly(written)
            raise
        if not self._write_head(head, None, stamp=stamp):
            self._delete_quietly(written)
            raise InvalidInputError(f"conversation_id ({shown_id(cid)!r}) is stored already")

    def _laid_out(
        self,
        head: Head,
        dump: ConversationDump,
        meta: Mapping[str, Any],
        sources: Sequence[_Source],
        plan: _Plan,
    ) -> Head:
        """The head of ``dump`` as a new conversation, the objects it lists added to ``plan``."""
        by_kind: dict[str | None, list[Event]] = {None: [], ARCHIVE: [], WINDOW: [], RETRACTED: []}
        seen: set[int] = set()
        for event in sorted(dump.events, key=_seq):
            seq = event.seq or 0
            if not 0 < seq <= dump.last_seq or seq in seen:
                raise InvalidInputError(
                    f"dump of {shown_id(dump.conversation_id)!r}: event {event.id!r} has seq "
                    f"{event.seq!r}, not a seq of its own from 1 to last_seq ({dump.last_seq})"
                )
            seen.add(seq)
            by_kind[_kind(event)].append(event)
        summaries = [e for e in by_kind[None] if e.type is EventType.SUMMARY]
        if len(summaries) > 1:
            raise InvalidInputError(
                f"dump of {shown_id(dump.conversation_id)!r}: {len(summaries)} summaries in "
                f"force (seqs {', '.join(str(e.seq) for e in summaries)}); archive all but one"
            )
        folder = self.layout.segments(head.conversation_id, head.generation)

        def place(
            kind: str,
            size: int,
            name: Callable[[int, int, int], str],
            bloom: Callable[[list[Event]], str],
        ) -> list[SegmentRef]:
            """The manifest of ``kind``: sources copied as they are, runs between them new."""
            laid: list[SegmentRef] = []
            for piece in _pieces(by_kind[kind], [s for s in sources if s.kind == kind]):
                if isinstance(piece, _Source):
                    plan.copies.append((piece.key, folder + piece.ref.name))
                    laid.append(piece.ref)
                    continue
                for chunk in chunks(piece, size):
                    first, last = chunk[0].seq or 0, chunk[-1].seq or 0
                    ref = SegmentRef(
                        name(first, last, 1), first, last, len(chunk), bloom=bloom(chunk)
                    )
                    plan.writes.append((folder + ref.name, Segment.of(chunk).to_bytes()))
                    laid.append(ref)
            return laid

        archive = place(
            ARCHIVE, self.segment_events, segment_name, lambda c: bloom_of(c, calls_only=True)
        )
        taken = place(RETRACTED, self.segment_events, retracted_segment_name, lambda c: "")
        # the window: the run after the last segment copied is the head's tail (sealed into
        # window segments by the caller when it is too long); the rest window segments
        window_pieces = _pieces(by_kind[WINDOW], [s for s in sources if s.kind == WINDOW])
        tail = window_pieces[-1] if window_pieces else []
        tail = tail if isinstance(tail, list) else []
        by_kind[WINDOW] = by_kind[WINDOW][: len(by_kind[WINDOW]) - len(tail)]
        window = place(WINDOW, self.tail_events, window_segment_name, bloom_of)
        pins = [(e.seq or 0, pin_key(e)) for e in by_kind[ARCHIVE] if e.type is EventType.SYSTEM]
        return head.evolve(
            version=max(dump.version, 1),
            last_seq=dump.last_seq,
            pinned=tuple(e for e in by_kind[None] if e.type is EventType.SYSTEM),
            summary=summaries[0] if summaries else None,
            active=tuple(tail),
            compaction_error=dump.compaction_error,
            compaction_failures=dump.compaction_failures,
            segments=tuple(archive),
            window=tuple(window),
            retracted=tuple(taken),
            compactions=tuple(dict(r) for r in dump.records),
            meta=dict(meta),
            timeline=self._laid_timeline(dump, folder, plan).with_pins(pins),
        )

    @staticmethod
    def _laid_timeline(dump: ConversationDump, folder: str, plan: _Plan) -> HeadTimeline:
        entries = [dict(e) for e in dump.timeline]
        spill = len(entries) - len(entries) % INLINE_ENTRIES if len(entries) > INLINE_ENTRIES else 0
        refs: list[TimelineRef] = []
        for first in range(0, spill, SEGMENT_ENTRIES):
            part = entries[first : min(spill, first + SEGMENT_ENTRIES)]
            ref = TimelineRef(
                timeline_segment_name(first, first + len(part) - 1, 1), first, first + len(part) - 1
            )
            plan.writes.append((folder + ref.name, encode_entries(part)))
            refs.append(ref)
        return HeadTimeline(
            start=dump.timeline_from, entries=tuple(entries[spill:]), segments=tuple(refs)
        )

    def _run(self, plan: _Plan) -> None:
        """The plan's writes (``If-None-Match: *``) and server-side copies, concurrently."""
        jobs: list[Callable[[], Any]] = [
            *(lambda k=key, b=body: self._put_new(k, b) for key, body in plan.writes),
            *(lambda s=src, d=dst: self._copy(s, d) for src, dst in plan.copies),
        ]
        if len(jobs) <= 1 or self.read_workers <= 1:
            for job in jobs:
                job()
            return
        with ThreadPoolExecutor(max_workers=min(self.read_workers, len(jobs))) as pool:
            list(pool.map(lambda job: job(), jobs))

    def _put_new(self, key: str, body: bytes) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=key, Body=body, ContentType="application/gzip", IfNoneMatch="*"
        )

    def _copy(self, source: str, target: str) -> None:
        """A server-side copy (the new generation folder is fresh: no key can be taken)."""
        try:
            self.client.copy_object(
                Bucket=self.bucket, Key=target, CopySource={"Bucket": self.bucket, "Key": source}
            )
        except Exception as exc:
            if is_missing(exc):  # retired by a compaction since the head was read
                raise SegmentGone(source) from exc
            raise

    # -- fork --------------------------------------------------------------------------------

    def fork(self, conversation_id: str, new_conversation_id: str, at: int | None) -> Snapshot:
        """The new conversation as the source was at ``at`` (see the module docstring):
        server-side copies of the segments, then the conditional create of its head."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        for delay in self.racing_reads():
            found = self._read_head(cid)
            if found is None:
                raise InvalidInputError(
                    f"conversation_id ({shown_id(cid)!r}) is not a stored conversation"
                )
            self._refuse_stored(new_cid)
            try:
                self._fork_from(found[0], new_cid, at)
            except SegmentGone:  # a compaction retired a segment meanwhile: from a fresh head
                time.sleep(delay)
                continue
            return self.load(new_cid)
        raise ConcurrencyError(f"forking conversation {cid!r} kept racing with compactions")

    def _fork_from(self, head: Head, new_cid: str, at: int | None) -> None:
        started = datetime.now(timezone.utc).isoformat()
        # a new conversation: its title, tags and values come along, its clock starts now
        meta = {**dict(head.meta), "created_at": started, "last_active_at": started}
        if at is None or at == head.last_seq:
            self._copy_whole(head, new_cid, meta)
            return
        dump, sources = self._dumped(head, upto=at)
        fork = state_at(dump, at, new_cid)
        self._create(new_cid, fork, meta, sources, stamp=False)

    def _copy_whole(self, head: Head, new_cid: str, meta: Mapping[str, Any]) -> None:
        """The fork at the last seq: the same head under the new id and a new generation,
        every object it lists copied server-side."""
        new = Head.new(new_cid)
        source = self.layout.segments(head.conversation_id, head.generation)
        target = self.layout.segments(new_cid, new.generation)
        names = [ref.name for ref in (*head.segments, *head.window, *head.retracted)] + [
            ref.name for ref in head.timeline.segments
        ]
        plan = _Plan([], [(source + name, target + name) for name in names])
        try:
            self._run(plan)
        except BaseException:
            self._delete_quietly(plan.keys())
            raise
        fork = replace(
            head,
            conversation_id=new_cid,
            generation=new.generation,
            version=1,
            writes=(),
            meta=dict(meta),
        )
        if not self._write_head(fork, None, stamp=False):
            self._delete_quietly(plan.keys())
            raise InvalidInputError(f"conversation_id ({shown_id(new_cid)!r}) is stored already")


def _seq(event: Event) -> int:
    return event.seq or 0


def _pieces(events: Sequence[Event], sources: Iterable[_Source]) -> list[_Source | list[Event]]:
    """``events`` (one kind, seq order) as pieces in order: a source segment wherever its live
    events are exactly the events over its seq range (copied as it is), runs of the others."""
    by_seq = {e.seq or 0: i for i, e in enumerate(events)}
    copyable: dict[int, _Source] = {}
    for source in sources:
        if not source.events:
            continue
        start = by_seq.get(source.events[0].seq or 0)
        end = by_seq.get(source.events[-1].seq or 0)
        if start is None or end is None or end - start + 1 != len(source.events):
            continue
        if all(_same(a, b) for a, b in zip(events[start : end + 1], source.events)):
            copyable[start] = source
    pieces: list[_Source | list[Event]] = []
    run: list[Event] = []
    i = 0
    while i < len(events):
        copied = copyable.get(i)
        if copied is None:
            run.append(events[i])
            i += 1
            continue
        if run:
            pieces.append(run)
            run = []
        pieces.append(copied)
        i += len(copied.events)
    if run:
        pieces.append(run)
    return pieces


def _same(fork: Event, stored: Event) -> bool:
    """The fork's event is the stored one, flags included (state_at changes only flags)."""
    return (fork.seq, fork.id, fork.archived, fork.retracted) == (
        stored.seq,
        stored.id,
        stored.archived,
        stored.retracted,
    )


__all__ = ["S3Transfer"]
