"""Running a compaction: plan the cut, write the summary (or fall back without one), apply it
as a compare-and-swap, and keep a record of what was done.

The safety nets live here:

- a summarizer that fails ``summarizer_failures_before_fallback`` times in a row (counted
  in the store beside the compaction error, :attr:`Snapshot.compaction_failures`, so every
  worker, every new ``ChatMemory`` and a restarted process agree), or fails again while an
  earlier fallback's gap is still unsummarized, or while the window is over twice its limit,
  or that cannot work at all (no API key, unknown model), no longer holds the window
  hostage: the compaction archives without a new summary. The previous summary stays,
  followed by a note of the gap in plain words (the summarizer's error goes to the log,
  ``stats()`` and the compaction record, never into the model's window); the archived
  events stay searchable, and the next summary that succeeds is written from the last real
  summary (never the note) plus the gap's events, each sent once, with the gap's range;
- a forced compaction (``compact(force=True)``, the overflow safety net) archives every turn
  but the newest whatever the strategy's limit says, with a summary when the strategy
  summarises (falling back as above) and otherwise a short stub that says how many events
  were archived and that ``conversation_search`` reaches them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import steps
from .backends.base import CompactionPlan, Snapshot
from .backoff import Backoff
from .config import MemoryConfig
from .errors import (
    ConcurrencyError,
    ConfigurationError,
    SummarizerError,
)
from .events import Event, EventType
from .steps import Sleep, Steps
from .strategies import Cut, Strategy
from .summarizer import Summarizer
from .summary_state import archive_tally as _archive_tally
from .summary_state import real_summary_text
from .telemetry import traced_compaction
from .tokens import TokenCounter, count_event_tokens

log = logging.getLogger(__name__)

#: How a compaction that keeps losing compare-and-swap races (to appends by other writers)
#: is retried: jittered exponential pauses so that writers stop colliding in lockstep.
COMPACTION_RETRIES = Backoff(attempts=24, base=0.002, cap=0.1)
#: A summarizing strategy whose window is this many times over its limit falls back at the
#: first failed summary.
FALLBACK_PRESSURE = 2.0


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did. ``record`` is what the store keeps of it (see
    :meth:`ChatMemory.compactions`); None when nothing was compacted."""

    strategy: str
    archived_events: int = 0
    archived_through_seq: int | None = None
    summary: Event | None = None
    attempts: int = 1
    fallback: bool = False
    forced: bool = False
    record: CompactionRecord | None = None

    @property
    def compacted(self) -> bool:
        """True when events were archived."""
        return self.archived_events > 0


