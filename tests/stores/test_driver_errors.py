"""Which exceptions a store turns into StorageError (chat_memory.backends.failures): only those
of its driver, which each store class declares (``driver_errors``), named after the store and
the method and raised from the original; a bug in chat-memory's own code propagates as itself,
with its traceback."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa

from chat_memory import ConfigurationError, Event, StorageError
from chat_memory.backends.failures import driver_exceptions
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.sql import SQLStore
from chat_memory.errors import SchemaError
from chat_memory.longterm import long_term_memory


def raising(error: BaseException) -> Callable[..., Any]:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    return fail


class LocalDiskStore(InMemoryStore):
    """A store whose "driver" raises OSError, declared by a lazy name."""

    driver_errors = ("builtins:OSError",)


def sql_error() -> BaseException:
    return sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))


def redis_error() -> BaseException:
    import redis

    return redis.exceptions.ConnectionError("Connection reset by peer")


def s3_error() -> BaseException:
    from botocore.exceptions import EndpointConnectionError

    return EndpointConnectionError(endpoint_url="http://s3.invalid")


class Case(NamedTuple):
    fixture: str | None  # None: a LocalDiskStore
    name: str
    helper: Callable[[Any], tuple[Any, str]]  # the object and attribute load() calls inside
    driver_error: Callable[[], BaseException]


STORES = {
    "memory": Case(None, "LocalDiskStore", lambda s: (s, "_snapshot"), lambda: OSError("no disk")),
    "sqlite": Case("sqlite_store", "SQLStore", lambda s: (s.ops, "load"), sql_error),
    "redis": Case("fakeredis_store", "RedisStore", lambda s: (s, "_snapshot"), redis_error),
    "s3": Case("s3_mock_store", "S3Store", lambda s: (s, "_read_window"), s3_error),
}


def broken_load(request: Any, monkeypatch: Any, kind: str, error: BaseException) -> Any:
    """The store's ``load`` of a stored conversation, with ``error`` raised inside it."""
    case = STORES[kind]
    store = LocalDiskStore() if case.fixture is None else request.getfixturevalue(case.fixture)
    store.append("c", [Event.user("hello")])
    monkeypatch.setattr(*case.helper(store), raising(error))
    return lambda: store.load("c")


@pytest.mark.parametrize("kind", list(STORES))
def test_a_bug_inside_a_store_method_propagates_as_itself(request, monkeypatch, kind):
    bug = TypeError("unsupported operand type(s) for +: 'int' and 'str'")
    load = broken_load(request, monkeypatch, kind, bug)
    with pytest.raises(TypeError) as raised:
        load()
    assert raised.value is bug  # not a StorageError, not re-wrapped: the traceback is ours


@pytest.mark.parametrize("kind", list(STORES))
def test_a_declared_driver_error_becomes_a_storage_error_naming_store_and_method(
    request, monkeypatch, kind
):
    name, error = STORES[kind].name, STORES[kind].driver_error()
    load = broken_load(request, monkeypatch, kind, error)
    with pytest.raises(StorageError, match=rf"^{name}\.load failed: {type(error).__name__}: "):
        load()
    with pytest.raises(StorageError) as raised:
        load()
    assert raised.value.__cause__ is error


def test_an_undeclared_driver_error_propagates_as_itself(monkeypatch):
    store = InMemoryStore()  # no driver: it declares nothing
    store.append("c", [Event.user("hello")])
    monkeypatch.setattr(store, "_snapshot", raising(OSError("disk on fire")))
    with pytest.raises(OSError, match="disk on fire"):
        store.load("c")


def test_a_secret_in_the_drivers_message_is_not_shown(monkeypatch):
    store = LocalDiskStore()
    store.append("c", [Event.user("hello")])
    failure = OSError("could not reach postgresql://admin:Sup3rSecret@db.internal/chat")
    monkeypatch.setattr(store, "_snapshot", raising(failure))
    with pytest.raises(StorageError) as raised:
        store.load("c")
    assert "Sup3rSecret" not in str(raised.value)
    assert "postgresql://admin:***@db.internal/chat" in str(raised.value)


@pytest.mark.parametrize("error", [TypeError("a bug"), sql_error()], ids=["bug", "driver"])
def test_the_native_async_store_wraps_only_its_drivers_errors(
    async_sqlite_store, monkeypatch, error
):
    store = async_sqlite_store
    monkeypatch.setattr(store.ops, "load", raising(error))

    async def load() -> Any:
        return await store.load("c")

    with pytest.raises((TypeError, StorageError)) as raised:
        asyncio.run(load())
    if isinstance(error, TypeError):
        assert raised.value is error
    else:
        assert isinstance(raised.value, StorageError) and raised.value.__cause__ is error
        assert str(raised.value).startswith("AsyncSQLStore.load failed: OperationalError: ")


