"""The store registry: URL schemes to store classes, sync and async.

A :class:`~chat_memory.backends.base.Store` (or :class:`~chat_memory.backends.aio.AsyncStore`)
subclass that declares ``schemes`` registers itself when its class is created: the base classes
call :func:`register` (:func:`register_async`) from ``__init_subclass__``. Everything else a
store offers is declared on its class too, as lazy ``"module:Class"`` strings where importing
would pull a driver: its native async twin (``async_twin``), its long-term memory
(``long_term``), and its canvas node (``node``). So this module names no store and has no
import of one (the base classes import it, never the reverse): it finds them by importing the
modules below and reading what registered itself.

The built-in stores are the modules of this package (found, not listed: a new store is one new
module); installed packages add theirs, sync or async, through the ``chat_memory.stores``
entry-point group, e.g. in their ``pyproject.toml``::

    [project.entry-points."chat_memory.stores"]
    mystore = "my_package.store:MyStore"

Both are loaded the first time a store is looked up, never at ``import chat_memory``, so that
no driver is imported before it is needed.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, TypeVar

from ..errors import ConfigurationError
from ..plugins import import_modules_of, load_entry_points

if TYPE_CHECKING:
    from .aio import AsyncStore
    from .base import Store

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "chat_memory.stores"

#: a sync or an async store class (the two tables are kept apart: a scheme has one of each)
C = TypeVar("C", "type[Store]", "type[AsyncStore]")

_by_scheme: dict[str, type[Store]] = {}
_async_by_scheme: dict[str, type[AsyncStore]] = {}
_loaded = False
_load_lock = threading.RLock()


def register(store_class: type[Store]) -> None:
    """Map each of ``store_class.schemes`` to it. A scheme another class already owns is a
    :class:`ConfigurationError` (re-registering the same class, as a module reload does, is
    not)."""
    _claim(_by_scheme, store_class)


def register_async(store_class: type[AsyncStore]) -> None:
    """:func:`register` for a natively async store: :func:`~chat_memory.open_async_store`
    serves its ``schemes`` with it (the sync store's ``async_twin`` is the other way)."""
    _claim(_async_by_scheme, store_class)


def unregister(store_class: type[Store] | type[AsyncStore]) -> None:
    """Forget every scheme that maps to ``store_class`` (for tests and plugin reloads)."""
    _forget(_by_scheme, store_class)
    _forget(_async_by_scheme, store_class)


def store_classes() -> list[type[Store]]:
    """Every registered store class (built-in ones and installed plugins), once each, in
    registration order."""
    _load()
    return list(dict.fromkeys(_by_scheme.values()))


def async_store_classes() -> list[type[AsyncStore]]:
    """Every natively async store class registered by its own ``schemes``, once each (a twin
    found only through its sync store's ``async_twin`` is listed once something opened it)."""
    _load()
    return list(dict.fromkeys(_async_by_scheme.values()))


def schemes() -> list[str]:
    """Every registered URL scheme, sorted."""
    _load()
    return sorted(_by_scheme)


def store_class_for(scheme: str) -> type[Store]:
    """The store class of a URL scheme: an exact match, else the part before ``+``
    (``postgresql+psycopg`` → ``postgresql``). An unknown scheme is a
    :class:`ConfigurationError` that lists the known ones."""
    _load()
    found = _lookup(_by_scheme, scheme)
    if found is None:
        raise ConfigurationError(
            f"store URL scheme ({scheme.lower()!r}) is not supported; "
            f"known schemes: {', '.join(schemes())}"
        )
    return found


def async_store_class_for(scheme: str) -> type[AsyncStore] | None:
    """The natively async store registered for a URL scheme by its own ``schemes`` (matched
    like :func:`store_class_for`), or None."""
    _load()
    return _lookup(_async_by_scheme, scheme)


def _lookup(table: dict[str, C], scheme: str) -> C | None:
    scheme = scheme.lower()
    return table.get(scheme) or table.get(scheme.split("+", 1)[0])


def _forget(table: dict[str, C], store_class: object) -> None:
    for scheme in [s for s, c in table.items() if c is store_class]:
        del table[scheme]


def _claim(table: dict[str, C], store_class: C) -> None:
    for scheme in store_class.schemes:
        scheme = scheme.lower()
        owner = table.get(scheme)
        if owner is not None and _qualified(owner) != _qualified(store_class):
            raise ConfigurationError(
                f"store URL scheme {scheme!r} of {_qualified(store_class)} is already "
                f"registered by {_qualified(owner)}"
            )
        table[scheme] = store_class


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        import_modules_of(__package__ or "chat_memory.backends")
        load_entry_points(
            ENTRY_POINT_GROUP,
            "store",
            "a Store or AsyncStore subclass declaring schemes",
            _is_registered,
        )
        _loaded = True


def _is_registered(loaded: object) -> bool:
    # importing the class registered it (its base class's __init_subclass__ did), so the
    # registry needs to know no store type
    return any(loaded is cls for cls in (*_by_scheme.values(), *_async_by_scheme.values()))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
