"""``auto_compact``: let the conversation run verbatim until it nears the model's context
window, then fold everything before the newest turn into one summary."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..events import Window, turn_starts
from .base import Cut, Strategy, choose_cut

if TYPE_CHECKING:
    from ..config import MemoryConfig


class AutoCompact(Strategy):
    """Over ``compact_at_ratio`` × ``context_window_tokens`` window tokens (pinned events and
    the summary included), archive every turn but the newest and summarise them, with the
    previous summary, into a new one: the window restarts from that summary. Between
    compactions the window only grows at its end, so the prompt prefix stays stable and a
    provider's prompt cache serves it: the cheapest strategy for long chats."""

    name = "auto_compact"
    label = "Auto-compact (near the context window)"
    order = 60
    settings = ("context_window_tokens", "compact_at_ratio", "summary_placement")
    summarizes = True

    @classmethod
    def check_config(cls, config: MemoryConfig) -> None:
        if config.compact_at_ratio * config.context_window_tokens < 1:
            raise ConfigurationError(
                f"Compact at ratio ({config.compact_at_ratio}) of context window tokens "
                f"({config.context_window_tokens}) leaves no room for auto-compact"
            )

    @property
    def threshold(self) -> int:
        """The window tokens above which it compacts."""
        # the epsilon keeps 0.29 × 100 at 29 despite binary floating point
        return math.floor(self.config.compact_at_ratio * self.config.context_window_tokens + 1e-9)

    def plan(self, window: Window) -> Cut | None:
        if window.tokens() <= self.threshold:
            return None
        starts = turn_starts(window.active)
        if len(starts) < 2:
            return None
        # how many leading events must go for the window to be under the threshold: a cut that
        # keeps every tool pair and gets there beats one at the newest turn that splits a pair
        over = window.tokens() - self.threshold
        within = 0
        for event in window.active:
            if over <= 0:
                break
            over -= event.tokens or 0
            within += 1
        return choose_cut(window.active, starts[-1], within=within)

    def pressure(self, window: Window) -> float:
        return window.tokens() / max(1, self.threshold)
