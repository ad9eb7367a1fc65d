"""What every strategy shares: where a window may be cut, and the shape of a cut.

Strategies are pure: a window in, a cut (or nothing) out. They know no storage."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..config import MemoryConfig
from ..events import Event, EventType, Window, turn_starts


@dataclass(frozen=True)
class Cut:
    """Archive ``window.active[:index]``; keep the rest."""

    index: int
    archived: tuple[Event, ...]
    kept: tuple[Event, ...]

    @classmethod
    def at(cls, active: Sequence[Event], index: int) -> Cut:
        return cls(index=index, archived=tuple(active[:index]), kept=tuple(active[index:]))

    @property
    def through_seq(self) -> int:
        """The seq of the last archived event."""
        return self.archived[-1].seq or 0


def safe_cuts(active: Sequence[Event]) -> list[int]:
    """Indexes where the window may be cut: turn starts after the first, up to and including
    the newest turn's start, that do not separate a tool result from its tool call."""
    starts = turn_starts(active)[1:]
    if not starts:
        return []
    call_at = {e.tool_call_id: i for i, e in enumerate(active) if e.type is EventType.TOOL_CALL}
    unsafe: set[int] = set()
    for j, event in enumerate(active):
        if event.type is EventType.TOOL_RESULT:
            k = call_at.get(event.tool_call_id)
            if k is not None and k < j:
                unsafe.update(s for s in starts if k < s <= j)
    return [s for s in starts if s not in unsafe]


def choose_cut(active: Sequence[Event], required: int) -> Cut | None:
    """The cut archiving at least ``required`` events at the nearest safe point at or after
    it; when none is that far, the furthest safe point (only the newest turn may be left)."""
    if required <= 0:
        return None
    candidates = safe_cuts(active)
    if not candidates:
        return None
    later = [c for c in candidates if c >= required]
    return Cut.at(active, later[0] if later else candidates[-1])


class Strategy(ABC):
    """A compaction strategy: decides whether a window is over its limit and where to cut."""

    name: ClassVar[str]
    #: Whether a cut also needs a summary written by a summarizer model.
    summarizes: ClassVar[bool] = False

    def __init__(self, config: MemoryConfig) -> None:
        self.config = config

    @abstractmethod
    def plan(self, window: Window) -> Cut | None:
        """The cut to make now, or None when the window is within its limit (or cannot be cut)."""
