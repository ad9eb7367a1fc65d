"""Deprecated: the async Redis store lives in :mod:`chat_memory.backends.redis_aio` (one
spelling of "async module" across the package: ``aio``). This module forwards
:class:`~chat_memory.backends.redis_aio.AsyncRedisStore` and ``DEFAULT_MAX_CONNECTIONS`` with
a :class:`DeprecationWarning` when one is used, and will be removed in the next release.

Importing it warns of nothing (the store registry imports every module of the package); only
taking a name from it does.
"""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = ("AsyncRedisStore", "DEFAULT_MAX_CONNECTIONS")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"chat_memory.backends.redis_async is deprecated; use {name} from "
        "chat_memory.backends.redis_aio",
        DeprecationWarning,
        stacklevel=2,
    )
    from . import redis_aio

    return getattr(redis_aio, name)


__all__ = list(_MOVED)
