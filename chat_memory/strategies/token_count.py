"""``token_count``: the window within ``max_tokens`` estimated tokens."""

from __future__ import annotations

from ..events import Window
from .base import Cut, Strategy, choose_cut


class TokenCount(Strategy):
    """Over ``max_tokens`` window tokens (pinned events and the summary included), archive
    the oldest turns until the window fits, or only the newest turn is left."""

    name = "token_count"
    label = "Token count"
    settings = ("max_tokens",)

    def plan(self, window: Window) -> Cut | None:
        total = window.tokens()
        budget = self.config.max_tokens
        if total <= budget:
            return None
        required = 0
        for event in window.active:
            if total <= budget:
                break
            total -= event.tokens or 0
            required += 1
        return choose_cut(window.active, required)
