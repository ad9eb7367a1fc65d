"""The SQL store's transactions (chat_memory/backends/sql/transactions.py): on SQLite a
committed connection stays checked out, on a small stack of the store's, for the next
transaction of any thread. Checked here, by counts and identities (never by time): the events
of every transaction still fire; the pool never runs dry because of the stack (a connection goes
back whenever the pool has none left, under any traffic of threads); an invalidated or rolled
back connection is not reused; ``engine.dispose()`` (``store.close()``) closes the stack's
connections; a caller's engine keeps none; a forked child never takes its parent's; pool
listeners still see every transaction."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import tempfile
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event
from chat_memory.backends.sql import SQLStore
from chat_memory.backends.sql.connections import is_conflict
from chat_memory.backends.sql.driver import run_on_driver
from chat_memory.backends.sql.transactions import connections_kept


def _dbapi(connection: sa.Connection) -> Any:
    return connection.connection.dbapi_connection


def _write(store: SQLStore) -> Any:
    """A write transaction of one statement; the DBAPI connection it ran on."""
    with store._tx.write() as connection:
        run_on_driver(connection, "SELECT 1")
        return _dbapi(connection)


def _gone(store: SQLStore) -> sa.exc.DBAPIError:
    """A write transaction whose database connection goes away under it."""
    with pytest.raises(sa.exc.DBAPIError) as raised, store._tx.write() as connection:
        _dbapi(connection).close()
        run_on_driver(connection, "SELECT 1")
    return raised.value


def _idle(store: SQLStore) -> list[sa.Connection]:
    return [connection for connection, _ in store._tx._idle]


def test_a_sqlite_store_keeps_one_connection_across_transactions(sqlite_store):
    sqlite_store.append("c", [Event.user("hi")])
    used = {id(_write(sqlite_store)) for _ in range(5)}
    sqlite_store.load("c")
    assert len(used) == 1
    assert sqlite_store.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    assert len(_idle(sqlite_store)) == 1


def test_each_transaction_fires_its_events_on_a_kept_connection(sqlite_store):
    sqlite_store.append("c", [Event.user("hi")])
    counts: Counter[str] = Counter()

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        counts[sql] += 1

    listeners = {
        "before_cursor_execute": statement,
        "begin": lambda _conn: counts.update(["begin"]),
        "commit": lambda _conn: counts.update(["commit"]),
        "rollback": lambda _conn: counts.update(["rollback"]),
    }
    for name, listener in listeners.items():
        sa.event.listen(sqlite_store.engine, name, listener)
    try:
        for _ in range(3):
            _write(sqlite_store)
        with sqlite_store._tx.read(one_statement=True) as connection:
            run_on_driver(connection, "SELECT 2")
        with sqlite_store._tx.read() as connection:
            run_on_driver(connection, "SELECT 3")
        with pytest.raises(ValueError), sqlite_store._tx.write():
            raise ValueError("the body fails")
    finally:
        for name, listener in listeners.items():
            sa.event.remove(sqlite_store.engine, name, listener)
    assert counts == {
        "begin": 6,
        "commit": 5,
        "rollback": 1,
        "BEGIN IMMEDIATE": 4,
        "BEGIN": 1,  # the read of one statement sends none
        "SELECT 1": 3,
        "SELECT 2": 1,
        "SELECT 3": 1,
    }


def test_a_rolled_back_connection_goes_back_to_the_pool(sqlite_store):
    kept = _write(sqlite_store)
    with pytest.raises(ValueError), sqlite_store._tx.write() as connection:
        assert _dbapi(connection) is kept
        raise ValueError("the body fails")
    assert _idle(sqlite_store) == []
    assert sqlite_store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_connection_that_is_gone_is_invalidated_and_never_reused(sqlite_store):
    kept = _write(sqlite_store)
    error = _gone(sqlite_store)
    assert error.connection_invalidated and not is_conflict(error)
    assert _idle(sqlite_store) == []
    fresh = _write(sqlite_store)
    assert fresh is not kept
    sqlite_store.append("c", [Event.user("after")])
    assert [e.content for e in sqlite_store.history("c")] == ["after"]


def test_dispose_closes_the_kept_connections(sqlite_store):
    kept = _write(sqlite_store)
    sqlite_store.engine.dispose()
    assert _idle(sqlite_store) == []
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        kept.execute("SELECT 1")
    assert _write(sqlite_store) is not kept
    with sqlite_store._tx.write() as connection:  # disposed of while a transaction runs
        running = _dbapi(connection)
        sqlite_store.engine.dispose()
    assert _idle(sqlite_store) == []
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        running.execute("SELECT 1")


def test_a_callers_engine_gets_each_connection_back_after_its_transaction(sqlite_url):
    """The caller's engine may have other users: an idle store holds none of its connections."""
    engine = sa.create_engine(sqlite_url)
    store = SQLStore(engine)
    try:
        store.append("c", [Event.user("hi")])
        store.load("c")
        assert connections_kept(engine) == 5  # were it the store's
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        assert _idle(store) == []
    finally:
        store.close()
        engine.dispose()


def test_pool_listeners_see_every_transaction(sqlite_store):
    _write(sqlite_store)
    checkouts = Counter[str]()

    def checkout(*_: Any) -> None:
        checkouts["checkout"] += 1

    sa.event.listen(sqlite_store.engine, "checkout", checkout)
    try:
        for _ in range(3):
            _write(sqlite_store)
        assert _idle(sqlite_store) == []
    finally:
        sa.event.remove(sqlite_store.engine, "checkout", checkout)
    assert checkouts["checkout"] == 2  # the kept one went back after its first use; then each


