"""The store registry: URL schemes to store classes.

A :class:`~chat_memory.backends.base.Store` subclass that declares ``schemes`` registers
itself when its module is imported. The built-in stores are the modules of this package
(found, not listed: a new store is one new module); installed packages add theirs through
the ``chat_memory.stores`` entry-point group, e.g. in their ``pyproject.toml``::

    [project.entry-points."chat_memory.stores"]
    mystore = "my_package.store:MyStore"

Both are loaded the first time a store is looked up, never at ``import chat_memory``, so
that no driver is imported before it is needed.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from importlib import metadata
from typing import TYPE_CHECKING

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import Store

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "chat_memory.stores"

_by_scheme: dict[str, type[Store]] = {}
_loaded = False
_load_lock = threading.RLock()


def register(store_class: type[Store]) -> None:
    """Map each of ``store_class.schemes`` to it. A scheme another class already owns is a
    :class:`ConfigurationError` (re-registering the same class, as a module reload does, is not)."""
    for scheme in store_class.schemes:
        scheme = scheme.lower()
        owner = _by_scheme.get(scheme)
        if owner is not None and _qualified(owner) != _qualified(store_class):
            raise ConfigurationError(
                f"store URL scheme {scheme!r} of {_qualified(store_class)} is already registered by {_qualified(owner)}"
            )
        _by_scheme[scheme] = store_class


def unregister(store_class: type[Store]) -> None:
    """Forget every scheme that maps to ``store_class`` (for tests and plugin reloads)."""
    for scheme in [s for s, c in _by_scheme.items() if c is store_class]:
        del _by_scheme[scheme]


def store_classes() -> list[type[Store]]:
    """Every registered store class (built-in ones and installed plugins), once each, in
    registration order."""
    _load()
    return list(dict.fromkeys(_by_scheme.values()))


def schemes() -> list[str]:
    """Every registered URL scheme, sorted."""
    _load()
    return sorted(_by_scheme)


def store_class_for(scheme: str) -> type[Store]:
    """The store class of a URL scheme: an exact match, else the part before ``+``
    (``postgresql+psycopg`` → ``postgresql``). An unknown scheme is a :class:`ConfigurationError`
    that lists the known ones."""
    _load()
    scheme = scheme.lower()
    found = _by_scheme.get(scheme) or _by_scheme.get(scheme.split("+", 1)[0])
    if found is None:
        raise ConfigurationError(
            f"store URL scheme ({scheme!r}) is not supported; known schemes: {', '.join(schemes())}"
        )
    return found


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        package = importlib.import_module(__package__)
        for module in pkgutil.iter_modules(package.__path__):
            # importing a module that holds no store (base, migrations…) registers nothing
            if not module.name.startswith("_"):
                importlib.import_module(f"{__package__}.{module.name}")
        for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
            _load_plugin(entry_point)
        _loaded = True


def _load_plugin(entry_point: metadata.EntryPoint) -> None:
    """Import a plugin's store; a broken plugin is logged and skipped, so that it cannot take
    the other stores down with it."""
    from .base import Store

    try:
        loaded = entry_point.load()
    except Exception as exc:  # any import failure of third-party code
        log.warning(
            "chat-memory: store plugin %r could not be loaded: %s: %s",
            entry_point.value,
            type(exc).__name__,
            exc,
        )
        return
    if not (isinstance(loaded, type) and issubclass(loaded, Store) and loaded.schemes):
        log.warning(
            "chat-memory: store plugin %r is not a Store subclass declaring schemes; skipped",
            entry_point.value,
        )
        return
    register(loaded)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
