"""``token_count``: the window within ``max_tokens`` estimated tokens."""

from __future__ import annotations

from ..events import Window
from .base import Cut, Strategy, choose_cut, compact_target, keep_min_turns


class TokenCount(Strategy):
    """Over ``max_tokens`` window tokens (pinned events and the summary included), archive
    the oldest turns until the window fits in ``compact_to_ratio`` of ``max_tokens``, or
    only the newest turn is left; it keeps the newest ``MIN_KEPT_TURNS`` (2) turns when the
    window with them fits in ``max_tokens``."""

    name = "token_count"
    label = "Token count"
    order = 40
    settings = ("max_tokens", "compact_to_ratio")

    def plan(self, window: Window) -> Cut | None:
        total = window.tokens()
        budget = self.config.max_tokens
        if total <= budget:
            return None
        target = compact_target(budget, self.config.compact_to_ratio)
        required = 0
        within: int | None = None  # events to drop to be within the limit itself
        for event in window.active:
            if total <= target:
                break
            total -= event.tokens or 0
            required += 1
            if within is None and total <= budget:
                within = required
        within = required if within is None else within
        return choose_cut(
            window.active, keep_min_turns(window.active, required, within), within=within
        )
