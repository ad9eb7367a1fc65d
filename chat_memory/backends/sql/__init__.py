"""The SQL store (SQLAlchemy Core): the embedded SQLite default, PostgreSQL, MySQL.

``open_store("sqlite:///chat.db")``, ``open_store("postgresql+psycopg://user@host/db")`` or
``SQLStore(engine)``; see :class:`SQLStore` and ``docs/sql.md``.
"""

from __future__ import annotations

from .schema import DEFAULT_TABLE_PREFIX, SCHEMA_VERSION
from .store import SQLStore

__all__ = ["DEFAULT_TABLE_PREFIX", "SCHEMA_VERSION", "SQLStore"]
