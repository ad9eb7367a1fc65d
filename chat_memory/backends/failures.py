"""How stores meet failure: an exception of the store's driver escaping a store method becomes
a :class:`StorageError` (:func:`wrap_driver_errors`, applied once by
:class:`~chat_memory.backends.base.Store` to every protocol method). Which exceptions are the
driver's, each store class declares (:data:`DriverErrors`, its ``driver_errors``); anything
else, a bug in our code or in a store's included, propagates as itself, with its traceback. A
write that lost an optimistic-concurrency race is retried by :class:`chat_memory.backoff.Backoff`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias, TypeVar

from ..errors import ChatMemoryError, ConfigurationError, SchemaError, StorageError
from .urls import redact_message

F = TypeVar("F", bound=Callable[..., Any])

#: What a store class declares as ``driver_errors``: the exception classes its driver raises,
#: each given as a class or as a lazy ``"module:Class"`` name (imported on the first failure,
#: so that declaring it does not import the driver; a module that is not installed is skipped:
#: its driver cannot have raised anything).
DriverErrors: TypeAlias = tuple[str | type[BaseException], ...]

_resolved: dict[DriverErrors, tuple[type[BaseException], ...]] = {}


def driver_exceptions(owner: type) -> tuple[type[BaseException], ...]:
    """The exception classes ``owner.driver_errors`` names, resolved once per declaration.
    A name whose module imports but lacks the class is refused, naming both."""
    declared: DriverErrors = getattr(owner, "driver_errors", ())
    found = _resolved.get(declared)
    if found is None:
        found = tuple(c for c in (_resolve(owner, name) for name in declared) if c is not None)
        _resolved[declared] = found
    return found


def _resolve(owner: type, name: str | type[BaseException]) -> type[BaseException] | None:
    if not isinstance(name, str):
        return name
    module_name, colon, qualname = name.partition(":")
    target: Any = None
    if colon and module_name and qualname:
        try:
            target = importlib.import_module(module_name)
        except ModuleNotFoundError:
            return None
        for part in qualname.split("."):
            target = getattr(target, part, None)
    if not (isinstance(target, type) and issubclass(target, BaseException)):
        raise ConfigurationError(
            f"{owner.__name__}.driver_errors names {name!r}, which is not an exception class "
            "(expected 'module:Class')"
        )
    return target


def wrap_driver_errors(method: F) -> F:
    """Turn a driver exception (one the store's ``driver_errors`` declares) escaping ``method``
    (a plain or a coroutine method) into a :class:`StorageError` naming the store and the
    method, raised from the original; every other exception propagates unchanged."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def awrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            # try/except, not a context manager: every store call pays this wrapper
            try:
                return await method(self, *args, **kwargs)
            except ChatMemoryError:
                raise
            except Exception as exc:
                error = _storage_error(self, method, exc)
                if error is None:
                    raise
                raise error from exc

        wrapper: Any = awrapper
    else:

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except ChatMemoryError:
                raise
            except Exception as exc:
                error = _storage_error(self, method, exc)
                if error is None:
                    raise
                raise error from exc

    wrapper._wraps_driver_errors = True
    result: F = wrapper
    return result


def _storage_error(store: Any, method: Callable[..., Any], exc: Exception) -> StorageError | None:
    """The :class:`StorageError` a driver's exception escaping ``store.method`` becomes;
    None for any other exception (it propagates as itself)."""
    if not isinstance(exc, driver_exceptions(type(store))):
        return None
    # a driver's message may quote a URL (a connection string, an endpoint): never its secrets
    return StorageError(
        f"{type(store).__name__}.{method.__name__} failed: {type(exc).__name__}: "
        f"{redact_message(str(exc))}"
    )


@contextmanager
def stored_data(where: str) -> Iterator[None]:
    """Around the decoding of what a store read (JSON text, UTF-8, a document's shape): what
    cannot be decoded is corrupted or foreign data, a :class:`SchemaError` naming ``where``
    (raised from the decoder's error), not a bug of ours to propagate as itself."""
    try:
        yield
    except ChatMemoryError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OSError, EOFError, zlib.error) as exc:
        # JSONDecodeError, UnicodeDecodeError and pydantic's ValidationError are ValueErrors;
        # gzip's BadGzipFile an OSError
        raise SchemaError(
            f"{where} holds data chat-memory cannot read: {type(exc).__name__}: "
            f"{redact_message(str(exc))[:300]}"
        ) from exc
