"""AsyncSQLStore, the native async SQL store (SQLAlchemy asyncio: aiosqlite, psycopg's async
mode): sync and async stores sharing one database and its schema, open_async_store's choice,
errors and lost races. The store protocol on it is tests/stores/test_async_conformance.py's,
the engine's behaviour over it tests/test_engine*.py's (the ``native`` memory kind)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

# the asyncio extra is part of every test environment (.[all,test]): a missing driver fails
# here instead of skipping the file
import aiosqlite  # noqa: F401
import greenlet  # noqa: F401
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from chat_memory import (
    AsyncChatMemory,
    ChatMemory,
    Event,
    ThreadedStore,
    open_async_store,
)
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.sql import SCHEMA_VERSION, AsyncSQLStore, SQLStore
from chat_memory.backends.sql.aio import async_url
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError, ConfigurationError, StorageError
from chat_memory.testing.blocking import run_blocking
from tests.stores.test_sql import _meta, _pretend_version_1
from tests.support.helpers import fixed_tokens, turn

SQL_URLS = ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
TURNS = {"compaction_strategy": "turn_window", "max_turns": 2, "compact_to_ratio": 1.0}


@pytest.fixture(params=SQL_URLS)
def sql_url(request) -> str:
    return request.getfixturevalue(request.param)


def test_the_native_store_writes_a_turn_in_one_transaction(async_sqlite_store):
    assert isinstance(async_sqlite_store, AsyncSQLStore) and async_sqlite_store.native
    assert async_sqlite_store.compacts_while_appending
    assert async_sqlite_store.default_max_archived_events is None  # unbounded, as on SQLStore


# -- one database, both stores ----------------------------------------------------------


def test_sync_and_async_stores_read_what_the_other_wrote(sql_url):
    sync_store = SQLStore.from_url(sql_url)
    sync_memory = ChatMemory(sync_store, TURNS, token_counter=fixed_tokens)
    for i in range(3):
        sync_memory.add("c", turn(f"sync {i}"))  # the third compacts (records a compaction)

    async def native_side():
        async with AsyncSQLStore.from_url(sql_url) as native:
            memory = AsyncChatMemory(native, TURNS, token_counter=fixed_tokens)
            seen = [e.content for e in await memory.window("c")]
            history = len(await memory.history("c"))
            found = (await memory.search("c", "SYNC 0")).total
            records = await memory.compactions("c")
            for i in range(2):
                await memory.add("c", turn(f"async {i}"))
            return seen, history, found, records

    seen, history, found, records = asyncio.run(native_side())
    assert seen == ["sync 1", "reply to sync 1", "sync 2", "reply to sync 2"]
    assert history == 6 and found == 2 and len(records) == 1  # "sync 0" and its reply
    assert [e.content for e in sync_memory.window("c")] == [
        "async 0",
        "reply to async 0",
        "async 1",
        "reply to async 1",
    ]
    assert [e.seq for e in sync_memory.history("c")] == list(range(1, 11))
    assert len(sync_memory.compactions("c")) == 3 and sync_store.conversations() == ["c"]
    sync_store.close()


def test_the_async_store_creates_the_schema_the_sync_store_uses(sqlite_url):
    async def create():
        async with AsyncSQLStore.from_url(sqlite_url) as native:
            await native.append("c", [Event.user("first", tokens=1)])

    asyncio.run(create())
    with SQLStore.from_url(sqlite_url) as sync_store:
        assert [e.content for e in sync_store.history("c")] == ["first"]
        assert _meta(sync_store)["schema_version"] == SCHEMA_VERSION


def test_the_async_store_migrates_an_older_schema_in_place(sql_url):
    with SQLStore.from_url(sql_url) as old:
        old.append("c", [Event.user("written by 0.1", tokens=4)])
        _pretend_version_1(old)

    async def upgrade():
        async with AsyncSQLStore.from_url(sql_url) as native:
            return [e.content for e in await native.history("c")], await native.compactions("c")

    assert asyncio.run(upgrade()) == (["written by 0.1"], [])
    with SQLStore.from_url(sql_url) as store:
        recorded = _meta(store)
        assert recorded["schema_version"] == SCHEMA_VERSION
        assert recorded["migrated_to_2"].endswith(
            " add the compactions and long-term memory tables"
        )


# -- opening: URLs, options, a caller's engine -------------------------------------------


def test_open_async_store_threads_sqlite_unless_the_native_store_is_asked_for(
    sqlite_url, postgres_url
):
    # SQLite: aiosqlite is slower than the sync store in threads (bench/bench_async.py)
    default = open_async_store(sqlite_url, max_workers=2)
    assert (
        type(default) is ThreadedStore
        and isinstance(default.store, SQLStore)
        and not default.native
    )
    insisted = open_async_store(
        sqlite_url.replace("sqlite://", "sqlite+pysqlite://"), threads=False
    )
    assert isinstance(insisted, AsyncSQLStore) and insisted.native
    assert insisted.engine.url.drivername == "sqlite+aiosqlite"
    # PostgreSQL: psycopg's async mode is the default, threads on demand
    native = open_async_store(postgres_url)
    assert isinstance(native, AsyncSQLStore) and native.native
    threaded = open_async_store(postgres_url, threads=True, max_workers=2)
    assert type(threaded) is ThreadedStore and isinstance(threaded.store, SQLStore)
    for store in (default, insisted, native, threaded):
        asyncio.run(store.aclose())


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite://", "sqlite+aiosqlite://"),
        ("sqlite+pysqlite:///a.db", "sqlite+aiosqlite:///a.db"),
        ("sqlite+aiosqlite:///a.db", "sqlite+aiosqlite:///a.db"),
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
    ],
)
def test_urls_get_the_async_driver_of_their_database(url, expected):
    assert async_url(sa.make_url(url)).render_as_string() == expected


def test_postgres_urls_open_psycopg_in_async_mode_and_name_both_extras():
    for url in (
        "postgres://u@127.0.0.1/db",
        "postgresql://u@127.0.0.1/db",
        "postgresql+psycopg://u@127.0.0.1/db",
    ):
        store = open_async_store(url)
        assert (
            isinstance(store, AsyncSQLStore) and store.engine.url.drivername == "postgresql+psycopg"
        )
        assert store.engine.dialect.is_async
        asyncio.run(store.aclose())
    assert AsyncSQLStore.driver_modules_for("postgres") == ("greenlet", "psycopg")
    assert AsyncSQLStore.driver_modules_for("sqlite") == ("greenlet", "aiosqlite")
    assert AsyncSQLStore.extra_for("postgresql+psycopg") == "asyncio,postgres"
    assert AsyncSQLStore.extra_for("sqlite") == "asyncio"


def test_without_the_asyncio_extra_sql_falls_back_to_threads_or_names_the_extra(sqlite_url):
    """As after installing chat-memory without ``[asyncio]``: greenlet and aiosqlite missing."""
    code = (
        "import sys\n"
        "sys.modules['greenlet'] = sys.modules['aiosqlite'] = None\n"
        "import asyncio\n"
        "from chat_memory import ConfigurationError, ThreadedStore, open_async_store\n"
        "store = open_async_store(sys.argv[1])\n"
        "assert type(store) is ThreadedStore, store\n"
        "asyncio.run(store.aclose())\n"
        "try:\n"
        "    open_async_store(sys.argv[1], threads=False)\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, sqlite_url], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (
        "greenlet, aiosqlite" in result.stdout
        and "pip install 'chat-memory[asyncio]'" in result.stdout
    )


def test_url_options_and_a_callers_engine(sqlite_url):
    async def run():
        capped = AsyncSQLStore.from_url(f"{sqlite_url}?max_archived_events=2&table_prefix=capped_")
        assert capped.default_max_archived_events == 2 and capped.tables.prefix == "capped_"
        snapshot = await capped.append("d", [Event.user(str(i), tokens=1) for i in range(5)])
        assert await capped.apply("d", CompactionPlan(snapshot.version, archive_through_seq=5))
        assert [e.content for e in await capped.history("d")] == ["3", "4"]
        await capped.aclose()
        engine = create_async_engine(sqlite_url.replace("sqlite://", "sqlite+aiosqlite://"))
        async with AsyncSQLStore(engine) as borrowed:
            await borrowed.append("c", [Event.user("hi", tokens=1)])
        async with engine.connect() as connection:  # aclose left the caller's engine open
            count = await connection.exec_driver_sql("SELECT count(*) FROM chat_memory_events")
            assert count.scalar_one() == 1
        await engine.dispose()

    asyncio.run(run())
    with pytest.raises(ConfigurationError, match="max_archived_events"):
        AsyncSQLStore.from_url(f"{sqlite_url}?max_archived_events=lots")
    with pytest.raises(ConfigurationError, match="AsyncEngine"):
        AsyncSQLStore(sa.create_engine(sqlite_url))


# -- driver errors and lost races ------------------------------------------------------


def test_a_postgres_that_is_down_is_a_storage_error_without_the_password():
    store = open_async_store(
        "postgresql://postgres:hunter2-secret@127.0.0.1:1/none?connect_timeout=2"
    )
    assert isinstance(store, AsyncSQLStore) and "hunter2" not in repr(store)
    with pytest.raises(
        StorageError, match=r"AsyncSQLStore\.load failed: OperationalError"
    ) as raised:
        asyncio.run(store.load("c"))
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)
    assert "hunter2" not in str(raised.value)
    asyncio.run(store.aclose())


def test_a_lock_held_too_long_is_retried_then_a_concurrency_error(sqlite_url):
    store = AsyncSQLStore.from_url(
        f"{sqlite_url}?timeout=0.01", retry=Backoff(attempts=3, base=0.001)
    )
    run_blocking(store.append("c", [Event.user("first", tokens=1)]))
    blocker = sa.create_engine(sqlite_url, isolation_level="AUTOCOMMIT")
    with blocker.connect() as connection:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        with pytest.raises(ConcurrencyError, match="lost 3 races") as raised:
            run_blocking(store.append("c", [Event.user("blocked", tokens=1)]))
        assert "locked" in str(raised.value.__cause__)
        connection.exec_driver_sql("ROLLBACK")
    blocker.dispose()
    run_blocking(store.append("c", [Event.user("second", tokens=1)]))
    assert [(e.seq, e.content) for e in run_blocking(store.history("c"))] == [
        (1, "first"),
        (2, "second"),
    ]
    run_blocking(store.aclose())


def test_concurrent_writers_on_one_loop_lose_nothing(sql_url):
    """Sixteen conversations and one shared conversation, written concurrently by coroutines
    of one loop with compaction on: gap-free seqs, nothing lost or duplicated."""

    async def run():
        async with AsyncSQLStore.from_url(sql_url) as native:
            memory = AsyncChatMemory(native, TURNS, token_counter=fixed_tokens)

            async def writer(i):
                for t in range(3):
                    await memory.add(f"own-{i}", turn(f"w{i} t{t}"))
                    await memory.add("shared", turn(f"shared w{i} t{t}"))

            await asyncio.gather(*(writer(i) for i in range(16)))
            shared = await memory.history("shared")
            own = [len(await memory.window(f"own-{i}")) for i in range(16)]
            return shared, own

    shared, own = asyncio.run(run())
    assert [e.seq for e in shared] == list(range(1, 97))
    assert len({e.content for e in shared}) == 96 and own == [4] * 16