@dataclass(frozen=True)
class CompactionRecord:
    """One applied compaction, as the store keeps it (the newest 50 per conversation)."""

    at: datetime
    strategy: str
    archived_events: int
    archived_through_seq: int
    tokens_before: int
    tokens_after: int
    #: the summarizer's model (or class) when a summary was asked for
    summarizer: str | None = None
    summarizer_seconds: float | None = None
    #: True when it archived without a new summary (the summarizer failed, or none was due)
    fallback: bool = False
    #: True for ``compact(force=True)``
    forced: bool = False
    #: why it fell back (the summarizer's error)
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as stored: fields that are None are left out (it rides in S3 heads)."""
        # every field holds a plain value (no list, dict or dataclass): no deep copy is needed,
        # as dataclasses.asdict would make
        data = {
            name: value for name in _RECORD_FIELDS if (value := getattr(self, name)) is not None
        }
        data["at"] = self.at.isoformat(timespec="milliseconds")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompactionRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["at"] = datetime.fromisoformat(values["at"])
        return cls(**values)


_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(CompactionRecord))


class Compactor:
    """Compacts one store's conversations with one strategy (and summarizer)."""

    def __init__(
        self,
        config: MemoryConfig,
        strategy: Strategy,
        summarizer: Summarizer | None,
        token_counter: TokenCounter,
    ) -> None:
        self.config = config
        self.strategy = strategy
        self.summarizer = summarizer
        self.token_counter = token_counter
        #: set when the summarizer cannot work at all (a ConfigurationError): no more calls
        self._unusable: ConfigurationError | None = None

    def plan_without_summary(self, snapshot: Snapshot) -> CompactionPlan | None:
        """The plan of a strategy that needs no summarizer (pure: it may run inside a store's write)."""
        cut = self.strategy.plan(snapshot.window)
        if cut is None:
            return None
        record = self._record(snapshot, cut, None, forced=False)
        return CompactionPlan(
            snapshot.version,
            cut.through_seq,
            max_archived_events=self.config.max_archived_events,
            record=record.to_json(),
        )

    @traced_compaction
    def compact(
        self, cid: str, snapshot: Snapshot, cut: Cut | None = None, *, force: bool = False
    ) -> Steps[CompactionResult]:
        """Plan (unless ``cut`` was already planned on ``snapshot``), summarise when the
        strategy needs it (or fall back), and apply as compare-and-swap. A plan that loses
        its race is reused only if nothing was compacted meanwhile (appends at the tail do
        not touch the region it archives); otherwise it is re-planned. A compaction with
        nothing to do clears a recorded error: there is nothing left to fail.

        Steps (see :mod:`chat_memory.steps`): the same plan runs against a sync or an async store."""
        plan: CompactionPlan | None = None
        planned: tuple[Cut, Event | None, CompactionRecord] | None = None
        head: tuple[str | None, str | None] | None = None
        for attempt, pause in enumerate(COMPACTION_RETRIES.delays(), start=1):
            current_head = _head(snapshot)
            if plan is None or current_head != head:
                if plan is not None or cut is None:
                    cut = (
                        self.strategy.forced_cut(snapshot.window)
                        if force
                        else self.strategy.plan(snapshot.window)
                    )
                if cut is None:
                    if snapshot.compaction_error is not None or snapshot.compaction_failures:
                        yield from steps.record_compaction_error(cid, None)
                    return CompactionResult(self.strategy.name, attempts=attempt, forced=force)
                summary, record = yield from self._summary(cid, snapshot, cut, force)
                planned = (cut, summary, record)
                plan = CompactionPlan(
                    expected_version=snapshot.version,
                    archive_through_seq=cut.through_seq,
                    summary=summary,
                    max_archived_events=self.config.max_archived_events,
                    record=record.to_json(),
                )
                head = current_head
            else:
                plan = dataclasses.replace(plan, expected_version=snapshot.version)
            if (yield from steps.apply(cid, plan)):
                assert planned is not None
                done_cut, summary, record = planned
                if record.fallback and record.reason is not None:
                    # the apply cleared the error (and the count); the summarizer is still
                    # failing: say so. The gap note now in the window keeps the next failure
                    # falling back at once (_gap_open) until a summary succeeds.
                    yield from steps.record_compaction_error(
                        cid, f"{record.reason} (archived without a new summary)"
                    )
                return CompactionResult(
                    self.strategy.name,
                    archived_events=len(done_cut.archived),
                    archived_through_seq=plan.archive_through_seq,
                    summary=summary,
                    attempts=attempt,
                    fallback=record.fallback,
                    forced=force,
                    record=record,
                )
            yield Sleep(pause)
            snapshot = yield from steps.load(cid)
        raise ConcurrencyError(
            f"compaction of conversation {cid!r} lost {COMPACTION_RETRIES.attempts} compare-and-swap races in a row"
        )

    # -- the summary ---------------------------------------------------------------------------

    def _summary(
        self, cid: str, snapshot: Snapshot, cut: Cut, force: bool
    ) -> Steps[tuple[Event | None, CompactionRecord]]:
        """The new summary of a cut (None: none is due) and the record of the compaction.
        Raises :class:`SummarizerError` when the summarizer failed and no fallback is due."""
        if not self.strategy.summarizes:
            if not force:
                return None, self._record(snapshot, cut, None, forced=False)
            stub = self._gap_summary(
                snapshot, cut, "a forced compaction; this strategy writes no summaries"
            )
            return stub, self._record(snapshot, cut, stub, forced=True, fallback=True)
        assert self.summarizer is not None
        model = _model_name(self.summarizer)
        if self._unusable is None:
            started = time.monotonic()
            try:
                summary = yield from self._summarize(cid, snapshot, cut)
            except ConfigurationError as exc:
                log.error(
                    "chat-memory: the summarizer cannot work (%s); compacting without summaries from now on",
                    exc,
                )
                self._unusable = exc
            except SummarizerError as exc:
                # this failure and those the store counted since the last applied compaction
                # (the caller records this one when it raises: see MemoryCore.add)
                failures = snapshot.compaction_failures + 1
                due = failures >= self.config.summarizer_failures_before_fallback
                # an earlier fallback's gap still open: no summary has worked since
                still_down = _gap_open(snapshot)
                over = self.strategy.pressure(snapshot.window) > FALLBACK_PRESSURE
                if not (force or over or due or still_down):
                    raise
                reason = f"{type(exc).__name__}: {exc}"
                if still_down and not due:
                    why = "the summarizer was still unavailable"
                else:
                    attempts = "once" if failures == 1 else f"{failures} times in a row"
                    why = f"the summarizer was unavailable: it failed {attempts}"
                stub = self._gap_summary(snapshot, cut, why)
                record = self._record(
                    snapshot,
                    cut,
                    stub,
                    forced=force,
                    fallback=True,
                    summarizer=model,
                    reason=reason,
                )
                return stub, record
            else:
                seconds = round(time.monotonic() - started, 3)
                return summary, self._record(
                    snapshot, cut, summary, forced=force, summarizer=model, seconds=seconds
                )
        reason = f"{type(self._unusable).__name__}: {self._unusable}"
        stub = self._gap_summary(
            snapshot, cut, "the summarizer cannot be used with its current settings"
        )
        return stub, self._record(
            snapshot, cut, stub, forced=force, fallback=True, summarizer=model, reason=reason
        )

    def _summarize(self, cid: str, snapshot: Snapshot, cut: Cut) -> Steps[Event]:
        """A new summary of the last real summary (never a gap note) plus the cut's events, and
        of the events of any gap an earlier fallback left (read back from the archive, each
        once, oldest first), so the gap closes; the summarizer is told the gap's range."""
        assert self.summarizer is not None
        previous = snapshot.window.summary
        events = list(cut.archived)
        gap: tuple[int, int] | None = None
        gap_from = previous.metadata.get("unsummarized_from_seq") if previous is not None else None
        if isinstance(gap_from, int):
            first_cut = cut.archived[0].seq or 0
            unsummarized = {
                e.seq or 0: e
                for e in (yield from steps.history(cid))
                if e.archived and e.type in _REAL and gap_from <= (e.seq or 0) < first_cut
            }
            missed = [unsummarized[seq] for seq in sorted(unsummarized)]
            if missed:
                gap = (missed[0].seq or 0, missed[-1].seq or 0)
            events = [*missed, *events]
        upcoming = self.strategy.upcoming(cut)
        text = yield from steps.summarize(
            self.summarizer, real_summary_text(previous), events, upcoming, gap
        )
        earlier = int(previous.metadata.get("summarized_events", 0)) if previous else 0
        metadata = {
            "summarized_through_seq": cut.through_seq,
            "summarized_events": len(cut.archived) + earlier,
        }
        summary = Event.summary(text, metadata={**metadata, **_archive_tally(snapshot, cut)})
        return summary.model_copy(
            update={"tokens": count_event_tokens(summary, self.token_counter)}
        )

    def _gap_summary(self, snapshot: Snapshot, cut: Cut, why: str) -> Event:
        """The last real summary (if any) followed by a note of the events archived
        unsummarised. ``why`` is in plain words: the model reads it; the summarizer's error
        text (often a provider's raw JSON) stays in the log, ``stats()`` and the record."""
        previous = snapshot.window.summary
        first, last = cut.archived[0].seq or 0, cut.through_seq
        gap_from = previous.metadata.get("unsummarized_from_seq") if previous is not None else None
        start = gap_from if isinstance(gap_from, int) else first
        note = (
            f"[Events #{start}–#{last} were archived without being summarized ({why}). They are stored and "
            "searchable: call conversation_search to find what they said.]"
        )
        body = real_summary_text(previous) or ""
        metadata = dict(previous.metadata) if previous is not None else {}
        metadata.update(
            unsummarized_from_seq=start,
            summarized_through_seq=last,
            summarized_events=int(metadata.get("summarized_events", 0)) + len(cut.archived),
            # where the real summary ends in the content: the next summary is written from it alone
            summary_chars=len(body),
            **_archive_tally(snapshot, cut),
        )
        stub = Event.summary(f"{body}\n\n{note}" if body else note, metadata=metadata)
        return stub.model_copy(update={"tokens": count_event_tokens(stub, self.token_counter)})

    def _record(
        self,
        snapshot: Snapshot,
        cut: Cut,
        summary: Event | None,
        *,
        forced: bool,
        fallback: bool = False,
        summarizer: str | None = None,
        seconds: float | None = None,
        reason: str | None = None,
    ) -> CompactionRecord:
        before = snapshot.window.tokens()
        after = before - sum(e.tokens or 0 for e in cut.archived)
        if summary is not None:
            old = snapshot.window.summary
            after += (summary.tokens or 0) - ((old.tokens or 0) if old is not None else 0)
        return CompactionRecord(
            at=datetime.now(timezone.utc),
            strategy=self.strategy.name,
            archived_events=len(cut.archived),
            archived_through_seq=cut.through_seq,
            tokens_before=before,
            tokens_after=after,
            summarizer=summarizer,
            summarizer_seconds=seconds,
            fallback=fallback,
            forced=forced,
            reason=reason,
        )


_REAL = (EventType.USER, EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT)


def _model_name(summarizer: Summarizer) -> str:
    model = getattr(summarizer, "model", None)
    return model if isinstance(model, str) else type(summarizer).__name__


def _gap_open(snapshot: Snapshot) -> bool:
    """True when the window's summary ends with a gap note: a compaction fell back and no
    summary has succeeded since (the apply that wrote the note reset the store's count)."""
    summary = snapshot.window.summary
    return summary is not None and isinstance(summary.metadata.get("unsummarized_from_seq"), int)


def _head(snapshot: Snapshot) -> tuple[str | None, str | None]:
    """What a compaction depends on: which event the active window starts with and which
    summary is current (event ids, so a clear and re-add cannot look unchanged)."""
    active = snapshot.window.active
    summary = snapshot.window.summary
    return (active[0].id if active else None, summary.id if summary else None)


__all__ = [
    "COMPACTION_RETRIES",
    "CompactionRecord",
    "CompactionResult",
    "Compactor",
]
