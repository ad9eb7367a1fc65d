"""The lifecycle on SQL (docs/lifecycle.md, docs/sql.md), on real SQLite and PostgreSQL, sync
and native async: the conformance suite with a raw scan of every row of every table of the
database (each PostgreSQL test gets a database of its own, so "every table" is exact), other
users' rows intact after an erasure, listings and the sweep served by their indexes (EXPLAIN),
eight processes writing and sweeping at once, and the schema migration 6 -> 7."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from chat_memory import ChatMemory, Event
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import Store
from chat_memory.backends.sql import SCHEMA_VERSION, AsyncSQLStore, SQLStore
from chat_memory.backends.sql.schema import UNSCOPED_SCOPE_KEY, scope_key
from chat_memory.errors import ConcurrencyError
from chat_memory.lifecycle import Scope
from chat_memory.longterm import long_term_memory
from chat_memory.testing.lifecycle_conformance import LifecycleConformance
from tests.conftest import WRITER_PROCESSES
from tests.services.postgres import PostgresServer
from tests.support.lifecycle_workers import writers_race_sweepers


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a database of this test's own on the shared server, dropped after it."""
    name = f"lc_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server.url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture(
    params=["sqlite_url", pytest.param("postgres_database", marks=pytest.mark.postgres)]
)
def database_url(request: pytest.FixtureRequest) -> str:
    """A database holding nothing but what the test writes."""
    return str(request.getfixturevalue(request.param))


def every_row(engine: sa.Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the database, by table name (SQLite: ``sqlite_master``;
    PostgreSQL: every base table of ``information_schema`` outside the system schemas)."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            names = connection.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ).scalars()
            tables = {name: f'"{name}"' for name in names}
        else:
            found = connection.exec_driver_sql(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_type = 'BASE TABLE' "
                "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).all()
            tables = {
                name if schema == "public" else f"{schema}.{name}": f'"{schema}"."{name}"'
                for schema, name in found
            }
        return {
            name: [tuple(row) for row in connection.exec_driver_sql(f"SELECT * FROM {table}")]
            for name, table in tables.items()
        }


def strings_of(rows: dict[str, list[tuple[Any, ...]]]) -> list[str]:
    """Every value of every row as text (names of tables included)."""
    return [*rows, *(str(value) for table in rows.values() for row in table for value in row)]


class TestSQLLifecycle(LifecycleConformance):
    """The suite on a database of the test's own: sync, and async on the native AsyncSQLStore."""

    @pytest.fixture
    def store(self, database_url: str) -> Iterator[SQLStore]:
        store = SQLStore.from_url(database_url)
        yield store
        store.close()

    def async_store(self, store: Store) -> AsyncStore:
        assert isinstance(store, SQLStore)
        url = store.engine.url.render_as_string(hide_password=False)
        return AsyncSQLStore(url, table_prefix=store.tables.prefix)

    def raw_strings(self, store: Store) -> list[str]:
        assert isinstance(store, SQLStore)
        return strings_of(every_row(store.engine))


def test_forget_leaves_every_other_row_as_it_was(database_url: str) -> None:
    with SQLStore.from_url(database_url) as store:
        memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
        suite = TestSQLLifecycle()
        suite._plant(memory, store, "alice", "aardvark")
        suite._plant(memory, store, "bob", "bluebird")
        memory.add("bare", Event.user("unscoped words"))
        long_term_memory(store, "shared").create("/memories/x.md", "unscoped file")
        before = every_row(store.engine)
        receipt = memory.forget(user="alice", app="app")
        assert receipt.conversations == 2 and receipt.long_term_versions == 2
        after = every_row(store.engine)
        guards = store.tables.guards.name
        for table, rows in after.items():
            if table == guards:  # digests only: no id survives
                assert not any("alice" in str(v) for row in rows for v in row)
                continue
            assert set(rows) <= set(before[table]), f"{table} changed"
            kept = [r for r in before[table] if "bluebird" in str(r) or "unscoped" in str(r)]
            assert set(kept) <= set(rows), f"{table} lost another user's rows"
        assert not [s for s in strings_of(after) if "alice" in s or "aardvark" in s]
        gone = {
            t: len(before[t]) - len(after[t]) for t in before if len(before[t]) != len(after[t])
        }
        assert set(gone) >= {store.tables.events.name, store.tables.conversations.name}


def test_a_guard_refuses_recreating_a_forgotten_user_until_it_lapses(sqlite_url: str) -> None:
    with SQLStore.from_url(sqlite_url) as store:
        memory = ChatMemory(store)
        alice = memory.for_user("alice")
        alice.add("c", Event.user("before"))
        files = long_term_memory(store, "notes", user="alice")
        files.create("/memories/a.md", "remember")
        assert memory.forget(user="alice").long_term_files == 1
        for write in (
            lambda: alice.add("c", Event.user("racing")),
            lambda: alice.set_metadata("new", title="racing"),
            lambda: files.create("/memories/b.md", "racing"),
        ):
            with pytest.raises(ConcurrencyError, match="being erased"):
                write()
        memory.for_user("bob").add("c", Event.user("other users write on"))
        guards = store.tables.guards
        with store.engine.begin() as connection:  # the guard lapses
            connection.execute(guards.update().values(until=datetime(2000, 1, 1)))
        alice.add("c", Event.user("after the guard"))
        assert [e.content for e in alice.history("c")] == ["after the guard"]


# -- indexes -------------------------------------------------------------------------------


def _plan(store: SQLStore, query: sa.Select[Any]) -> str:
    with store.engine.connect() as connection:
        compiled = str(
            query.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True})
        )
        if store.engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}").all()
            return "\n".join(str(row[-1]) for row in rows)
        return "\n".join(r[0] for r in connection.exec_driver_sql(f"EXPLAIN {compiled}").all())


