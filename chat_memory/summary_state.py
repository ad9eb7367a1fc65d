"""What a summary event records about itself, and what that tells the engine:

- a gap note (a fallback archived events without a new summary, docs/safety-nets.md) sits
  after the last real summary in the same event; ``summary_chars`` says where that summary
  ends, so the next one is written from it alone (:func:`real_summary_text`);
- the archive tally (``archived_real_events``, ``replaced_summaries``) lets ``stats()`` count
  archived real events apart from the replaced summaries the stores also archive
  (:func:`archived_counts`), without reading the archive while the cap has dropped nothing.
"""

from __future__ import annotations

from . import steps
from .backends.base import Snapshot
from .events import Event, EventType
from .steps import Steps
from .strategies import Cut


def real_summary_text(summary: Event | None) -> str | None:
    """The text of the last summary a summarizer wrote, without any note of a gap a fallback
    appended (None when there is none): what the next summary is written from."""
    if summary is None:
        return None
    if not isinstance(summary.metadata.get("unsummarized_from_seq"), int):
        return summary.content
    chars = summary.metadata.get("summary_chars")
    if isinstance(chars, int) and 0 <= chars <= len(summary.content):
        return summary.content[:chars] or None
    # a note written before summary_chars was kept: the note always starts this way
    if summary.content.startswith("[Events #"):
        return None
    return summary.content.split("\n\n[Events #", 1)[0] or None


def archive_tally(snapshot: Snapshot, cut: Cut) -> dict[str, int]:
    """What a new summary records so that ``stats()`` can tell archived real events from the
    replaced summaries the archive also holds (see :func:`archived_counts`):
    ``archived_real_events``, the real events archived so far, this cut's included, and
    ``replaced_summaries``, the summaries replaced so far, the previous one included."""
    previous = snapshot.window.summary
    real, replaced = _tally_of(previous)
    if previous is None or real is None or replaced is None:
        # the first summary (or one written before this tally): what is archived is real
        real, replaced = snapshot.archived_count, 0
    else:
        # archiving without a summary (another strategy) in between left the tally behind
        real = max(real, snapshot.archived_count - replaced)
    return {
        "archived_real_events": real + len(cut.archived),
        "replaced_summaries": replaced + (1 if previous is not None else 0),
    }


def _tally_of(summary: Event | None) -> tuple[int | None, int | None]:
    if summary is None:
        return None, None
    real, replaced = (
        summary.metadata.get("archived_real_events"),
        summary.metadata.get("replaced_summaries"),
    )
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (real, replaced))
    return (real, replaced) if ok else (None, None)


def archived_counts(cid: str, snapshot: Snapshot) -> Steps[tuple[int, int]]:
    """``(archived events that are not summaries, archived summaries)`` of a conversation,
    for ``stats()``. The store counts every archived event, replaced summaries included; the
    current summary's tally says how many summaries were replaced. While the archive cap has
    dropped nothing, every one of them is still archived: the counts follow from the
    snapshot. Once the cap has dropped the oldest archived events (some of those summaries
    with them), the archive is read and counted: it holds at most the cap's events."""
    total = snapshot.archived_count
    real, replaced = _tally_of(snapshot.window.summary)
    if real is None or replaced is None or replaced == 0:
        return total, 0
    if real + replaced <= total:
        return total - replaced, replaced
    archived = [e for e in (yield from steps.history(cid)) if e.archived]
    summaries = sum(e.type is EventType.SUMMARY for e in archived)
    return len(archived) - summaries, summaries


__all__ = ["archive_tally", "archived_counts", "real_summary_text"]
