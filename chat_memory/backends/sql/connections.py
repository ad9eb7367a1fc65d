"""SQLAlchemy engines (connections) for the SQL store: URL options, SQLite tuning (BEGIN
sent by the store: see :mod:`~chat_memory.backends.sql.transactions`, which opens the
transactions), and the driver errors that mean "lost a race, try again"."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from chat_memory.backoff import Backoff

from ...errors import ConcurrencyError, ConfigurationError
from ..failures import DriverErrors
from ..urls import is_secret_option, redact_message, redact_url
from .driver import run_on_driver
from .transactions import BEGIN_OPTION
from .transactions import Transactions as Transactions  # re-exported: where the store looks
from .transactions import read_options as read_options
from .transactions import write_options as write_options

#: Seconds a SQLite connection waits for another process's write lock before reporting "locked".
SQLITE_BUSY_TIMEOUT = 15.0
#: Seconds to wait for a PostgreSQL server to answer when the URL names no ``connect_timeout``.
POSTGRES_CONNECT_TIMEOUT = 10
_PREPARED: weakref.WeakSet[sa.Engine] = weakref.WeakSet()
#: What the SQL stores turn into StorageError: SQLAlchemy's errors (it wraps the DBAPI's), and
#: the DBAPI's own, which a connect-time hook (the SQLite tuning below) raises unwrapped.
SQL_DRIVER_ERRORS: DriverErrors = (
    "sqlalchemy.exc:SQLAlchemyError",
    "sqlite3:Error",
    "psycopg:Error",
)

# SQLSTATEs (PostgreSQL) and error numbers (MySQL) that mean a concurrent writer got there
# first; the transaction was rolled back and can simply be run again.
_PG_CONFLICTS = {"40001", "40P01", "23505", "55P03"}
_MYSQL_CONFLICTS = {1062, 1205, 1213}
# ... of which a duplicate key: two writers inserting the same row (PostgreSQL, MySQL)
_PG_DUPLICATE, _MYSQL_DUPLICATE = "23505", 1062


def parse_sql_url(url: str) -> sa.URL:
    """A SQLAlchemy URL parsed as the engine will read it; a :class:`ConfigurationError`
    that shows no secret when it cannot be."""
    try:
        return with_default_driver(make_url(url))
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError(
            f"store URL ({redact_url(url)!r}) is not a valid SQLAlchemy URL: {redact_message(str(exc), [url])}"
        ) from exc


def url_query(url: str) -> str:
    """The query string of a SQLAlchemy URL as SQLAlchemy reads it. Not ``urlsplit``: a
    password may hold an unencoded ``?`` or ``#``, which ``urlsplit`` takes for the start of
    the query or of a fragment (and so would lose ``table_prefix``)."""
    return urlencode(
        [
            (name, value)
            for name, values in parse_sql_url(url).query.items()
            for value in _as_tuple(values)
        ]
    )


def _as_tuple(values: str | tuple[str, ...]) -> tuple[str, ...]:
    return (values,) if isinstance(values, str) else tuple(values)


def split_url_options(url: str, option_names: set[str]) -> tuple[sa.URL, dict[str, str]]:
    """Parse a SQLAlchemy URL and take out the query options that belong to the store (the
    rest stay in the URL for the driver, e.g. ``connect_timeout``)."""
    parsed = parse_sql_url(url)
    ours: dict[str, str] = {}
    for name in option_names & set(parsed.query):
        value = parsed.query[name]
        if not isinstance(value, str):
            raise ConfigurationError(f"store URL option {name} is given more than once ({value!r})")
        ours[name] = value
    return parsed.difference_update_query(list(ours)), ours


def shown_url(engine: Any) -> str:
    """An engine's URL as reprs and messages show it: no password, no secret query option
    (an engine the caller built may still carry ``?password=``)."""
    return redact_url(engine.url.render_as_string(hide_password=True))


def with_default_driver(url: sa.URL) -> sa.URL:
    """PostgreSQL URLs without a driver, and Heroku-style ``postgres://`` ones, use psycopg 3
    (the ``postgres`` extra): SQLAlchemy would otherwise look for psycopg2, or not know
    ``postgres`` at all."""
    dialect, _, driver = url.drivername.partition("+")
    if dialect in ("postgres", "postgresql"):
        return url.set(drivername=f"postgresql+{driver or 'psycopg'}")
    return url


def is_in_memory_sqlite(url: sa.URL) -> bool:
    return url.get_backend_name() == "sqlite" and (url.database or ":memory:") == ":memory:"


def hide_secret_options(
    url: sa.URL, engine_options: dict[str, Any]
) -> tuple[sa.URL, dict[str, Any]]:
    """``url`` without its secret query options (``?password=``, ``sslpassword=``, …: see
    :func:`~chat_memory.backends.urls.is_secret_option`), which move to ``connect_args``
    (the driver gets the same keywords: SQLAlchemy's dialects pass the query to ``connect()``
    too). An engine's repr, and its URL's, hide the password but show every query option."""
    secret = {name: values for name, values in url.query.items() if is_secret_option(name)}
    if not secret or url.get_backend_name() == "sqlite":
        return url, engine_options
    for name, values in secret.items():
        if not isinstance(values, str):
            raise ConfigurationError(f"store URL option {name} is given more than once")
    given = dict(engine_options.get("connect_args", {}))
    return url.difference_update_query(list(secret)), {
        **engine_options,
        "connect_args": {**secret, **given},
    }


def engine_arguments(url: sa.URL, engine_options: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``create_engine`` (or ``create_async_engine``) for ``url``
    (secret query options already moved out by :func:`hide_secret_options`): SQLite gets a
    busy timeout and a single shared connection when in memory (its file's parent folder is
    created, owner-only for the embedded default: :func:`~chat_memory.backends.prepare_sqlite_file`); other
    databases a connect timeout and pre-ping."""
    options = dict(engine_options)
    connect_args = dict(options.pop("connect_args", {}))
    if url.get_backend_name() != "sqlite":
        if url.get_driver_name() in ("psycopg", "psycopg2") and "connect_timeout" not in url.query:
            connect_args.setdefault("connect_timeout", POSTGRES_CONNECT_TIMEOUT)
        options.setdefault("pool_pre_ping", True)
        return {"connect_args": connect_args, **options}
    if "timeout" not in url.query:
        connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT)
    connect_args.setdefault("check_same_thread", False)
    if is_in_memory_sqlite(url):
        options.setdefault("poolclass", StaticPool)
    elif url.database and not url.database.startswith("file:"):
        from .. import prepare_sqlite_file

        prepare_sqlite_file(Path(url.database).expanduser())
    return {"connect_args": connect_args, **options}


