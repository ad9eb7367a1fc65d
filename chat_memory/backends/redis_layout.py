"""Deprecated: the Redis stores' I/O-free half is :mod:`chat_memory.backends.redis_sansio`
(:class:`~chat_memory.backends.redis_sansio.RedisSansIO`, :data:`REDIS_LAYOUT`, :func:`lua`),
their requests, drivers and client setup :mod:`chat_memory.backends.redis_io`. This module
forwards the names it had, with a :class:`DeprecationWarning` when one is used, and will be
removed in the next release.

Importing it warns of nothing (the store registry imports every module of the package); only
taking a name from it does.
"""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = {
    "DEFAULT_MAX_ARCHIVED_EVENTS": "redis_sansio",
    "DEFAULT_PREFIX": "redis_sansio",
    "MIGRATION_LOCK_SECONDS": "redis_sansio",
    "REDIS_LAYOUT": "redis_sansio",
    "SEARCH_CALL_MICROSECONDS": "redis_sansio",
    "SEARCH_CHECK_BYTES": "redis_sansio",
    "SEARCH_RESTARTS": "redis_sansio",
    "URL_OPTIONS": "redis_sansio",
    "lua": "redis_sansio",
    "RedisLayout": "redis_sansio:RedisSansIO",
    "SCHEMES": "redis_io",
    "RETRIES": "redis_io",
    "LuaScript": "redis_io",
    "driver": "redis_io",
    "driver_target": "redis_io",
    "retry": "redis_io",
}


def __getattr__(name: str) -> Any:
    target = _MOVED.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, new_name = target.partition(":")
    new_name = new_name or name
    warnings.warn(
        f"chat_memory.backends.redis_layout is deprecated; use {new_name} from "
        f"chat_memory.backends.{module}",
        DeprecationWarning,
        stacklevel=2,
    )
    import importlib

    return getattr(importlib.import_module(f"chat_memory.backends.{module}"), new_name)


__all__ = sorted(_MOVED)