def _fill(store: SQLStore, scopes: int, per_scope: int) -> None:
    """Conversation rows in many scopes, written straight to the tables (the planner's view
    of a store in use), with two event rows each and tags on some, then statistics."""
    conversations, tags = store.tables.conversations, store.tables.conversation_tags
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [
        {
            "conversation_key": uuid.uuid4().hex,
            "conversation_id": f"~scope//u{s}/c{i}",
            "version": 1,
            "last_seq": 1,
            "archived_count": 0,
            "created_at": start,
            "updated_at": start + timedelta(seconds=s * per_scope + i),
            "scope_key": scope_key(Scope(f"u{s}").prefix),
        }
        for s in range(scopes)
        for i in range(per_scope)
    ]
    with store.engine.begin() as connection:
        connection.execute(conversations.insert(), rows)
        ids = connection.execute(sa.select(conversations.c.id, conversations.c.scope_key)).all()
        connection.execute(
            tags.insert(),
            [{"conversation_ref": i, "tag_key": "t" * 64, "scope_key": s} for i, s in ids[::7]],
        )
        connection.execute(
            store.tables.events.insert(),
            [
                {
                    "conversation_ref": i,
                    "seq": seq,
                    "type": "user",
                    "archived": False,
                    "created_at": start,
                    "body": "{}",
                }
                for i, _ in ids
                for seq in (1, 2)
            ],
        )
        connection.exec_driver_sql("ANALYZE")


@pytest.mark.parametrize(
    "sql_store", ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]
)
def test_listing_and_the_sweep_read_by_index(
    sql_store: str, request: pytest.FixtureRequest
) -> None:
    store: SQLStore = request.getfixturevalue(sql_store)
    store.conversations()  # the schema
    _fill(store, scopes=40, per_scope=50)
    life, prefix = store.ops.life, store.tables.prefix
    scope = Scope("u7").prefix
    cutoff = datetime(2026, 1, 2, tzinfo=timezone.utc)  # every row idle: no shortcut
    plans = {
        "listing": _plan(store, life.listing_query(scope, None).limit(50)),
        "tagged": _plan(store, life.listing_query(scope, "x").limit(50)),
        "idle in a scope": _plan(store, life.idle_query(scope, cutoff, 100)),
        "idle anywhere": _plan(store, life.idle_query(None, cutoff, 100)),
    }
    expected = {
        "listing": f"{prefix}conversations_scope_idx",
        "tagged": f"{prefix}conversation_tags_idx",
        "idle in a scope": f"{prefix}conversations_scope_idx",
        "idle anywhere": f"{prefix}conversations_active_idx",
    }
    for name, index in expected.items():
        assert index in plans[name], f"{name}: {plans[name]}"
        # neither table of the look-up is read whole (the events count is a search by index)
        for table in ("conversations", "conversation_tags", "events"):
            whole = (f"Seq Scan on {prefix}{table} ", f"SCAN {prefix}{table}\n")
            assert not any(w in plans[name] + "\n" for w in whole), f"{name}: {plans[name]}"
    assert [r.conversation_id for r in store.list_conversations(scope, None, 0, 3)] == [
        "~scope//u7/c49",
        "~scope//u7/c48",
        "~scope//u7/c47",
    ]


