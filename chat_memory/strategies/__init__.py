"""Compaction strategies: pure functions from a window to a cut, one module per strategy.

Each module's :class:`Strategy` subclass registers itself by its ``name``; importing this
package imports the built-in ones. A strategy of your own is a subclass in your own module
(imported before the config that names it is built)."""

from __future__ import annotations

from .base import (
    MIN_KEPT_TURNS,
    SUPERSEDING_TURNS,
    Cut,
    Strategy,
    choose_cut,
    is_superseded,
    keep_min_turns,
    safe_cuts,
    strategy_class,
    strategy_for,
    strategy_names,
)

# importing registers: this order is the order the canvas and the errors list them
# isort: off
from .none import NoCompaction
from .sliding_window import SlidingWindow
from .turn_window import TurnWindow
from .token_count import TokenCount
from .recursive_summarization import RecursiveSummarization
from .auto_compact import AutoCompact
# isort: on

__all__ = [
    "AutoCompact",
    "MIN_KEPT_TURNS",
    "SUPERSEDING_TURNS",
    "Cut",
    "NoCompaction",
    "RecursiveSummarization",
    "SlidingWindow",
    "Strategy",
    "TokenCount",
    "TurnWindow",
    "choose_cut",
    "is_superseded",
    "keep_min_turns",
    "safe_cuts",
    "strategy_class",
    "strategy_for",
    "strategy_names",
]
