"""``long_term_memory(store, namespace)``: the memory files of a namespace on the store the
conversations already use (one URL to configure), whatever kind of store it is.

Which :class:`MemoryFiles` class goes with a store is declared on the store's class
(``long_term = "package.module:Class"``, inherited by subclasses and imported only when used,
so that naming it imports no driver); nothing here lists the stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends.declarations import declared_class
from ..errors import ConfigurationError
from ..lifecycle.keys import Scope, scoped_namespace
from .files import MemoryFiles


def long_term_memory(
    store: Any,
    namespace: str,
    *,
    user: str | None = None,
    app: str | None = None,
    **options: Any,
) -> MemoryFiles:
    """The memory files of ``namespace`` kept in ``store`` (a chat-memory store, or a URL for
    :func:`~chat_memory.open_store`), reusing its connection. With ``user`` (and ``app``), the
    namespace is the user's own (kept under the scope's reserved name, so that
    ``memory.forget(user=...)`` erases it with its versions; docs/lifecycle.md). ``options``:
    ``limits`` (:class:`MemoryLimits`), ``retry`` (:class:`~chat_memory.backoff.Backoff`),
    ``retention_seconds`` (``memory.sweep()`` deletes the namespace once nothing was written
    to it for that long; stores that keep it: memory://, S3). A store whose class declares no
    ``long_term`` is a :class:`ConfigurationError` listing those that do."""
    if user is not None:
        namespace = scoped_namespace(Scope(user, app), namespace)
    elif app is not None:
        raise ConfigurationError(f"app ({app!r}) needs a user: long_term_memory(..., user=...)")
    if isinstance(store, str):
        from ..backends import open_store

        store = open_store(store)
    files_class = declared_class(type(store), "long_term")
    if files_class is None:
        raise ConfigurationError(
            f"store ({type(store).__name__}) has no long-term memory implementation; "
            f"stores that have one: {', '.join(_stores_with_long_term())}"
        )
    if not issubclass(files_class, MemoryFiles):
        raise ConfigurationError(
            f"{type(store).__name__}.long_term ({files_class.__module__}:"
            f"{files_class.__qualname__}) must be a MemoryFiles subclass"
        )
    # the backends' constructor is (store, namespace, **options), not MemoryFiles' own
    build: Callable[..., MemoryFiles] = files_class
    return build(store, namespace, **options)


def _stores_with_long_term() -> list[str]:
    from ..backends import store_classes

    return sorted(cls.__name__ for cls in store_classes() if cls.long_term is not None)
