"""``none``: keep everything in the window."""

from __future__ import annotations

from ..events import Window
from .base import Cut, Strategy


class NoCompaction(Strategy):
    """Never compacts; the window is the whole conversation."""

    name = "none"
    label = "None (keep everything in view)"
    order = 10
    compacts = False

    def plan(self, window: Window) -> Cut | None:
        return None
