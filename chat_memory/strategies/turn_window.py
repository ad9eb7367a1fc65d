"""``turn_window``: at most ``max_turns`` turns."""

from __future__ import annotations

from ..events import Window, turn_starts
from .base import Cut, Strategy, choose_cut


class TurnWindow(Strategy):
    """Over ``max_turns`` turns, archive the oldest turns until ``max_turns`` remain."""

    name = "turn_window"
    label = "Turn window (by turns)"
    settings = ("max_turns",)

    def plan(self, window: Window) -> Cut | None:
        starts = turn_starts(window.active)
        excess = len(starts) - self.config.max_turns
        if excess <= 0:
            return None
        return choose_cut(window.active, starts[excess])
