"""Creating or migrating the SQL schema: a duplicate key met there is the data's, reported at
once with its cause, never retried as a lost race (the schema lock serialises creators)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from chat_memory.backends.sql import SQLStore
from chat_memory.backends.sql.aio import AsyncSQLStore
from chat_memory.backends.sql.connections import is_conflict, is_schema_conflict
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError, StorageError

pytestmark = pytest.mark.postgres


def _duplicating(store: Any, calls: list[int]) -> None:
    """Make the store's schema step insert a row of ``meta`` that is there already, after
    creating the schema as usual: a duplicate key inside the schema transaction."""
    ensure = store.ops.ensure_schema
    meta = store.tables.meta

    def ensure_then_duplicate(connection: sa.Connection) -> None:
        calls.append(1)
        ensure(connection)
        connection.execute(meta.insert().values(name="schema_version", value="0"))

    store.ops.ensure_schema = ensure_then_duplicate


def test_a_duplicate_key_while_creating_the_schema_is_reported_at_once(postgres_url):
    calls: list[int] = []
    store = SQLStore.from_url(postgres_url, retry=Backoff(attempts=4, base=0.001))
    try:
        _duplicating(store, calls)
        with pytest.raises(StorageError) as raised:
            store.load("c")
        assert not isinstance(raised.value, ConcurrencyError)
        cause = raised.value.__cause__
        assert isinstance(cause, sa.exc.IntegrityError) and is_conflict(cause)
        assert not is_schema_conflict(cause)
        assert calls == [1]  # one attempt: no retry
    finally:
        store.close()


def test_the_async_store_reports_it_at_once_too(postgres_url):
    async def scenario() -> None:
        calls: list[int] = []
        url = postgres_url.replace("postgresql+psycopg://", "postgresql+psycopg_async://")
        store = AsyncSQLStore.from_url(url, retry=Backoff(attempts=4, base=0.001))
        try:
            _duplicating(store, calls)
            with pytest.raises(StorageError) as raised:
                await store.load("c")
            assert not isinstance(raised.value, ConcurrencyError)
            assert isinstance(raised.value.__cause__, sa.exc.IntegrityError)
            assert calls == [1]
        finally:
            await store.aclose()

    asyncio.run(scenario())
