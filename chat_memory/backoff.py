"""Bounded, jittered exponential backoff: how the engine's compare-and-swap loop, the stores
and long-term memory retry a write that lost an optimistic-concurrency race."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .errors import ConcurrencyError

T = TypeVar("T")


@dataclass
class Backoff:
    """Bounded, jittered exponential backoff for optimistic-concurrency retries."""

    attempts: int = 40
    base: float = 0.002
    cap: float = 0.25

    def delays(self) -> Iterable[float]:
        for attempt in range(self.attempts):
            yield random.uniform(0, min(self.cap, self.base * (2**attempt)))

    def run(self, operation: Callable[[], T | None], *, what: str) -> T:
        """Call ``operation`` until it returns something other than None; sleep between tries.
        Raises :class:`ConcurrencyError` when every attempt lost its race."""
        for delay in self.delays():
            result = operation()
            if result is not None:
                return result
            time.sleep(delay)
        raise ConcurrencyError(
            f"{what} lost {self.attempts} optimistic-concurrency races in a row; giving up"
        )
