"""``recursive_summarization``: fold the oldest turns into a running summary."""

from __future__ import annotations

from ..events import Event, Window
from .base import Cut, Strategy, choose_cut


class RecursiveSummarization(Strategy):
    """Over ``max_events`` active real events, keep the newest ``max_events_to_keep``
    (cut at a turn start) and summarise the rest, with the previous summary, into a new
    summary. The gap between the two limits is the hysteresis that keeps the summarizer
    from running on every turn."""

    name = "recursive_summarization"
    summarizes = True

    def plan(self, window: Window) -> Cut | None:
        if len(window.active) <= self.config.max_events:
            return None
        return choose_cut(window.active, len(window.active) - self.config.max_events_to_keep)

    def upcoming(self, cut: Cut) -> list[Event]:
        """The first ``overlap_size`` kept events: context for the summarizer, not summarised."""
        return list(cut.kept[: self.config.overlap_size])
