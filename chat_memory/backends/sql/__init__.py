"""The SQL store (SQLAlchemy Core): the embedded SQLite default, PostgreSQL, MySQL.

``open_store("sqlite:///chat.db")``, ``open_store("postgresql+psycopg://user@host/db")`` or
``SQLStore(engine)``; see :class:`SQLStore` and ``docs/sql.md``. :class:`AsyncSQLStore` is the
same store for the async API (``open_async_store``), over SQLAlchemy's asyncio extension.
"""

from __future__ import annotations

from typing import Any

from .schema import DEFAULT_TABLE_PREFIX, SCHEMA_VERSION
from .store import SQLStore


def __getattr__(name: str) -> Any:
    # the async store imports SQLAlchemy's asyncio extension: only when asked for
    if name == "AsyncSQLStore":
        from .aio import AsyncSQLStore

        return AsyncSQLStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_TABLE_PREFIX", "SCHEMA_VERSION", "AsyncSQLStore", "SQLStore"]
