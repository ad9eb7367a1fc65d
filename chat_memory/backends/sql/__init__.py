"""The SQL store (SQLAlchemy Core): the embedded SQLite default, PostgreSQL, MySQL.

``open_store("sqlite:///chat.db")``, ``open_store("postgresql+psycopg://user@host/db")`` or
``SQLStore(engine)``; see :class:`SQLStore` and ``docs/sql.md``. :class:`AsyncSQLStore` is the
same store for the async API (``open_async_store``), over SQLAlchemy's asyncio extension.
"""

from __future__ import annotations

from .schema import DEFAULT_TABLE_PREFIX, SCHEMA_VERSION
from .async_store import AsyncSQLStore
from .store import SQLStore

__all__ = ["DEFAULT_TABLE_PREFIX", "SCHEMA_VERSION", "AsyncSQLStore", "SQLStore"]
