"""Storage backends and ``open_store``, which picks one by URL scheme."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ChatMemoryError, ConfigurationError
from .base import CompactionPlan, Snapshot, Store, check_conversation_id
from .in_memory import InMemoryStore
from .urls import redact_url

ENV_URL = "CHAT_MEMORY_URL"

# scheme -> (module, class, pip extra). Modules are imported lazily so that a missing driver
# only matters to the user of that backend.
_BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "memory": ("chat_memory.backends.in_memory", "InMemoryStore", None),
    "redis": ("chat_memory.backends.redis", "RedisStore", "redis"),
    "rediss": ("chat_memory.backends.redis", "RedisStore", "redis"),
    "redis+cluster": ("chat_memory.backends.redis", "RedisStore", "redis"),
    "rediss+cluster": ("chat_memory.backends.redis", "RedisStore", "redis"),
    "s3": ("chat_memory.backends.s3", "S3Store", "s3"),
}
_SQL = ("chat_memory.backends.sql", "SQLStore", None)
_SQL_DIALECTS = {"sqlite", "postgresql", "postgres", "mysql", "mariadb", "mssql", "oracle"}
_SQL_EXTRAS = {"postgresql": "postgres", "postgres": "postgres"}


def _backend_for(url: str) -> tuple[str, str, str | None]:
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ConfigurationError(
            f"store URL ({redact_url(url)!r}) has no scheme; use memory://, sqlite:///path, postgresql+psycopg://…, "
            "redis://…, redis+cluster://…, or s3://bucket/prefix"
        )
    if scheme in _BACKENDS:
        return _BACKENDS[scheme]
    dialect = scheme.split("+", 1)[0]
    if dialect in _SQL_DIALECTS:
        return (_SQL[0], _SQL[1], _SQL_EXTRAS.get(dialect))
    known = sorted({*_BACKENDS, *_SQL_DIALECTS})
    raise ConfigurationError(f"store URL scheme ({scheme!r}) is not supported; known schemes: {', '.join(known)}")


def open_store(url: str | None = None, **options: Any) -> Store:
    """Open the store a URL names: ``memory://``, any SQLAlchemy URL (``sqlite:///chat.db``,
    ``postgresql+psycopg://…``), ``redis://``/``rediss://``, ``redis+cluster://host:port``, or
    ``s3://bucket/prefix?endpoint_url=…&region=…``. Without a URL, the built-in store:
    ``CHAT_MEMORY_URL`` or the embedded SQLite file (see :func:`default_url`)."""
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"store URL ({url!r}) must be a string")
    url = url or default_url()
    module_name, class_name, extra = _backend_for(url)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("chat_memory"):
            raise ConfigurationError(f"the backend for {url.split(':', 1)[0]}:// is not available in this version") from exc
        hint = f"pip install 'chat-memory[{extra}]'" if extra else "install its driver"
        raise ConfigurationError(f"the driver for {url.split(':', 1)[0]}:// is missing ({exc.name}); {hint}") from exc
    store_class: type[Store] = getattr(module, class_name)
    scheme = url.split(":", 1)[0]
    try:
        return store_class.from_url(url, **options)
    except ChatMemoryError:
        raise
    except ModuleNotFoundError as exc:  # a SQL dialect's driver (pymysql…) is imported when the engine is built
        raise ConfigurationError(f"the driver for {scheme}:// is missing ({exc.name}); " + (f"pip install 'chat-memory[{extra}]'" if extra else "install it")) from exc
    except Exception as exc:  # whatever else a driver says about a URL it cannot use
        raise ConfigurationError(f"the {scheme}:// store cannot be opened from this URL: {type(exc).__name__}: {str(exc).replace(url, redact_url(url))}") from exc


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


__all__ = ["ENV_URL", "CompactionPlan", "InMemoryStore", "Snapshot", "Store", "check_conversation_id", "default_path", "default_url", "open_store"]
