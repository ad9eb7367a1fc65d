"""AsyncSQLStore: the SQL store over SQLAlchemy's asyncio extension (aiosqlite for SQLite,
psycopg 3's async mode for PostgreSQL), for :class:`~chat_memory.AsyncChatMemory`.

No second copy of the queries: every operation is a transaction body of
:class:`~chat_memory.backends.sql.operations.SQLOperations` (the ones :class:`SQLStore` runs),
run here with ``await connection.run_sync(body, …)`` on an :class:`~sqlalchemy.ext.asyncio.AsyncEngine`:
SQLAlchemy drives the sync code over the async driver through greenlet, with no threads. The
tables, schema migrations, retries on lost races, idempotent appends, the compare-and-swap
compaction, the archive cap and the compaction records are therefore the sync store's, and
both stores can share one database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from chat_memory.backoff import Backoff

from ...errors import ConfigurationError
from ...events import Event
from ...search import SearchQuery, SearchResult
from ..aio import AsyncStore, admit
from ..base import (
    COMPACTION_RECORDS_KEPT,
    CompactionPlan,
    Snapshot,
    ToolPairCheck,
    check_conversation_id,
)
from ..declarations import settings_from_url
from .connections import (
    SQL_DRIVER_ERRORS,
    Attempts,
    adopt_engine,
    engine_arguments,
    hide_secret_options,
    is_conflict,
    is_in_memory_sqlite,
    is_schema_conflict,
    prepare_sqlite_engine,
    read_options,
    shown_url,
    split_url_options,
    url_query,
    write_options,
)
from .forks import AsyncSQLForksAndDumps
from .keeps_lifecycle import AsyncSQLLifecycle
from .operations import SQLOperations
from .schema import DEFAULT_TABLE_PREFIX, Tables
from .store import SQLStore

if TYPE_CHECKING:  # the asyncio extension needs greenlet: imported when a store is built
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")


def _dialect_and_driver(scheme: str) -> tuple[str, str]:
    dialect, _, driver = scheme.lower().partition("+")
    return ("postgresql" if dialect == "postgres" else dialect), driver


def async_url(url: sa.URL) -> sa.URL:
    """``url`` with the async driver of its database: ``sqlite://`` and ``sqlite+pysqlite://``
    become ``sqlite+aiosqlite://``; PostgreSQL URLs without a driver or with psycopg
    (``postgres://``, ``postgresql://``, ``postgresql+psycopg://``) become
    ``postgresql+psycopg://``, which SQLAlchemy's async engine runs in psycopg's async mode.
    An async driver named explicitly is kept."""
    dialect, driver = _dialect_and_driver(url.drivername)
    if dialect == "sqlite" and driver in ("", "pysqlite"):
        return url.set(drivername="sqlite+aiosqlite")
    if dialect == "postgresql" and driver in ("", "psycopg", "psycopg2"):
        return url.set(drivername="postgresql+psycopg")
    return url


def _pool_capacity(pool: Any) -> int | None:
    """How many connections a queue pool opens at most (its size and overflow), or None when
    it has no bound (unlimited overflow, no pooling) or is one shared connection."""
    from sqlalchemy.pool import QueuePool

    if not isinstance(pool, QueuePool):
        return None
    overflow = getattr(pool, "_max_overflow", -1)  # SQLAlchemy keeps it only privately
    if not isinstance(overflow, int) or overflow < 0:
        return None
    return max(1, pool.size() + overflow)


class AsyncSQLStore(AsyncSQLLifecycle, AsyncSQLForksAndDumps, AsyncStore):
    """The SQL store for the async API, natively async (no thread pool).

    >>> store = AsyncSQLStore("sqlite:///chat.db")                  # or open_async_store("sqlite:///chat.db")
    >>> store = AsyncSQLStore("postgresql://user@host/db?table_prefix=bot_")
    >>> store = AsyncSQLStore(async_engine)                          # a ready AsyncEngine stays the caller's

    Takes the URLs and options of :class:`~chat_memory.backends.sql.SQLStore`
    (``table_prefix``, ``max_archived_events``, ``retry``, engine keywords) and uses the same
    tables, so a sync and an async store can work on one database side by side.
    """

    schemes = ("sqlite", "postgresql", "postgres")
    driver_modules: ClassVar[tuple[str, ...]] = ("greenlet", "aiosqlite")
    extra: ClassVar[str | None] = "asyncio"
    url_options = SQLStore.url_options
    passes_query_to_driver = True
    driver_errors = SQL_DRIVER_ERRORS
    compaction_records_kept: ClassVar[int] = COMPACTION_RECORDS_KEPT
    compacts_while_appending = True
    checks_tool_pairs = True

    def __init__(
        self,
        engine: AsyncEngine | str,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        max_archived_events: int | None = None,
        retry: Backoff | None = None,
        **engine_options: Any,
    ) -> None:
        from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

        if isinstance(engine, str):
            url, _ = split_url_options(engine, {option.name for option in self.url_options})
            url, engine_options = hide_secret_options(async_url(url), engine_options)
            self._owns_engine = True
            self.engine = create_async_engine(url, **engine_arguments(url, engine_options))
            if url.get_backend_name() == "sqlite":
                prepare_sqlite_engine(self.engine.sync_engine, wal=not is_in_memory_sqlite(url))
        elif isinstance(engine, AsyncEngine):
            adopt_engine(engine.sync_engine, engine_options)
            self._owns_engine = False
            self.engine = engine
        else:
            raise ConfigurationError(f"engine ({engine!r}) must be a SQLAlchemy URL or AsyncEngine")
        self.ops = SQLOperations(
            table_prefix,
            max_archived_events=max_archived_events,
            compaction_records_kept=self.compaction_records_kept,
        )
        self.tables: Tables = self.ops.tables
        self.default_max_archived_events = self.ops.max_archived_events
        self.retry = retry or Backoff()
        self._dialect = self.engine.dialect.name
        # one shared connection (in-memory SQLite) allows no concurrency of its own
        self._serialised: Any = (
            asyncio.Lock() if isinstance(self.engine.pool, StaticPool) else nullcontext()
        )
        # SQLite has one writer at a time: writers of this store queue here and take the lock
        # as soon as it is free, instead of each holding a pooled connection inside SQLite's
        # busy handler, which polls with sleeps of up to 100 ms (other processes still wait there)
        self._one_writer: Any = asyncio.Lock() if self._dialect == "sqlite" else nullcontext()
        self._gate_size = _pool_capacity(self.engine.pool)
        self._gate: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncSQLStore:
        """Open a store from a SQLAlchemy URL, as :meth:`SQLStore.from_url` does (the sync
        driver of the URL, if named, is replaced by the async one: see :func:`async_url`)."""
        settings, _ = settings_from_url(cls, url_query(url), options)
        return cls(url, **{**options, **settings})

    @classmethod
    def driver_modules_for(cls, scheme: str) -> tuple[str, ...]:
        dialect, driver = _dialect_and_driver(scheme)
        if dialect == "postgresql":
            return (
                ("greenlet", "psycopg") if driver in ("", "psycopg", "psycopg2") else ("greenlet",)
            )
        return cls.driver_modules

    @classmethod
    def preferred_for(cls, scheme: str) -> bool:
        """PostgreSQL only. aiosqlite sends each statement to a thread of its own and back
        (about 35 hops for a turn of add + window): ``bench/bench_async.py`` measures it at 0.3-0.4x the
        throughput of the sync SQLite store in threads, so ``open_async_store`` threads
        SQLite unless asked for this store (``threads=False``)."""
        return _dialect_and_driver(scheme)[0] == "postgresql"

    @classmethod
    def extra_for(cls, scheme: str) -> str | None:
        return "asyncio,postgres" if _dialect_and_driver(scheme)[0] == "postgresql" else cls.extra

    async def aclose(self) -> None:
        """Dispose of the engine's connections when this store created the engine."""
        if self._owns_engine:
            await self.engine.dispose()

    def __repr__(self) -> str:
        return f"AsyncSQLStore({shown_url(self.engine)}, table_prefix={self.tables.prefix!r})"

    # -- plumbing ----------------------------------------------------------------------------

    @asynccontextmanager
    async def _transaction(
        self, *, write: bool, one_statement: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        options = (
            write_options(self._dialect) if write else read_options(self._dialect, one_statement)
        )
        async with self._admission(), self._serialised, self.engine.connect() as connection:
            if options:
                await connection.execution_options(**options)
            async with connection.begin():
                yield connection

    def admitted(self) -> AbstractAsyncContextManager[None]:
        """:meth:`AsyncStore.admitted <chat_memory.backends.aio.AsyncStore.admitted>`: a turn
        of the gate every transaction takes (:meth:`_admission`), so an engine operation
        admitted as a whole prepares its batch only once a connection is its own."""
        return self._admission()

    def _admission(self) -> AbstractAsyncContextManager[None]:
        """A turn at the engine's pool, taken before the connection is asked for: one per
        connection the pool may open, handed out first come first served. A burst of
        operations (a thousand conversations' first turns ready at once) then costs one
        future each while it waits, instead of a greenlet and a timed wait inside
        SQLAlchemy's pool each, all of them started in one loop iteration; and none of them
        waits inside the pool, under its 30 s timeout. Per event loop (an
        ``asyncio.Semaphore`` belongs to the loop it first waited on)."""
        if self._gate_size is None:
            return nullcontext()
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Semaphore(self._gate_size))
        return admit(self._gate[1])  # re-entrant: straight in inside admitted()

    async def _ready(self) -> None:
        if self._schema_ready:
            return
        async with self._schema_lock:
            if not self._schema_ready:
                await self._write(
                    self.ops.ensure_schema, what="creating the schema", races=is_schema_conflict
                )
                self._schema_ready = True

    async def _write(
        self,
        body: Callable[..., T],
        *args: Any,
        what: str,
        races: Callable[[BaseException], bool] = is_conflict,
    ) -> T:
        """Run an operation of :class:`SQLOperations` in a write transaction, again while the
        database reports a lost race; the windows it staged for the cache are kept once it
        has committed."""
        attempts = Attempts(self.retry, what)
        windows = self.ops.windows
        for delay in attempts:
            try:
                async with self._one_writer, self._transaction(write=True) as connection:
                    # run_sync hands the body this sync connection
                    with windows.staging(connection.sync_connection) as staged:
                        result = await connection.run_sync(body, *args)
                windows.publish(staged)
                return result
            except sa.exc.DBAPIError as exc:
                if not races(exc):
                    raise
                attempts.last = exc
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: Attempts raises when it runs out")

    async def _read(self, body: Callable[..., T], *args: Any) -> T:
        await self._ready()
        one_statement = self.ops.reads_once(body, args)
        async with self._transaction(write=False, one_statement=one_statement) as connection:
            return await connection.run_sync(body, *args)

    # -- writes ------------------------------------------------------------------------------

    async def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        """:meth:`SQLStore.append <chat_memory.backends.sql.SQLStore.append>`."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.append, cid, list(events), check, what=f"append to conversation {cid!r}"
        )

    async def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """:meth:`SQLStore.append_without_window <chat_memory.backends.sql.SQLStore.append_without_window>`."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.append_without_window,
            cid,
            list(events),
            check,
            what=f"append to conversation {cid!r}",
        )

    async def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        """Append and compact in one transaction (the planner and ``check`` run inside it:
        both are pure)."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.append_compacting,
            cid,
            list(events),
            planner,
            check,
            what=f"append to conversation {cid!r}",
        )

    async def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.apply, cid, plan, what=f"compaction of conversation {cid!r}"
        )

    async def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        await self._ready()
        await self._write(
            self.ops.record_compaction_error,
            cid,
            message,
            what=f"recording the compaction error of {cid!r}",
        )

    async def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """:meth:`SQLStore.retract <chat_memory.backends.sql.SQLStore.retract>`: one transaction."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.retract, cid, list(event_ids), what=f"retraction in conversation {cid!r}"
        )

    async def retracted(self, conversation_id: str) -> list[Event]:
        return await self._read(self.ops.retracted, check_conversation_id(conversation_id))

    async def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        await self._ready()
        await self._write(self.ops.clear, cid, what=f"clearing conversation {cid!r}")

    # -- reads -------------------------------------------------------------------------------

    async def load(self, conversation_id: str) -> Snapshot:
        return await self._read(self.ops.load, check_conversation_id(conversation_id))

    async def history(self, conversation_id: str) -> list[Event]:
        return await self._read(self.ops.history, check_conversation_id(conversation_id))

    async def find_tool_events(
        self, conversation_id: str, tool_call_ids: Collection[str]
    ) -> list[Event]:
        return await self._read(
            self.ops.find_tool_events, check_conversation_id(conversation_id), tool_call_ids
        )

    async def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """:meth:`SQLStore.find_events <chat_memory.backends.sql.SQLStore.find_events>`."""
        return await self._read(
            self.ops.find_events, check_conversation_id(conversation_id), event_ids, tool_call_ids
        )

    async def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return await self._read(self.ops.search, check_conversation_id(conversation_id), query)

    async def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return await self._read(self.ops.compactions, check_conversation_id(conversation_id))

    async def conversations(self) -> list[str]:
        return await self._read(self.ops.conversations)


__all__ = ["AsyncSQLStore", "async_url"]