# -- many processes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
)
def test_eight_processes_writing_and_sweeping(
    url: str, request: pytest.FixtureRequest, writer_processes: Any
) -> None:
    """Four writers add to their users' conversations (one seeded before the cutoff) while
    four sweepers sweep the whole store with the cutoff after the seeds: every idle
    conversation goes with every row it owns, each once, and no write after the cutoff is lost."""
    store_url: str = request.getfixturevalue(url)
    store = SQLStore.from_url(store_url)
    memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    writers_race_sweepers(memory, store_url, writer_processes, WRITER_PROCESSES)
    tables = store.tables
    with store.engine.connect() as connection:  # no row left of a deleted conversation
        refs = sa.select(tables.conversations.c.id)
        for table in (tables.events, tables.compactions, tables.retracted, tables.timeline):
            orphans = connection.execute(
                sa.select(sa.func.count()).where(table.c.conversation_ref.not_in(refs))
            ).scalar_one()
            assert orphans == 0, table.name
    store.close()


# -- migration ---------------------------------------------------------------------------------


def _as_version_6(store: SQLStore) -> None:
    """Turn the tables back into schema version 6: no lifecycle columns, indexes or tables."""
    tables = store.tables
    with store.engine.begin() as connection:
        for table in (tables.conversation_tags, tables.guards, tables.timeline):
            table.drop(connection)
        for table, columns in (
            (tables.conversations, ("scope_key", "title", "tags", "meta", "timeline_from")),
            (tables.memory_namespaces, ("scope_key", "expires_at")),
        ):
            for index in table.indexes:
                if any(c.name in columns for c in index.columns):
                    index.drop(connection)
            for column in columns:
                connection.exec_driver_sql(f"ALTER TABLE {table.name} DROP COLUMN {column}")
        meta = tables.meta
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="6"))


def test_schema_version_6_is_migrated_in_place(database_url: str) -> None:
    with SQLStore.from_url(database_url) as old:
        memory = ChatMemory(old, {"compaction_strategy": "turn_window", "max_turns": 1})
        memory.add("bare", [Event.user("one"), Event.assistant("two")])
        memory.for_user("alice", app="a/b").add("c", Event.user("scoped before 7"))
        long_term_memory(old, "notes", user="alice").create("/memories/a.md", "hi")
        _as_version_6(old)
    with SQLStore.from_url(database_url) as store:
        memory = ChatMemory(store)
        alice = memory.for_user("alice", app="a/b")
        assert [c.id for c in alice.conversations()] == ["c"]  # found by its scope key
        assert [c.id for c in memory.conversations()] == ["bare"]
        conversations = store.tables.conversations
        with store.engine.connect() as connection:
            rows = dict(
                connection.execute(
                    sa.select(conversations.c.conversation_id, conversations.c.timeline_from)
                ).all()
            )
            scopes = set(connection.execute(sa.select(conversations.c.scope_key)).scalars())
        # no timeline before the migration: a fork at an earlier seq is refused, not guessed
        assert rows["bare"] == 2 and scopes == {
            UNSCOPED_SCOPE_KEY,
            scope_key(Scope("alice", "a/b").prefix),
        }
        assert memory.forget(user="alice").long_term_files == 1  # the namespace's scope too
        alice.set_metadata("c", title="after", tags=["t"])
        assert [c.title for c in alice.conversations(tag="t")] == ["after"]
        with store.engine.connect() as connection:
            recorded = dict(
                connection.execute(
                    sa.select(store.tables.meta.c.name, store.tables.meta.c.value)
                ).all()
            )
        assert recorded["schema_version"] == SCHEMA_VERSION == "8"
        assert recorded["migrated_to_7"].endswith(
            " scope, metadata, tags, erasure guards and the fork timeline"
        )
