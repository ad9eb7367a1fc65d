"""``sliding_window``: at most ``max_events`` active real events."""

from __future__ import annotations

from ..events import Window
from .base import Cut, Strategy, choose_cut


class SlidingWindow(Strategy):
    """Over ``max_events`` active real events, archive the oldest so that at most
    ``max_events`` remain, the cut moved forward to the next turn start."""

    name = "sliding_window"
    label = "Sliding window (by events)"
    settings = ("max_events",)

    def plan(self, window: Window) -> Cut | None:
        return choose_cut(window.active, len(window.active) - self.config.max_events)
