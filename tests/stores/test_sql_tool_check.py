"""The SQL stores run the engine's tool-pair check inside the append's transaction
(:class:`~chat_memory.backends.base.ChecksToolPairs`): the check gets the stored events the
batch's tool events need (window and archive, archived ones marked), what it returns is what
is appended, and a check that refuses leaves nothing written. SQLite and PostgreSQL, sync and
native async, each append method."""

from __future__ import annotations

from typing import Any

import pytest

from chat_memory import Event
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import ChecksToolPairs, CompactionPlan
from chat_memory.errors import InvalidEventError
from chat_memory.testing.blocking import run_blocking

STORES = [
    "sqlite_store",
    pytest.param("postgres_store", marks=pytest.mark.postgres),
    "async_sqlite_store",
    pytest.param("async_postgres_store", marks=pytest.mark.postgres),
]
METHODS = ["append", "append_without_window", "append_compacting"]


class Sync:
    """The store's calls, awaited when the store is async."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.is_async = isinstance(store, AsyncStore)

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.store, name)(*args, **kwargs)
        return run_blocking(result) if self.is_async else result

    def append_with(self, method: str, cid: str, batch: list[Event], check: Any) -> None:
        if method == "append_compacting":
            self(method, cid, batch, lambda _snapshot: None, check=check)
        else:
            self(method, cid, batch, check=check)


@pytest.fixture(params=STORES)
def calls(request: pytest.FixtureRequest) -> Sync:
    return Sync(request.getfixturevalue(request.param))


def test_the_sql_stores_declare_the_ability(sqlite_store, async_sqlite_store):
    assert isinstance(sqlite_store, ChecksToolPairs)
    assert async_sqlite_store.checks_tool_pairs is True


@pytest.mark.parametrize("method", METHODS)
def test_the_check_gets_the_window_and_archive_events_it_needs(calls: Sync, method: str):
    old_call = Event.tool_call("lookup", {}, call_id="old")
    calls("append", "c", [Event.user("q"), old_call, Event.tool_call("find", {}, call_id="new")])
    version = calls("load", "c").version
    assert calls("apply", "c", CompactionPlan(version, archive_through_seq=2))  # "old" archived
    seen: list[list[tuple[str | None, str | None, bool]]] = []
    late, fresh = Event.tool_result("old", "late"), Event.tool_result("new", "done")
    named = [e.model_copy(update={"tool_name": "x"}) for e in (late, fresh)]

    def check(found: list[Event]) -> list[Event]:
        seen.append([(e.tool_call_id, e.type.value, e.archived) for e in found])
        return named

    calls.append_with(method, "c", [late, fresh], check)
    assert seen and all(
        sorted(s) == [("new", "tool_call", False), ("old", "tool_call", True)] for s in seen
    )
    stored = calls("history", "c")[-2:]
    assert [(e.id, e.tool_name) for e in stored] == [(late.id, "x"), (fresh.id, "x")]


@pytest.mark.parametrize("method", METHODS)
def test_a_refusing_check_writes_nothing(calls: Sync, method: str):
    def refuse(_found: list[Event]) -> list[Event]:
        raise InvalidEventError("events[0] refused by the check")

    orphan = [Event.tool_result("nowhere", "r")]
    with pytest.raises(InvalidEventError, match="refused by the check"):
        calls.append_with(method, "new", orphan, refuse)
    assert calls("conversations") == [] and calls("load", "new").version == 0
    calls("append", "c", [Event.user("q")])
    with pytest.raises(InvalidEventError, match="refused by the check"):
        calls.append_with(method, "c", orphan, refuse)
    snapshot = calls("load", "c")
    assert (snapshot.version, snapshot.last_seq) == (1, 1)
