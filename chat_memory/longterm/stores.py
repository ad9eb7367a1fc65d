"""``long_term_memory(store, namespace)``: the memory files of a namespace on the store the
conversations already use (one URL to configure), whatever kind of store it is."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigurationError
from .files import MemoryFiles

#: store class (qualified name) -> the MemoryFiles class for it; matched along the store's
#: MRO so subclasses inherit their base's, and imported only when used (no driver import)
IMPLEMENTATIONS: dict[str, str] = {
    "chat_memory.backends.in_memory.InMemoryStore": "chat_memory.longterm.in_memory:InMemoryFiles",
    "chat_memory.backends.sql.store.SQLStore": "chat_memory.longterm.sql:SQLFiles",
    "chat_memory.backends.redis.RedisStore": "chat_memory.longterm.redis:RedisFiles",
    "chat_memory.backends.s3.store.S3Store": "chat_memory.longterm.s3:S3Files",
}


def long_term_memory(store: Any, namespace: str, **options: Any) -> MemoryFiles:
    """The memory files of ``namespace`` kept in ``store`` (a chat-memory store, or a URL for
    :func:`~chat_memory.open_store`), reusing its connection. ``options``: ``limits``
    (:class:`MemoryLimits`), ``retry`` (:class:`~chat_memory.backends.base.Backoff`)."""
    if isinstance(store, str):
        from ..backends import open_store

        store = open_store(store)
    for cls in type(store).__mro__:
        target = IMPLEMENTATIONS.get(f"{cls.__module__}.{cls.__qualname__}")
        if target is not None:
            module, name = target.split(":")
            files_class = getattr(importlib.import_module(module), name)
            return files_class(store, namespace, **options)
    raise ConfigurationError(
        f"store ({type(store).__name__}) has no long-term memory implementation; "
        f"supported: {', '.join(n.rsplit('.', 1)[1] for n in IMPLEMENTATIONS)}"
    )
