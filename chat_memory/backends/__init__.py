"""Storage backends and :func:`open_store`, which picks one by URL scheme.

Every store is a :class:`Store` subclass in its own module that declares its schemes, the
pip extra of its driver, its URL options and its canvas node; :mod:`.registry` finds them.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import ChatMemoryError, ConfigurationError
from .base import CompactionPlan, ConnectionField, Snapshot, Store, StoreNode, StoreOption, check_conversation_id
from .registry import schemes, store_class_for, store_classes
from .urls import redact_url

ENV_URL = "CHAT_MEMORY_URL"
T = TypeVar("T")

#: The built-in store's node: it follows ``CHAT_MEMORY_URL``, else the embedded SQLite file.
BUILTIN_NODE = StoreNode(
    "chatMemory",
    "Chat Memory",
    "Chat memory in the built-in store (follows CHAT_MEMORY_URL; an embedded SQLite file by default).",
    "builtin",
    order=0,
)


def open_store(url: str | None = None, **options: Any) -> Store:
    """Open the store a URL names: ``memory://``, any SQLAlchemy URL (``sqlite:///chat.db``,
    ``postgresql+psycopg://…``, ``postgres://…``), ``redis://``/``rediss://``,
    ``redis+cluster://host:port``, or ``s3://bucket/prefix?endpoint_url=…&region=…``, or one
    of an installed plugin. Without a URL, the built-in store: ``CHAT_MEMORY_URL`` or the
    embedded SQLite file (see :func:`default_url`). Keyword options are the store's own."""
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"store URL ({url!r}) must be a string")
    url = url or default_url()
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ConfigurationError(
            f"store URL ({redact_url(url)!r}) has no scheme; use one of: {', '.join(f'{s}://' for s in schemes())}"
        )
    store_class = store_class_for(scheme)
    return opening(scheme, store_class.extra_for(scheme), lambda: store_class.from_url(url, **options))


def opening(scheme: str, extra: str | None, build: Callable[[], T]) -> T:
    """``build()`` a store, turning what a driver raises into a
    :class:`ConfigurationError` that names the scheme (and the extra installing a missing
    driver) and never shows a password."""
    try:
        return build()
    except ChatMemoryError:
        raise
    except ModuleNotFoundError as exc:  # a driver imported when the store or its engine is built
        hint = f"pip install 'chat-memory[{extra}]'" if extra else f"install the {exc.name} package"
        raise ConfigurationError(f"the driver for {scheme}:// is missing ({exc.name}); {hint}") from exc
    except Exception as exc:  # whatever else a driver says about a URL it cannot use
        raise ConfigurationError(
            f"the {scheme}:// store cannot be opened from this URL: {type(exc).__name__}: {redact_url(str(exc))}"
        ) from exc


def default_path() -> Path:
    """Where the embedded SQLite store lives: ``$XDG_DATA_HOME/chat-memory/chat-memory.db``
    (``~/.local/share/chat-memory/chat-memory.db`` by default)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "chat-memory" / "chat-memory.db"


def default_url() -> str:
    """The built-in store's URL: ``CHAT_MEMORY_URL`` when set, else the embedded SQLite file.
    Creates nothing (the SQL store creates the file's folder when it is opened)."""
    url = os.environ.get(ENV_URL, "").strip()
    if url:
        return url
    return f"sqlite:///{default_path()}"


__all__ = [
    "BUILTIN_NODE",
    "ENV_URL",
    "CompactionPlan",
    "ConnectionField",
    "Snapshot",
    "Store",
    "StoreNode",
    "StoreOption",
    "check_conversation_id",
    "default_path",
    "default_url",
    "open_store",
    "redact_url",
    "schemes",
    "store_class_for",
    "store_classes",
]
