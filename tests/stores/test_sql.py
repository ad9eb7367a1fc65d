"""What is particular to the SQL store: the schema and its version, the window index, search
pushed down as escaped LIKE, URL options, driver errors and lost races, several processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest
import sqlalchemy as sa

from chat_memory import ChatMemory, Event, EventType, MemoryConfig, open_store
from chat_memory.backends import default_url
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.migrations import Migration
from chat_memory.backends.sql import SCHEMA_VERSION, SQLStore, schema_migrations
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError, ConfigurationError, SchemaError, StorageError
from chat_memory.search import SearchQuery

SQL_STORES = ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]
SQL_URLS = ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]


@pytest.fixture(params=SQL_STORES)
def sql_store(request) -> SQLStore:
    return request.getfixturevalue(request.param)


@pytest.fixture(params=SQL_URLS)
def sql_url(request) -> str:
    return request.getfixturevalue(request.param)


def words(text: str) -> int:
    return len(text.split())


def archive_everything(store: SQLStore, cid: str) -> None:
    snapshot = store.load(cid)
    assert store.apply(cid, CompactionPlan(snapshot.version, archive_through_seq=snapshot.last_seq))


# -- schema ------------------------------------------------------------------------------


def test_schema_version_is_recorded_and_a_mismatch_is_refused(sql_url):
    with SQLStore.from_url(sql_url) as store:
        store.append("c", [Event.user("hi")])
        meta = store.tables.meta
        with store.engine.begin() as connection:
            recorded = connection.execute(
                sa.select(meta.c.value).where(meta.c.name == "schema_version")
            ).scalar_one()
            assert recorded == SCHEMA_VERSION
            connection.execute(
                meta.update().where(meta.c.name == "schema_version").values(value="999")
            )
    with SQLStore.from_url(sql_url) as newer, pytest.raises(SchemaError, match="999"):
        newer.load("c")


def _pretend_version_1(store: SQLStore) -> None:
    """Turn the tables into schema version 1, as chat-memory 0.1 wrote them: no compactions
    table, no long-term memory tables."""
    with store.engine.begin() as connection:
        tables = store.tables
        for table in (
            tables.compactions,
            tables.memory_versions,
            tables.memory_files,
            tables.memory_namespaces,
        ):
            table.drop(connection)
        meta = store.tables.meta
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="1"))


def _pretend_version_0(store: SQLStore) -> None:
    """Turn the tables into a made-up "version 0" that also lacked events.tokens, for the
    migration tests (0 -> 1 is a test migration, 1 -> 2 the real one)."""
    _pretend_version_1(store)
    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"ALTER TABLE {store.tables.events.name} DROP COLUMN tokens")
        meta = store.tables.meta
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="0"))


def test_a_version_1_database_gets_the_new_tables_in_place(sql_url):
    with SQLStore.from_url(sql_url) as old:
        old.append("c", [Event.user("written by 0.1", tokens=4)])
        _pretend_version_1(old)
    with SQLStore.from_url(sql_url) as store:
        assert [e.content for e in store.history("c")] == ["written by 0.1"]
        assert store.compactions("c") == []
        recorded = _meta(store)
        assert recorded["schema_version"] == SCHEMA_VERSION == "8"
        assert recorded["migrated_to_2"].endswith(
            " add the compactions and long-term memory tables"
        )
        for table in (
            store.tables.compactions,
            store.tables.memory_namespaces,
            store.tables.memory_files,
        ):
            assert sa.inspect(store.engine).has_table(table.name)


def _add_tokens(change: schema_migrations.SchemaChange) -> None:
    change.connection.exec_driver_sql(
        f"ALTER TABLE {change.tables.events.name} ADD COLUMN tokens INTEGER"
    )


def _meta(store: SQLStore) -> dict[str, str]:
    with store.engine.begin() as connection:
        return dict(
            connection.execute(sa.select(store.tables.meta.c.name, store.tables.meta.c.value)).all()
        )


def test_an_older_schema_is_migrated_in_place(sql_url, monkeypatch):
    with SQLStore.from_url(sql_url) as old:
        old.append(
            "c", [Event.user("written by version 0", tokens=4), Event.assistant("ok", tokens=1)]
        )
        _pretend_version_0(old)
    with (
        SQLStore.from_url(sql_url) as refused,
        pytest.raises(SchemaError, match="no migration from version 0 to 1"),
    ):
        refused.load("c")
    step = Migration(0, "add events.tokens", _add_tokens)
    monkeypatch.setattr(
        schema_migrations,
        "SQL_SCHEMA",
        dataclasses.replace(
            schema_migrations.SQL_SCHEMA,
            migrations=(step, *schema_migrations.SQL_SCHEMA.migrations),
        ),
    )
    with SQLStore.from_url(sql_url) as store:
        assert [e.content for e in store.history("c")] == ["written by version 0", "ok"]
        assert store.append("c", [Event.user("after", tokens=1)]).last_seq == 3
        recorded = _meta(store)
        assert recorded["schema_version"] == SCHEMA_VERSION
        assert recorded["migrated_to_1"].endswith(" add events.tokens")
        assert recorded["migrated_to_2"].endswith(
            " add the compactions and long-term memory tables"
        )
        columns = {
            c["name"] for c in sa.inspect(store.engine).get_columns(store.tables.events.name)
        }
        assert "tokens" in columns
    with SQLStore.from_url(sql_url) as again:  # upgraded once: nothing left to run
        monkeypatch.setattr(
            schema_migrations,
            "SQL_SCHEMA",
            dataclasses.replace(schema_migrations.SQL_SCHEMA, migrations=()),
        )
        assert again.load("c").last_seq == 3


def test_a_failing_migration_leaves_the_tables_at_their_old_version(sql_url, monkeypatch):
    with SQLStore.from_url(sql_url) as old:
        old.append("c", [Event.user("hi", tokens=1)])
        _pretend_version_0(old)

    def half_done(change: schema_migrations.SchemaChange) -> None:
        _add_tokens(change)
        raise RuntimeError("migration bug")

    step = Migration(0, "add events.tokens", half_done)
    monkeypatch.setattr(
        schema_migrations,
        "SQL_SCHEMA",
        dataclasses.replace(
            schema_migrations.SQL_SCHEMA,
            migrations=(step, *schema_migrations.SQL_SCHEMA.migrations),
        ),
    )
    # a bug in a migration propagates as itself (only driver errors become StorageError)
    with SQLStore.from_url(sql_url) as store, pytest.raises(RuntimeError, match="migration bug"):
        store.load("c")
    with SQLStore.from_url(sql_url) as store:
        assert _meta(store)["schema_version"] == "0"
        columns = {
            c["name"] for c in sa.inspect(store.engine).get_columns(store.tables.events.name)
        }
        assert "tokens" not in columns  # the ALTER TABLE was rolled back with the rest


def test_schema_version_5_is_migrated_in_place_counting_failures_from_0(sql_url):
    with SQLStore.from_url(sql_url) as old:
        old.append("c", [Event.user("written by version 5", tokens=4)])
        old.record_compaction_error("c", "summarizer down")
        conversations, meta = old.tables.conversations, old.tables.meta
        with old.engine.begin() as connection:  # the tables as version 5 left them
            connection.exec_driver_sql(
                f"ALTER TABLE {conversations.name} DROP COLUMN compaction_failures"
            )
            connection.execute(
                meta.update().where(meta.c.name == "schema_version").values(value="5")
            )
    with SQLStore.from_url(sql_url) as store:
        snapshot = store.load("c")
        assert (snapshot.compaction_error, snapshot.compaction_failures) == ("summarizer down", 0)
        store.record_compaction_error("c", "summarizer down")
        assert store.load("c").compaction_failures == 1
        assert store.append("other", [Event.user("new", tokens=1)]).compaction_failures == 0
        recorded = _meta(store)
        assert recorded["schema_version"] == SCHEMA_VERSION == "8"
        assert recorded["migrated_to_6"].endswith(
            " count failed compactions beside the compaction error"
        )


def test_a_newer_schema_names_both_versions(sqlite_url):
    with SQLStore.from_url(sqlite_url) as store:
        store.append("c", [Event.user("hi")])
        meta = store.tables.meta
        with store.engine.begin() as connection:
            connection.execute(
                meta.update().where(meta.c.name == "schema_version").values(value="9")
            )
    with (
        SQLStore.from_url(sqlite_url) as newer,
        pytest.raises(SchemaError, match=r"version 9, newer than version 8"),
    ):
        newer.append("c", [Event.user("would be lost")])
    with SQLStore.from_url(sqlite_url) as store:
        assert _meta(store)["schema_version"] == "9"


def test_foreign_tables_with_our_names_are_refused(sqlite_url):
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE chat_memory_events (id INTEGER PRIMARY KEY)")
    engine.dispose()
    with (
        SQLStore.from_url(sqlite_url) as store,
        pytest.raises(SchemaError, match="not created by chat-memory"),
    ):
        store.conversations()


def test_table_prefix_separates_stores_in_one_database(sqlite_url):
    with (
        SQLStore.from_url(f"{sqlite_url}?table_prefix=bot_a_") as a,
        SQLStore.from_url(sqlite_url, table_prefix="bot_b_") as b,
    ):
        a.append("c", [Event.user("from a")])
        assert b.conversations() == []
        assert sa.inspect(a.engine).has_table("bot_a_events")
    with pytest.raises(ConfigurationError, match="table_prefix"):
        SQLStore.from_url(f"{sqlite_url}?table_prefix=drop%20table")


# -- the window never reads the archive -----------------------------------------------


def test_sqlite_window_read_is_an_index_range_without_sorting(sqlite_store):
    sqlite_store.append("c", [Event.user("hi")])
    archive_everything(sqlite_store, "c")
    sql = str(
        sqlite_store.window_query("c").compile(
            sqlite_store.engine, compile_kwargs={"literal_binds": True}
        )
    )
    with sqlite_store.engine.connect() as connection:
        plan = " | ".join(
            row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")
        )
    assert (
        "USING INDEX chat_memory_events_window_idx (conversation_ref=? AND archived=?)" in plan
    ), plan
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.postgres
def test_postgres_window_read_uses_the_index_over_a_large_archive(postgres_store):
    store = postgres_store
    for batch in range(4):
        store.append("c", [Event.user(f"old {batch}-{i}") for i in range(1000)])
    archive_everything(store, "c")
    store.append("c", [Event.user("new"), Event.assistant("reply")])
    sql = str(store.window_query("c").compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"ANALYZE {store.tables.events.name}")
        connection.exec_driver_sql(f"ANALYZE {store.tables.conversations.name}")
        plan = "\n".join(row[0] for row in connection.exec_driver_sql(f"EXPLAIN {sql}"))
    assert "events_window_idx" in plan, plan
    assert f"Seq Scan on {store.tables.events.name}" not in plan, plan
    assert [e.content for e in store.load("c").window.active] == ["new", "reply"]
    assert store.load("c").archived_count == 4000


@pytest.mark.postgres
def test_postgres_events_table_is_vacuumed_sooner_than_the_default(postgres_store):
    postgres_store.append("c", [Event.user("creates the tables")])
    with postgres_store.engine.connect() as connection:
        options = connection.execute(
            sa.text("SELECT reloptions FROM pg_class WHERE relname = :name"),
            {"name": postgres_store.tables.events.name},
        ).scalar_one()
    assert sorted(options) == [
        "autovacuum_analyze_scale_factor=0.02",
        "autovacuum_vacuum_scale_factor=0.02",
    ]


# -- search pushed down ------------------------------------------------------------------


def search(store: SQLStore, keyword: str, mode: str = "phrase") -> list[str]:
    return [e.content for e in store.search("c", SearchQuery.build(keyword, mode, 0, 50)).events]


def test_like_wildcards_and_escape_characters_are_literal(sql_store):
    texts = ["100% sure", "a_b", "back\\slash", "x/y", "plain ab text", "caret ^ and bang !"]
    sql_store.append("c", [Event.user(t) for t in texts])
    assert search(sql_store, "%") == ["100% sure"]
    assert search(sql_store, "_") == ["a_b"]
    assert search(sql_store, "\\") == ["back\\slash"]
    assert search(sql_store, "/") == ["x/y"]
    assert search(sql_store, "^") == search(sql_store, "!") == ["caret ^ and bang !"]
    assert search(sql_store, "a%b") == search(sql_store, "a_c") == []


def test_search_folds_case_beyond_ascii_but_not_accents(sql_store):
    sql_store.append(
        "c", [Event.user("Viel ärger mit der Straße"), Event.assistant("ΣΊΣΥΦΟΣ arger")]
    )
    assert search(sql_store, "ÄRGER") == ["Viel ärger mit der Straße"]
    assert search(sql_store, "STRASSE") == ["Viel ärger mit der Straße"]
    assert search(sql_store, "σίσυφος") == ["ΣΊΣΥΦΟΣ arger"]
    assert search(sql_store, "arger") == ["ΣΊΣΥΦΟΣ arger"]


def test_search_counts_and_pages_in_the_database_across_the_archive(sql_store):
    sql_store.append(
        "c", [Event.user(f"needle {i}" if i % 3 == 0 else f"hay {i}") for i in range(60)]
    )
    sql_store.append("c", [Event.system("needle in a system prompt")])
    archive_everything(sql_store, "c")
    sql_store.append("c", [Event.user("needle fresh")])
    page = sql_store.search("c", SearchQuery.build("NEEDLE", "phrase", page=1, page_size=7))
    assert page.total == 21
    assert [e.content for e in page.events] == [f"needle {i}" for i in range(21, 42, 3)]
    assert all(e.archived for e in page.events)
    last = sql_store.search("c", SearchQuery.build("needle", "phrase", page=2, page_size=10))
    assert [(e.content, e.archived) for e in last.events] == [("needle fresh", False)]
    assert search(sql_store, "59 needle", "any")[:2] == ["needle 0", "needle 3"]
    assert search(sql_store, "59 hay", "all") == ["hay 59"]


# -- URLs, engines and the built-in store ----------------------------------------------


def test_relative_and_nested_sqlite_paths_and_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///chat.db") as store:
        store.append("c", [Event.user("hi")])
    assert (tmp_path / "chat.db").exists()
    with open_store(f"sqlite:///{tmp_path}/deeper/folder/chat.db") as store:
        store.append("c", [Event.user("hi")])
    assert (tmp_path / "deeper" / "folder" / "chat.db").exists()
    with open_store("sqlite://") as store:  # one in-memory database shared by every call
        store.append("c", [Event.user("hi")])
        assert [e.content for e in store.history("c")] == ["hi"]


def test_built_in_store_is_a_sqlite_file_in_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("CHAT_MEMORY_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with open_store() as store:
        assert isinstance(store, SQLStore)
        store.append("c", [Event.user("hi")])
    assert default_url() == f"sqlite:///{tmp_path / 'data' / 'chat-memory' / 'chat-memory.db'}"
    assert (tmp_path / "data" / "chat-memory" / "chat-memory.db").exists()


def test_a_given_engine_stays_open_and_url_options_apply(sqlite_url):
    engine = sa.create_engine(sqlite_url)
    store = SQLStore(engine)
    store.append("c", [Event.user("hi")])
    store.close()
    with engine.connect() as connection:
        assert (
            connection.exec_driver_sql("SELECT count(*) FROM chat_memory_events").scalar_one() == 1
        )
    engine.dispose()
    with SQLStore.from_url(f"{sqlite_url}?max_archived_events=2") as capped:
        assert capped.default_max_archived_events == 2
        capped.append("d", [Event.user(str(i)) for i in range(5)])
        archive_everything(capped, "d")
        assert [e.content for e in capped.history("d")] == ["3", "4"]
        assert capped.load("d").archived_count == 2
    with pytest.raises(ConfigurationError, match="max_archived_events"):
        SQLStore.from_url(f"{sqlite_url}?max_archived_events=lots")


# -- driver errors and lost races ------------------------------------------------------


def test_unreachable_server_is_a_storage_error():
    store = open_store("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")
    with pytest.raises(StorageError) as raised:
        store.load("c")
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)
    store.close()


def test_a_lock_held_too_long_ends_in_concurrency_error_and_loses_nothing(sqlite_url):
    with SQLStore.from_url(
        f"{sqlite_url}?timeout=0.01", retry=Backoff(attempts=3, base=0.001)
    ) as store:
        store.append("c", [Event.user("first")])
        blocker = sa.create_engine(sqlite_url, isolation_level="AUTOCOMMIT")
        with blocker.connect() as connection:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            with pytest.raises(ConcurrencyError) as raised:
                store.append("c", [Event.user("blocked")])
            assert "locked" in str(raised.value.__cause__)
            connection.exec_driver_sql("ROLLBACK")
        blocker.dispose()
        store.append("c", [Event.user("second")])
        assert [(e.seq, e.content) for e in store.history("c")] == [(1, "first"), (2, "second")]


@pytest.mark.postgres
def test_postgres_lock_timeout_is_retried_then_reported(postgres_url):
    url = f"{postgres_url}&options=-c%20lock_timeout%3D20"
    with SQLStore.from_url(url, retry=Backoff(attempts=3, base=0.001)) as store:
        store.append("c", [Event.user("first")])
        conversations = store.tables.conversations
        with store.engine.connect() as holder, holder.begin():
            holder.execute(sa.select(conversations.c.id).with_for_update())
            with pytest.raises(ConcurrencyError):
                store.append("c", [Event.user("blocked")])
        store.append("c", [Event.user("second")])
        assert [(e.seq, e.content) for e in store.history("c")] == [(1, "first"), (2, "second")]


# -- several processes ----------------------------------------------------------------

WRITERS = 8
ADDS = 12


def _write_pairs(url: str, writer: int) -> int:
    with open_store(url) as store:
        memory = ChatMemory(
            store, MemoryConfig(compaction_strategy="turn_window", max_turns=2), token_counter=words
        )
        for i in range(ADDS):
            memory.add(
                "shared", [Event.user(f"w{writer}-{i}"), Event.assistant(f"w{writer}-{i} reply")]
            )
    return ADDS


@pytest.mark.slow
def test_eight_processes_append_and_compact_one_conversation(sql_url):
    with SQLStore.from_url(sql_url) as store:
        store.append("other", [Event.user("schema first")])  # create the tables once, up front
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    with ProcessPoolExecutor(WRITERS, mp_context=context) as pool:
        assert list(pool.map(_write_pairs, [sql_url] * WRITERS, range(WRITERS))) == [ADDS] * WRITERS
    with SQLStore.from_url(sql_url) as store:
        history = store.history("shared")
        assert [e.seq for e in history] == list(range(1, WRITERS * ADDS * 2 + 1))
        for user, reply in zip(history[::2], history[1::2]):
            assert user.type is EventType.USER and reply.content == f"{user.content} reply"
        assert sorted(e.content for e in history[::2]) == sorted(
            f"w{w}-{i}" for w in range(WRITERS) for i in range(ADDS)
        )
        snapshot = store.load("shared")
        assert (
            snapshot.archived_count
            == sum(e.archived for e in history)
            == len(history) - len(snapshot.window.active)
        )


_FORKED_STORE: SQLStore | None = None


def _append_in_child(text: str) -> int:
    assert _FORKED_STORE is not None
    return _FORKED_STORE.append("c", [Event.user(text)]).last_seq


@pytest.mark.postgres
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_forked_child_opens_its_own_connections(postgres_store):
    global _FORKED_STORE
    _FORKED_STORE = postgres_store
    postgres_store.append("c", [Event.user("parent")])  # the pool now holds a connection
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        assert sorted(pool.map(_append_in_child, ["child a", "child b"])) == [2, 3]
    postgres_store.append("c", [Event.user("parent again")])
    assert [e.seq for e in postgres_store.history("c")] == [1, 2, 3, 4]
