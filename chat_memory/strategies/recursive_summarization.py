"""``recursive_summarization``: fold the oldest turns into a running summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..events import Event, Window
from .base import Cut, Strategy, choose_cut, compact_target, keep_min_turns

if TYPE_CHECKING:
    from ..config import MemoryConfig


class RecursiveSummarization(Strategy):
    """Over ``max_events`` active real events, keep the newest ``max_events_to_keep``, or
    ``compact_to_ratio`` of ``max_events`` when that is fewer (cut at a turn start), or more
    to keep the newest ``MIN_KEPT_TURNS`` (2) turns when they fit in ``max_events``, and
    summarise the rest, with the previous summary, into a new summary. The gap between the two limits is the hysteresis that keeps the summarizer
    from running on every turn."""

    name = "recursive_summarization"
    label = "Recursive summarization"
    order = 50
    settings = (
        "max_events",
        "max_events_to_keep",
        "overlap_size",
        "summary_placement",
        "compact_to_ratio",
    )
    summarizes = True

    @classmethod
    def check_config(cls, config: MemoryConfig) -> None:
        if config.max_events <= config.max_events_to_keep:
            raise ConfigurationError(
                f"Max events ({config.max_events}) must be greater than max events to keep "
                f"({config.max_events_to_keep}) for recursive summarization"
            )
        if config.overlap_size >= config.max_events_to_keep:
            raise ConfigurationError(
                f"Overlap size ({config.overlap_size}) must be less than max events to keep "
                f"({config.max_events_to_keep}) for recursive summarization"
            )

    def plan(self, window: Window) -> Cut | None:
        if len(window.active) <= self.config.max_events:
            return None
        size = len(window.active)
        # its own lower mark already keeps the prefix stable; the ratio only lowers it further
        keep = min(
            self.config.max_events_to_keep,
            compact_target(self.config.max_events, self.config.compact_to_ratio),
        )
        within = size - self.config.max_events
        return choose_cut(
            window.active, keep_min_turns(window.active, size - keep, within), within=within
        )

    def pressure(self, window: Window) -> float:
        return len(window.active) / self.config.max_events

    def upcoming(self, cut: Cut) -> list[Event]:
        """The first ``overlap_size`` kept events: context for the summarizer, not summarised."""
        return list(cut.kept[: self.config.overlap_size])
