"""``sliding_window``: at most ``max_events`` active real events."""

from __future__ import annotations

from ..events import Window
from .base import Cut, Strategy, choose_cut, compact_target, keep_min_turns


class SlidingWindow(Strategy):
    """Over ``max_events`` active real events, archive the oldest so that at most
    ``compact_to_ratio`` of ``max_events`` remain, the cut moved forward to the next turn
    start; it keeps the newest ``MIN_KEPT_TURNS`` (2) turns when they fit in ``max_events``."""

    name = "sliding_window"
    label = "Sliding window (by events)"
    order = 20
    settings = ("max_events", "compact_to_ratio")

    def plan(self, window: Window) -> Cut | None:
        size = len(window.active)
        if size <= self.config.max_events:
            return None
        keep = compact_target(self.config.max_events, self.config.compact_to_ratio)
        within = size - self.config.max_events
        return choose_cut(
            window.active, keep_min_turns(window.active, size - keep, within), within=within
        )
