"""How stores meet failure: a driver exception escaping a store method becomes a
:class:`StorageError` (:func:`wrap_driver_errors`, applied once by
:class:`~chat_memory.backends.base.Store` to every protocol method), and a write that lost an
optimistic-concurrency race is retried with bounded, jittered backoff (:class:`Backoff`).
"""

from __future__ import annotations

import functools
import inspect
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ChatMemoryError, ConcurrencyError, StorageError

F = TypeVar("F", bound=Callable[..., Any])


def wrap_driver_errors(method: F) -> F:
    """Turn any non-chat-memory exception escaping ``method`` (a plain or a coroutine
    method) into a :class:`StorageError`."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def awrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _driver_errors(self, method):
                return await method(self, *args, **kwargs)

        wrapper: Any = awrapper
    else:

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _driver_errors(self, method):
                return method(self, *args, **kwargs)

    wrapper._wraps_driver_errors = True
    return wrapper  # type: ignore[no-any-return]


@contextmanager
def _driver_errors(store: Any, method: Callable[..., Any]) -> Iterator[None]:
    try:
        yield
    except ChatMemoryError:
        raise
    except Exception as exc:
        raise StorageError(
            f"{type(store).__name__}.{method.__name__} failed: {type(exc).__name__}: {exc}"
        ) from exc


@dataclass
class Backoff:
    """Bounded, jittered exponential backoff for optimistic-concurrency retries."""

    attempts: int = 40
    base: float = 0.002
    cap: float = 0.25

    def delays(self) -> Iterable[float]:
        for attempt in range(self.attempts):
            yield random.uniform(0, min(self.cap, self.base * (2**attempt)))

    def run(self, operation: Callable[[], Any], *, what: str) -> Any:
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