def create_store_engine(url: sa.URL, **engine_options: Any) -> sa.Engine:
    """An engine for ``url`` (see :func:`engine_arguments`); SQLite also gets WAL and explicit
    transaction control (:func:`prepare_sqlite_engine`). Secret query options reach the driver
    but not the engine's URL (:func:`hide_secret_options`)."""
    url, engine_options = hide_secret_options(url, engine_options)
    engine = sa.create_engine(url, **engine_arguments(url, engine_options))
    if url.get_backend_name() == "sqlite":
        prepare_sqlite_engine(engine, wal=not is_in_memory_sqlite(url))
    return engine


def adopt_engine(engine: sa.Engine, engine_options: dict[str, Any]) -> None:
    """Check a caller's engine (engine keywords apply only to a URL) and give SQLite the
    store's transaction control (see :func:`prepare_sqlite_engine`)."""
    if engine_options:
        raise ConfigurationError(
            f"engine options ({', '.join(engine_options)}) apply only when given a URL"
        )
    if engine.dialect.name == "sqlite":
        prepare_sqlite_engine(engine, wal=not is_in_memory_sqlite(engine.url))


def prepare_sqlite_engine(engine: sa.Engine, *, wal: bool = True) -> None:
    """Let the store emit BEGIN itself (``BEGIN IMMEDIATE`` for writes, so a writer holds the
    lock from its first read and never has to upgrade it) and tune SQLite for several
    processes sharing one file. Safe to call on an engine the caller built."""
    if engine in _PREPARED:
        return
    _PREPARED.add(engine)

    @event.listens_for(engine, "connect")
    def _tune(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 must not issue its own BEGIN
        cursor = dbapi_connection.cursor()
        try:
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        statement = connection.get_execution_options().get(BEGIN_OPTION, "BEGIN")
        # none for a read of one statement (see read_options), nor on the connections of
        # Transactions, which send their own
        if statement:
            # on the driver's cursor, its errors wrapped as exec_driver_sql wraps them (a
            # locked database is a conflict, retried: see is_conflict)
            run_on_driver(connection, statement)


def lock_schema(connection: sa.Connection, name: str) -> None:
    """Serialise schema creation between processes (SQLite already holds its write lock)."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": name})


class Attempts:
    """The retries of a transaction that may lose a race: iterate for the delay to sleep after
    each lost attempt (record it in :attr:`last`); when they run out, iteration raises
    :class:`ConcurrencyError` from the last conflict. Shared by the sync and async stores."""

    def __init__(self, retry: Backoff, what: str) -> None:
        self.retry = retry
        self.what = what
        self.last: BaseException | None = None

    def __iter__(self) -> Iterator[float]:
        yield from self.retry.delays()
        raise ConcurrencyError(
            f"{self.what} lost {self.retry.attempts} races with concurrent writers; giving up"
        ) from self.last


def is_conflict(exc: BaseException) -> bool:
    """True when a driver error means a concurrent writer won (the transaction was rolled
    back and running it again is safe): SQLite busy/locked, PostgreSQL serialization
    failures, deadlocks, lock timeouts and unique violations, and their MySQL equivalents."""
    if not isinstance(exc, sa.exc.DBAPIError) or exc.connection_invalidated:
        return False
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate is not None:
        return sqlstate in _PG_CONFLICTS
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None or type(orig).__module__.startswith("sqlite3"):
        message = str(orig).lower()
        return "locked" in message or "busy" in message
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] in _MYSQL_CONFLICTS


def is_schema_conflict(exc: BaseException) -> bool:
    """:func:`is_conflict` for the transaction that creates or migrates the schema, less the
    duplicate keys: the schema lock serialises the processes that create the schema, so a
    duplicate key there is the data's (a migration step meeting rows it cannot take), not a
    lost race. Retried, it would end in a ConcurrencyError that hides the cause."""
    if not is_conflict(exc):
        return False
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate is not None:
        return bool(sqlstate != _PG_DUPLICATE)
    args: tuple[object, ...] = getattr(orig, "args", ())
    return not (bool(args) and args[0] == _MYSQL_DUPLICATE)
