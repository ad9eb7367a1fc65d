"""The async store conformance suite (chat_memory.testing.async_store_conformance) on every
native async store and on ThreadedStore, as a third party runs it on theirs, and proof that
it fails for async stores that break the protocol."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from chat_memory import ThreadedStore
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.base import Snapshot, Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import Event
from chat_memory.testing.async_store_conformance import AsyncStoreConformance
from chat_memory.testing.blocking import blocking_store
from chat_memory.testing.retraction_conformance import RetractionConformance
from chat_memory.testing.store_conformance import StoreConformance
from tests.conftest import ASYNC_STORE_PARAMS


class TestNativeAsyncStores(AsyncStoreConformance):
    """The suite on each native async store of tests/fixtures/ (``ASYNC_STORE_PARAMS``:
    AsyncSQLStore on SQLite and PostgreSQL, AsyncRedisStore on redis-server and the cluster)."""

    @pytest.fixture(params=ASYNC_STORE_PARAMS)
    def async_store(self, request: pytest.FixtureRequest) -> AsyncStore:
        store: AsyncStore = request.getfixturevalue(request.param)
        assert store.native, store
        return store


class TestThreadedStore(AsyncStoreConformance):
    """The suite on ThreadedStore over the in-memory store and SQLite. Threading is
    store-independent (each call is forwarded unchanged to the sync store in a worker, whose
    own behaviour tests/stores/test_conformance.py checks on every backend), so one store
    without I/O and one with cover what ThreadedStore itself can get wrong."""

    @pytest.fixture(params=["memory_store", "sqlite_store"])
    def async_store(self, request: pytest.FixtureRequest) -> AsyncStore:
        return ThreadedStore(request.getfixturevalue(request.param), max_workers=4)


# -- async stores that break the protocol, one rule each ----------------------------------------


class StaleVersionOnAppend(ThreadedStore):
    """Appends without bumping the version, so a stale compaction could be applied."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore(), max_workers=2)

    async def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        await super().append(conversation_id, events)
        assert isinstance(self.store, InMemoryStore)
        self.store._conversations[conversation_id].version -= 1
        return await self.load(conversation_id)


class ReturnsTheSnapshotBefore(ThreadedStore):
    """Returns the snapshot from before the append (a read that raced its own write)."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore(), max_workers=2)

    async def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        before = await self.load(conversation_id)
        await super().append(conversation_id, events)
        return before


BROKEN = [
    (StaleVersionOnAppend, "test_append_assigns_gap_free_seq_and_bumps_the_version"),
    (StaleVersionOnAppend, "test_apply_with_a_stale_version_changes_nothing"),
    (ReturnsTheSnapshotBefore, "test_append_returns_the_snapshot_right_after_it"),
]


@pytest.mark.parametrize(
    ("broken", "test_name"), BROKEN, ids=[f"{b.__name__}-{t}" for b, t in BROKEN]
)
def test_the_suite_catches_a_broken_async_store(broken: type[AsyncStore], test_name: str) -> None:
    suite = AsyncStoreConformance()
    sound: Store = blocking_store(ThreadedStore(InMemoryStore(), max_workers=2))
    getattr(suite, test_name)(sound)  # passes on the reference store
    with pytest.raises(AssertionError):
        getattr(suite, test_name)(blocking_store(broken()))


# -- what a third-party author runs: one import, their own async store, plain pytest ------------

THIRD_PARTY = '''
import pytest
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.testing.async_store_conformance import AsyncStoreConformance


class DictAsyncStore(AsyncStore):
    """A native async store of someone else's (a dict: nothing to await but itself)."""

    def __init__(self, lose_events=False):
        self.inner, self.lose_events = InMemoryStore(), lose_events
        self.closed = 0

    async def load(self, cid):
        return self.inner.load(cid)

    async def append(self, cid, events):
        return self.inner.append(cid, events[:1] if self.lose_events else events)

    async def apply(self, cid, plan):
        return self.inner.apply(cid, plan)

    async def history(self, cid):
        return self.inner.history(cid)

    async def find_tool_events(self, cid, tool_call_ids):
        return self.inner.find_tool_events(cid, tool_call_ids)

    async def search(self, cid, query):
        return self.inner.search(cid, query)

    async def record_compaction_error(self, cid, message):
        self.inner.record_compaction_error(cid, message)

    async def compactions(self, cid):
        return self.inner.compactions(cid)

    async def clear(self, cid):
        self.inner.clear(cid)

    async def conversations(self):
        return self.inner.conversations()

    async def aclose(self):
        self.closed += 1


class TestSound(AsyncStoreConformance):
    @pytest.fixture
    def async_store(self):
        store = DictAsyncStore()
        yield store
        assert store.closed >= 1, "the suite closes the store"


class TestLosesEvents(AsyncStoreConformance):
    @pytest.fixture
    def async_store(self):
        return DictAsyncStore(lose_events=True)
'''


class Outcomes:
    """A pytest plugin that records each test's outcome by class and test name."""

    def __init__(self) -> None:
        self.by_test: dict[tuple[str, str], str] = {}
        self.skip_reasons: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            cls, name = report.nodeid.split("::")[-2:]
            key = (cls, name.split("[")[0])
            self.by_test[key] = "failed" if report.failed else report.outcome
            if report.skipped:
                self.skip_reasons.append(str(report.longrepr))

    def of(self, cls: str, outcome: str) -> set[str]:
        return {name for (c, name), seen in self.by_test.items() if c == cls and seen == outcome}


def test_a_third_party_async_store_runs_the_suite_with_one_import(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_their_async_store.py").write_text(textwrap.dedent(THIRD_PARTY))
    outcomes = Outcomes()
    pytest.main(
        [
            str(tmp_path),
            f"--rootdir={tmp_path}",
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
        ],
        plugins=[outcomes],
    )
    cases = {name for name in dir(StoreConformance) if name.startswith("test_")}
    optional = {
        "test_compacts_while_appending",
        "test_appends_without_window_and_finds_events_by_index",
        *(name for name in dir(RetractionConformance) if name.startswith("test_")),
    }
    ran = {name for (cls, name) in outcomes.by_test if cls == "TestSound"}
    assert ran == cases
    assert outcomes.of("TestSound", "skipped") == optional
    assert outcomes.of("TestSound", "failed") == set()
    assert "does not declare CompactsWhileAppending" in " ".join(outcomes.skip_reasons)
    assert {
        "test_append_assigns_gap_free_seq_and_bumps_the_version",
        "test_appended_events_keep_their_fields",
    } <= outcomes.of("TestLosesEvents", "failed")
