"""The SQL store's transactions: a write transaction takes SQLite's write lock at BEGIN, a read
of one statement sends no BEGIN, and on SQLite the connections stay checked out between
transactions on a small stack of the store's own.

Checking a connection out of SQLAlchemy's pool and back in (``Engine.connect``, the pool's
queue and its reset on return, ``Connection.close``) costs several times what SQLite takes to
run ``BEGIN IMMEDIATE`` and ``COMMIT``. A SQLite connection has nothing to check before its
next use (no server to lose, no pre-ping asked for), so a committed one goes onto the stack
and the next transaction of any thread takes it from there. Only on an engine the store
created: a caller's own engine may have other users, who would wait on its pool while an idle
store held connections.

What the pool guaranteed still holds. The stack keeps fewer connections than the pool may
open, and a connection goes back to the pool instead whenever the pool has none left (a thread
may be waiting for one), so nothing waits on the pool for a connection the stack holds idle
while the store runs transactions. A connection that was invalidated, or whose transaction
did not commit, goes back to the pool, which resets or drops it. ``engine.dispose()`` closes
the stack's connections too, and a forked child never takes its parent's. The engine's events
still fire for each transaction (``begin``, ``commit``, ``rollback`` and the statements'
``before_cursor_execute``); an engine whose pool has ``checkout``, ``checkin`` or ``reset``
listeners, or whose engine has ``engine_connect`` ones, keeps none, so those listeners still
see every transaction.
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import Pool, QueuePool, StaticPool

from .driver import run_on_driver

#: The execution option that tells the engine's ``begin`` listener which statement opens a
#: transaction on SQLite ("" for none); see ``prepare_sqlite_engine``.
BEGIN_OPTION = "chat_memory_begin"
_SENDS_ITS_OWN_BEGIN = {BEGIN_OPTION: ""}
#: A forked child's copies of its parent's idle connections: never used, never closed (the
#: parent still owns them), and kept referenced so that collecting them does not reset them.
_INHERITED: list[sa.Connection] = []
_REGISTRY_LOCK = threading.Lock()
#: The transaction openers of each engine, told when it is disposed of.
_OPENERS: weakref.WeakKeyDictionary[sa.Engine, weakref.WeakSet[Transactions]] = (
    weakref.WeakKeyDictionary()
)


def read_options(dialect: str, one_statement: bool) -> dict[str, str]:
    """The execution options of a read transaction. A read of one statement on SQLite sends
    no BEGIN (nor, then, a real COMMIT): a single SELECT is atomic on its own, and each of
    BEGIN and COMMIT costs a statement's worth of work (a thread hop each on aiosqlite)."""
    return {BEGIN_OPTION: ""} if one_statement and dialect == "sqlite" else {}


def write_options(dialect: str) -> dict[str, str]:
    """The execution options of a write transaction: ``BEGIN IMMEDIATE`` on SQLite."""
    return {BEGIN_OPTION: "BEGIN IMMEDIATE"} if dialect == "sqlite" else {}


def connections_kept(engine: sa.Engine) -> int:
    """How many idle connections :class:`Transactions` keeps checked out of ``engine``'s pool:
    none but on SQLite with a queue pool (as many as the pool keeps, and fewer than it may
    open) or a single shared connection; none when the pool pings or recycles connections,
    which it does only at checkout."""
    pool = engine.pool
    if engine.dialect.name != "sqlite" or getattr(pool, "_pre_ping", True):
        return 0
    if isinstance(pool, StaticPool):
        return 1
    if type(pool) is not QueuePool or getattr(pool, "_recycle", 0) >= 0:
        return 0
    capacity = _capacity(pool)
    return max(0, pool.size() if capacity is None else min(pool.size(), capacity - 1))


def _capacity(pool: Pool) -> int | None:
    """How many connections a queue pool opens at most, or None when it has no bound."""
    overflow = getattr(pool, "_max_overflow", -1)  # SQLAlchemy keeps it only privately
    if not isinstance(pool, QueuePool) or not isinstance(overflow, int) or overflow < 0:
        return None
    return pool.size() + overflow if pool.size() else None


