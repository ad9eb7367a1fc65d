"""How stores meet failure: a driver exception escaping a store method becomes a
:class:`StorageError` (:func:`wrap_driver_errors`, applied once by
:class:`~chat_memory.backends.base.Store` to every protocol method). A write that lost an
optimistic-concurrency race is retried by :class:`chat_memory.backoff.Backoff`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import ChatMemoryError, StorageError

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