@pytest.mark.parametrize("error", [TypeError("a bug"), sql_error()], ids=["bug", "driver"])
def test_long_term_memory_files_wrap_only_their_drivers_errors(sqlite_store, monkeypatch, error):
    files = long_term_memory(sqlite_store, "notes")
    monkeypatch.setattr(sqlite_store._tx, "read", raising(error))
    with pytest.raises((TypeError, StorageError)) as raised:
        files.files()
    if isinstance(error, TypeError):
        assert raised.value is error
    else:
        assert isinstance(raised.value, StorageError) and raised.value.__cause__ is error
        assert str(raised.value).startswith("SQLFiles._listing failed: OperationalError: ")


def test_every_stores_declared_driver_errors_resolve():
    from chat_memory.backends.redis import RedisStore
    from chat_memory.backends.redis_aio import AsyncRedisStore
    from chat_memory.backends.s3.store import S3Store
    from chat_memory.backends.sql.aio import AsyncSQLStore
    from chat_memory.backends.sql.store import SQLStore
    from chat_memory.longterm.redis import RedisFiles
    from chat_memory.longterm.s3 import S3Files
    from chat_memory.longterm.sql import SQLFiles

    for cls in (RedisStore, AsyncRedisStore, SQLStore, AsyncSQLStore, S3Store):
        assert cls.driver_errors, cls
    for cls in (RedisFiles, S3Files, SQLFiles):
        assert cls.driver_errors, cls
    for cls in (RedisStore, AsyncRedisStore, SQLStore, AsyncSQLStore, S3Store):
        # every driver is installed here: each name is an exception class
        assert len(driver_exceptions(cls)) == len(cls.driver_errors), cls
    for cls in (RedisFiles, S3Files, SQLFiles):
        assert len(driver_exceptions(cls)) == len(cls.driver_errors), cls
    assert driver_exceptions(InMemoryStore) == ()


@pytest.mark.parametrize("name", ["sqlalchemy.exc:NoSuchThing", "OSError", "sqlalchemy:exc"])
def test_a_declared_name_that_is_not_an_exception_class_is_refused(name):
    class Misdeclared(InMemoryStore):
        driver_errors = (name,)

    with pytest.raises(ConfigurationError, match=rf"Misdeclared\.driver_errors names '{name}'"):
        driver_exceptions(Misdeclared)


def test_a_driver_that_is_not_installed_is_skipped():
    class Elsewhere(InMemoryStore):
        driver_errors = ("no_such_driver_module.errors:Error", "builtins:OSError")

    assert driver_exceptions(Elsewhere) == (OSError,)


# -- data a store cannot decode: corrupted or foreign, a SchemaError naming where ------------


def test_a_corrupted_s3_head_is_a_schema_error_naming_it(s3_mock_store):
    store = s3_mock_store
    store.append("c", [Event.user("hello")])
    key = store.layout.head("c")
    store.client.put_object(Bucket=store.bucket, Key=key, Body=b'{"format": 3, "cut')
    with pytest.raises(SchemaError, match=rf"S3 head object '{key}' .*JSONDecodeError") as raised:
        store.load("c")
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_corrupted_sql_event_row_is_a_schema_error(sqlite_store):
    sqlite_store.append("c", [Event.user("hello")])
    events = sqlite_store.tables.events
    with sqlite_store.engine.begin() as connection:
        connection.execute(events.update().values(body='{"id": "x", "type": "nonsense"}'))
    # read by a store that has not cached the window (a hand edit leaves the version as it was)
    reader = SQLStore(sqlite_store.engine, table_prefix=sqlite_store.tables.prefix)
    with pytest.raises(
        SchemaError,
        match="a row of the .* tables holds data chat-memory cannot read: ValidationError",
    ):
        reader.load("c")


def test_a_corrupted_long_term_memory_file_is_a_schema_error(fakeredis_store):
    files = long_term_memory(fakeredis_store, "notes")
    files.create("/memories/a.md", "first")
    fakeredis_store.client.hset(files._keys[0], "/memories/a.md", "not json")
    with pytest.raises(SchemaError, match=r"Redis key .* holds data chat-memory cannot read"):
        files.read("/memories/a.md")