class Transactions:
    """Opens read and write transactions on one engine. Serialises them when the engine is a
    single shared connection (in-memory SQLite), which allows no concurrency of its own.

    On SQLite the store sends BEGIN itself (``BEGIN IMMEDIATE`` for writes, so that a writer
    holds the lock from its first read and never has to upgrade it, none for a read of one
    statement); with ``keeps_connections`` (an engine the store created, no one else's) it
    reuses its connections (see the module's docstring)."""

    def __init__(self, engine: sa.Engine, *, keeps_connections: bool = False) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._lock: threading.RLock | None = (
            threading.RLock() if isinstance(engine.pool, StaticPool) else None
        )
        self._pid = os.getpid()
        self._keep = connections_kept(engine) if keeps_connections else 0
        self._capacity = _capacity(engine.pool)
        #: idle connections, each with the pool it came from
        self._idle: list[tuple[sa.Connection, Pool]] = []
        if self._keep:
            _register(engine, self)

    def read(self, *, one_statement: bool = False) -> Transaction:
        """A transaction for reads (a consistent snapshot on SQLite); ``one_statement``: the
        body runs a single statement (see :func:`read_options`)."""
        if self.dialect != "sqlite":
            return Transaction(self, None)
        return Transaction(self, None if one_statement else "BEGIN")

    def write(self) -> Transaction:
        """A transaction for writes; on SQLite it takes the database write lock at BEGIN."""
        return Transaction(self, "BEGIN IMMEDIATE" if self.dialect == "sqlite" else None)

    def _serialised(self) -> threading.RLock | None:
        """The lock a transaction holds (none but for a single shared connection), once a
        forked child has a pool of its own."""
        if os.getpid() != self._pid:
            # a forked child must not reuse its parent's pooled connections (nor close them):
            # a new pool (the handler of its disposal sets the stack aside)
            self.engine.dispose(close=False)
            self._pid = os.getpid()
        return self._lock

    def _take(self) -> tuple[sa.Connection, Pool]:
        idle = self._idle
        while idle:
            try:
                connection, pool = idle.pop()
            except IndexError:  # another thread took the last one
                break
            if pool is self.engine.pool:
                return connection, pool
            _close_outside(connection)  # kept across a disposal: its pool is not the engine's
        pool = self.engine.pool  # before connecting: a disposal in between makes it stale, not kept
        connection = self.engine.connect()
        if self.dialect == "sqlite":
            # the engine's begin listener sends no BEGIN on this connection: the store does
            connection.execution_options(**_SENDS_ITS_OWN_BEGIN)
        return connection, pool

    def _give_back(self, connection: sa.Connection, pool: Pool, committed: bool) -> None:
        if pool is not self.engine.pool:  # disposed of while the transaction ran
            _close_outside(connection)
        elif committed and self._keeps(connection, pool):
            self._idle.append((connection, pool))
        else:
            connection.close()

    def _keeps(self, connection: sa.Connection, pool: Pool) -> bool:
        if len(self._idle) >= self._keep or connection.invalidated:
            return False
        dispatch = pool.dispatch
        if dispatch.checkout or dispatch.checkin or dispatch.reset:
            return False
        if self.engine.dispatch.engine_connect:
            return False
        # a pool with no connection left may have a thread waiting: give this one to it
        capacity = self._capacity
        return capacity is None or (isinstance(pool, QueuePool) and pool.checkedout() < capacity)

    def _disposed(self) -> None:
        """The engine's pool was replaced: close the idle connections (they belong to the old
        one), or set them aside untouched in a forked child."""
        idle, self._idle = self._idle, []
        if os.getpid() != self._pid:
            _INHERITED.extend(connection for connection, _ in idle)
            self._pid = os.getpid()  # the child has a fresh pool now
            return
        while idle:
            try:
                connection, _ = idle.pop()
            except IndexError:
                break
            _close_outside(connection)


class Transaction:
    """One transaction of :class:`Transactions`, entered with ``with``: the connection it runs
    on, committed when the body returns and rolled back when it raises."""

    __slots__ = ("_owner", "_begin", "_connection", "_pool", "_lock")

    def __init__(self, owner: Transactions, begin: str | None) -> None:
        self._owner = owner
        self._begin = begin

    def __enter__(self) -> sa.Connection:
        owner = self._owner
        lock = self._lock = owner._serialised()
        if lock is not None:
            lock.acquire()
        try:
            connection, self._pool = owner._take()
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self._connection = connection
        try:
            connection.begin()
            if self._begin is not None:
                # on the driver's cursor, its errors wrapped as exec_driver_sql wraps them (a
                # locked database is a conflict, retried: see is_conflict)
                run_on_driver(connection, self._begin)
        except BaseException:
            self._end(committed=False)
            raise
        return connection

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._end(committed=False)
            return
        try:
            self._connection.commit()
        except BaseException:
            self._end(committed=False)
            raise
        self._end(committed=True)

    def _end(self, *, committed: bool) -> None:
        connection = self._connection
        try:
            if not committed:
                connection.rollback()
        finally:
            try:
                self._owner._give_back(connection, self._pool, committed)
            finally:
                if self._lock is not None:
                    self._lock.release()


def _close_outside(connection: sa.Connection) -> None:
    """Close a connection of a pool the engine disposed of (that pool would keep it open)."""
    if not connection.invalidated:  # an invalidated one has no database connection left
        connection.connection.detach()
    connection.close()


def _register(engine: sa.Engine, transactions: Transactions) -> None:
    """Tell ``transactions`` when ``engine`` is disposed of (one listener per engine)."""
    with _REGISTRY_LOCK:
        openers = _OPENERS.get(engine)
        if openers is None:
            openers = _OPENERS[engine] = weakref.WeakSet()
            event.listen(engine, "engine_disposed", _on_disposal)
        openers.add(transactions)


def _on_disposal(engine: sa.Engine) -> None:
    with _REGISTRY_LOCK:
        openers = list(_OPENERS.get(engine, ()))
    for transactions in openers:
        transactions._disposed()
