"""Compaction strategies: pure functions from a window to a cut, one module per strategy.

Each module's :class:`Strategy` subclass registers itself by its ``name``; the registry
(:mod:`.registry`) finds the built-in ones as the modules of this package and installed ones
through the ``chat_memory.strategies`` entry-point group, and lists them by their ``order``.
A strategy of your own is a subclass in your own module, with its own settings
(:class:`StrategySettings`) if it needs new ones: see docs/extending.md."""

from __future__ import annotations

from .auto_compact import AutoCompact
from .base import (
    MIN_KEPT_TURNS,
    SUPERSEDING_TURNS,
    Cut,
    Strategy,
    StrategySettings,
    choose_cut,
    is_superseded,
    keep_min_turns,
    safe_cuts,
    strategy_for,
)

# re-exported for ``from chat_memory.strategies import TurnWindow``; registration does not
# depend on these imports (the registry finds every module of this package)
from .none import NoCompaction
from .recursive_summarization import RecursiveSummarization
from .registry import ENTRY_POINT_GROUP, strategy_class, strategy_classes, strategy_names
from .sliding_window import SlidingWindow
from .token_count import TokenCount
from .turn_window import TurnWindow

__all__ = [
    "ENTRY_POINT_GROUP",
    "MIN_KEPT_TURNS",
    "SUPERSEDING_TURNS",
    "AutoCompact",
    "Cut",
    "NoCompaction",
    "RecursiveSummarization",
    "SlidingWindow",
    "Strategy",
    "StrategySettings",
    "TokenCount",
    "TurnWindow",
    "choose_cut",
    "is_superseded",
    "keep_min_turns",
    "safe_cuts",
    "strategy_class",
    "strategy_classes",
    "strategy_for",
    "strategy_names",
]
