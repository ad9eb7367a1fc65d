"""Per-turn window tokens and cache-servable share, rebuilt from what the public API returns
(``history()`` and ``compactions()``), and the inline SVG chart drawn from them on the server.

How a turn's point is computed (docs/inspector.md says the same):

- turns are counted from the stored history (retracted events left out), a turn being a user
  event and what follows it up to the next one; a summary belongs to the turn it follows;
- a compaction runs at the end of an ``add()``: a compaction record is placed after the turn
  whose window, rebuilt, had the record's ``tokens_before``; failing that, after the last turn
  that started before the record's ``at``;
- the window after turn *t* is the pinned system events, the newest summary stored by then,
  and the real events after the archive boundary of the newest compaction placed by then;
- the request of turn *t* can be served from the prompt cache up to the previous request's
  tail when no compaction ran in between (its last breakpoint marks exactly that prefix),
  else only up to the system prompt (and the summary when it did not change). The API's
  minimum cacheable length is not modelled.

A store keeps the newest 50 records: when that many are kept, turns before the oldest one
are left out of the chart (their archive boundary is not known) and the page says so."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

from .. import CompactionRecord, Event, EventType
from .html import esc

#: the number of compaction records a store keeps (beyond it the oldest are dropped)
KEPT_RECORDS = 50


@dataclass(frozen=True)
class TurnPoint:
    """One turn of the chart: its number (1 first), the window's tokens after it, the share of
    that request the prompt cache could serve, and whether a compaction ran at its end."""

    turn: int
    window_tokens: int
    cached_share: float
    compacted: bool


@dataclass(frozen=True)
class Series:
    """The chart's points and the first turn charted (later than 1 when records were dropped)."""

    points: list[TurnPoint]
    first_turn: int
    turns: int


def turn_starts(events: list[Event]) -> list[int]:
    """Indexes into ``events`` where a turn starts (a leading turn without a user event too)."""
    starts = [i for i, e in enumerate(events) if e.type is EventType.USER]
    real = [i for i, e in enumerate(events) if e.type not in (EventType.SYSTEM, EventType.SUMMARY)]
    if real and (not starts or real[0] < starts[0]):
        starts.insert(0, real[0])
    return starts


def _ms(moment: datetime) -> datetime:
    """A time as records keep it (milliseconds)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def series(history: list[Event], records: list[CompactionRecord]) -> Series:
    """The per-turn points of a conversation (see the module docstring)."""
    events = [e for e in history if not e.retracted]
    starts = turn_starts(events)
    if not starts:
        return Series([], 1, 0)
    bounds = list(zip(starts, starts[1:] + [len(events)]))
    pins = sum(e.tokens or 0 for e in events if e.type is EventType.SYSTEM and not e.archived)
    # running sums over the real events in seq order: the window's real tokens after turn t are
    # those of the events after the archive boundary, up to the turn's end
    real = [e for e in events if e.type not in (EventType.SYSTEM, EventType.SUMMARY)]
    seqs = [e.seq or 0 for e in real]
    sums = [0]
    for event in real:
        sums.append(sums[-1] + (event.tokens or 0))

    def window(through: int, last_seq: int, summary: Event | None) -> int:
        tokens = sums[bisect_right(seqs, last_seq)] - sums[bisect_right(seqs, max(through, 0))]
        return pins + (summary.tokens or 0 if summary is not None else 0) + max(0, tokens)

    pending = list(records)
    first_turn = 0 if len(records) < KEPT_RECORDS else -1
    through, summary, previous, previous_summary = 0, None, None, None
    points: list[TurnPoint] = []
    for t, (first, end) in enumerate(bounds):
        last_seq = events[end - 1].seq or 0
        made = [e for e in events[first:end] if e.type is EventType.SUMMARY]
        following = _ms(events[bounds[t + 1][0]].created_at) if t + 1 < len(bounds) else None
        compacted = False
        while pending:
            record = pending[0]
            # the record's own numbers tie it to this turn (its window before matches ours);
            # failing that, its time: it ran before the next turn started
            before = window(through, last_seq, summary)
            due = following is not None and record.at < following
            if record.tokens_before != before and not due and following is not None:
                break
            pending.pop(0)
            compacted = True
            through = max(through, record.archived_through_seq)
            if made:
                summary = made.pop(0)
            if first_turn < 0:
                first_turn = t
        if made:
            summary = made[-1]
        total = window(through, last_seq, summary)
        if previous is None:
            servable = 0
        elif compacted:
            same = summary is not None and previous_summary is summary
            servable = pins + (summary.tokens or 0 if same and summary is not None else 0)
        else:
            servable = previous
        if first_turn >= 0 and t >= first_turn:
            share = min(1.0, servable / total) if total else 0.0
            points.append(TurnPoint(t + 1, total, share, compacted))
        previous, previous_summary = total, summary
    return Series(points, max(first_turn, 0) + 1, len(bounds))


def svg(data: Series, width: int = 1000, height: int = 260) -> str:
    """An inline SVG: window tokens as bars (left axis), cache-servable share as a line
    (right axis, 0-100%), compactions as marks under the bars. Text in <title> elements
    gives each bar's numbers to screen readers and on hover."""
    points = data.points
    if not points:
        return '<p class="muted">No turns to chart yet.</p>'
    left, right, top, bottom = 56, 48, 14, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(p.window_tokens for p in points) or 1
    step = plot_w / len(points)
    bar = max(1.0, step * 0.8)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="chart-title" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="chart-title">Window tokens and cache-servable share per turn, turns '
        f"{points[0].turn} to {points[-1].turn}</title>",
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#888"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h - fraction * plot_h
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#333">'
            f"{int(peak * fraction)}</text>"
            f'<text x="{left + plot_w + 6}" y="{y + 4:.1f}" font-size="11" fill="#8a5a00">'
            f"{int(fraction * 100)}%</text>"
        )
    line: list[str] = []
    for i, p in enumerate(points):
        x = left + i * step
        h = p.window_tokens / peak * plot_h
        parts.append(
            f'<rect x="{x:.2f}" y="{top + plot_h - h:.2f}" width="{bar:.2f}" height="{h:.2f}" '
            f'fill="#5b8bd9"><title>turn {p.turn}: {p.window_tokens} tokens, '
            f"{p.cached_share:.0%} cache-servable{', compacted' if p.compacted else ''}</title></rect>"
        )
        if p.compacted:
            parts.append(
                f'<rect x="{x:.2f}" y="{top + plot_h + 3}" width="{bar:.2f}" height="5" fill="#a11d2b"/>'
            )
        line.append(f"{x + bar / 2:.2f},{top + plot_h - p.cached_share * plot_h:.2f}")
    parts.append(
        f'<polyline points="{" ".join(line)}" fill="none" stroke="#f2a900" stroke-width="2"/>'
    )
    parts.append(
        f'<text x="{left}" y="{height - 6}" font-size="11" fill="#333">turn {points[0].turn}</text>'
        f'<text x="{left + plot_w}" y="{height - 6}" font-size="11" text-anchor="end" fill="#333">'
        f"turn {points[-1].turn}</text>"
        f'<text x="{left + plot_w / 2}" y="{height - 6}" font-size="11" text-anchor="middle" '
        f'fill="#333">{esc("bars: window tokens · line: cache-servable share · red: compaction")}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
