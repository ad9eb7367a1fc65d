"""Compaction strategies: pure functions from a window to a cut. One module per strategy."""

from __future__ import annotations

from ..config import CompactionStrategy, MemoryConfig
from .base import Cut, Strategy, choose_cut, safe_cuts
from .none import NoCompaction
from .recursive_summarization import RecursiveSummarization
from .sliding_window import SlidingWindow
from .token_count import TokenCount
from .turn_window import TurnWindow

STRATEGIES: dict[CompactionStrategy, type[Strategy]] = {
    CompactionStrategy.NONE: NoCompaction,
    CompactionStrategy.SLIDING_WINDOW: SlidingWindow,
    CompactionStrategy.TURN_WINDOW: TurnWindow,
    CompactionStrategy.TOKEN_COUNT: TokenCount,
    CompactionStrategy.RECURSIVE_SUMMARIZATION: RecursiveSummarization,
}


def strategy_for(config: MemoryConfig) -> Strategy:
    """The strategy a config selects."""
    return STRATEGIES[config.compaction_strategy](config)


__all__ = [
    "STRATEGIES",
    "Cut",
    "NoCompaction",
    "RecursiveSummarization",
    "SlidingWindow",
    "Strategy",
    "TokenCount",
    "TurnWindow",
    "choose_cut",
    "safe_cuts",
    "strategy_for",
]