@pytest.mark.parametrize(
    ("options", "kept"),
    [
        ({}, 5),  # as many as a QueuePool keeps
        ({"pool_size": 2, "max_overflow": 0}, 1),  # fewer than the pool may open
        ({"pool_size": 1, "max_overflow": 0}, 0),
        ({"pool_pre_ping": True}, 0),  # the pool pings at checkout: go through it
        ({"pool_recycle": 3600}, 0),
        ({"poolclass": sa.pool.NullPool}, 0),
    ],
)
def test_how_many_connections_a_store_keeps(sqlite_url, options, kept):
    store = SQLStore(sqlite_url, **options)
    try:
        assert connections_kept(store.engine) == kept
    finally:
        store.close()


def test_an_in_memory_store_and_postgres_keep_what_they_may(sqlite_memory_store):
    assert connections_kept(sqlite_memory_store.engine) == 1  # its one shared connection
    assert connections_kept(sa.create_engine("postgresql+psycopg://u@localhost/db")) == 0


def test_many_threads_share_a_small_pool_without_running_it_dry(sqlite_url):
    """16 threads on a pool of at most 3 connections: each transaction either reuses a kept
    connection or waits on the pool for one the others give back; none times out."""
    store = SQLStore(sqlite_url, pool_size=2, max_overflow=1, pool_timeout=60)
    store.append("warm", [Event.user("schema")])
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(15):
                if i % 3:
                    store.load(f"c{n}")
                else:
                    store.append(f"c{n}", [Event.user(f"{n}-{i}")])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert all(len(store.history(f"c{n}")) == 5 for n in range(16))
        assert store.engine.pool.checkedout() == len(_idle(store)) <= 2  # type: ignore[attr-defined]
    finally:
        store.close()


_FORKED: tuple[SQLStore, sa.Connection] | None = None


def _write_in_child(text: str) -> tuple[bool, bool, int]:
    """Whether the child's transaction ran on the parent's connection, whether the child
    closed the parent's (its copy), and the seq of the child's append."""
    assert _FORKED is not None
    store, parents = _FORKED
    uses_parents = _write(store) is _dbapi(parents)
    seq = store.append("c", [Event.user(text)]).last_seq
    return uses_parents, parents.closed, seq


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_forked_child_never_takes_its_parents_kept_connection(sqlite_store):
    global _FORKED
    sqlite_store.append("c", [Event.user("parent")])
    parents = _write(sqlite_store)
    [kept] = _idle(sqlite_store)
    _FORKED = (sqlite_store, kept)
    try:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_write_in_child, ["child a", "child b"]))
    finally:
        _FORKED = None
    assert [(uses, closed) for uses, closed, _ in results] == [(False, False)] * 2
    assert sorted(seq for _, _, seq in results) == [2, 3]
    assert _write(sqlite_store) is parents  # untouched by the children, and still kept
    assert [e.seq for e in sqlite_store.history("c")] == [1, 2, 3]


OPERATIONS = st.sampled_from(
    ["write", "read", "read one", "raise", "gone", "hold", "release", "dispose", "dispose within"]
)


@settings(max_examples=25, deadline=None)
@given(st.lists(OPERATIONS, max_size=25))
def test_the_stack_never_holds_what_the_pool_lacks(operations):
    """Whatever runs, and whoever else holds the pool's connections: the kept connections
    are at most as many as allowed, of the engine's current pool, valid and outside any
    transaction; after a transaction the pool has a connection left for another thread; and
    nothing is checked out that is neither kept nor held by the caller."""
    with tempfile.TemporaryDirectory() as folder:
        store = SQLStore(f"sqlite:///{Path(folder) / 'h.db'}", pool_size=2, max_overflow=1)
        capacity, keep = 3, connections_kept(store.engine)
        held: list[tuple[sa.Connection, Any]] = []
        try:
            for operation in operations:
                if operation == "hold" and len(held) < capacity - 1:
                    held.append((store.engine.connect(), store.engine.pool))
                elif operation == "release" and held:
                    held.pop()[0].close()
                elif operation == "dispose":
                    store.engine.dispose()
                elif operation in ("write", "read", "read one", "raise", "gone", "dispose within"):
                    _transaction(store, operation)
                    assert store.engine.pool.checkedout() < capacity  # type: ignore[attr-defined]
                pool = store.engine.pool
                idle = store._tx._idle
                assert len(idle) <= keep
                for connection, origin in idle:
                    assert origin is pool and not connection.invalidated
                    assert not connection.in_transaction()
                    assert not _dbapi(connection).in_transaction
                    _dbapi(connection).execute("SELECT 1")  # open
                ours = sum(origin is pool for _, origin in held)
                assert pool.checkedout() == len(idle) + ours  # type: ignore[attr-defined]
        finally:
            for connection, _ in held:
                connection.close()
            store.close()


def _transaction(store: SQLStore, operation: str) -> None:
    if operation == "gone":
        _gone(store)
    elif operation == "raise":
        with pytest.raises(ValueError), store._tx.write() as connection:
            run_on_driver(connection, "SELECT 1")
            raise ValueError("the body fails")
    elif operation == "write":
        _write(store)
    elif operation == "dispose within":
        with store._tx.write() as connection:
            run_on_driver(connection, "SELECT 1")
            store.engine.dispose()
    else:
        with store._tx.read(one_statement=operation == "read one") as connection:
            run_on_driver(connection, "SELECT 1")
