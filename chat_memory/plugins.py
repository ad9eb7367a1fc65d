"""How the registries find what registers itself (stores, strategies): the modules of a
built-in package, and the entry points installed packages declare. Importing a module that
defines a subclass is what registers it (its base class's ``__init_subclass__``), so neither
helper needs to know what it loads."""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from importlib import metadata

log = logging.getLogger("chat_memory.plugins")


def import_modules_of(package_name: str) -> None:
    """Import every public module of a package (a module that defines nothing to register,
    such as ``base``, registers nothing)."""
    package = importlib.import_module(package_name)
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{module.name}")


def load_entry_points(
    group: str, kind: str, expected: str, registered: Callable[[object], bool]
) -> None:
    """Load every entry point of ``group`` (plugins of a ``kind``: "store", "strategy"). One
    that fails to import, or whose object ``registered`` does not recognise (it is not what
    ``expected`` says), is logged and skipped, so that one broken package cannot take the
    others down with it."""
    for entry_point in metadata.entry_points(group=group):
        try:
            loaded = entry_point.load()
        except Exception as exc:  # any import failure of third-party code, a name clash included
            log.warning(
                "chat-memory: %s plugin %r could not be loaded: %s: %s",
                kind,
                entry_point.value,
                type(exc).__name__,
                exc,
            )
            continue
        if not registered(loaded):
            log.warning(
                "chat-memory: %s plugin %r is not %s; skipped", kind, entry_point.value, expected
            )
