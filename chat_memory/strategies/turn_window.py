"""``turn_window``: at most ``max_turns`` turns."""

from __future__ import annotations

from ..events import Window, turn_starts
from .base import Cut, Strategy, choose_cut, compact_target, keep_min_turns


class TurnWindow(Strategy):
    """Over ``max_turns`` turns, archive the oldest turns until ``compact_to_ratio`` of
    ``max_turns`` remain (all ``max_turns`` with a ratio of 1), but never fewer than
    ``min(max_turns, MIN_KEPT_TURNS)`` (2): a window of 3 keeps 2 turns, not 1."""

    name = "turn_window"
    label = "Turn window (by turns)"
    order = 30
    settings = ("max_turns", "compact_to_ratio")

    def plan(self, window: Window) -> Cut | None:
        starts = turn_starts(window.active)
        excess = len(starts) - self.config.max_turns
        if excess <= 0:
            return None
        keep = compact_target(self.config.max_turns, self.config.compact_to_ratio)
        within = starts[excess]
        required = keep_min_turns(window.active, starts[len(starts) - keep], within)
        return choose_cut(window.active, required, within=within)
