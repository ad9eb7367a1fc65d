"""The store conformance suite (chat_memory.testing.store_conformance) on every backend, and
proof that it fails for stores that break the protocol."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from chat_memory.backends.base import CompactionPlan, Snapshot
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import Event
from chat_memory.testing.retraction_conformance import RetractionConformance
from chat_memory.testing.store_conformance import StoreConformance
from tests.conftest import STORE_PARAMS


class TestEveryBackend(StoreConformance):
    """The suite on each store of tests/fixtures/, as a third party would run it on theirs."""

    @pytest.fixture(params=STORE_PARAMS)
    def store(self, request):
        return request.getfixturevalue(request.param)


# -- stores that break the protocol, one rule each ---------------------------------------------


class NoVersionBump(InMemoryStore):
    """Appends without bumping the version, so a stale compaction could be applied."""

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        super().append(conversation_id, events)
        self._conversations[conversation_id].version -= 1
        return self.load(conversation_id)


class LosesTheLastEvent(InMemoryStore):
    """Drops the last event of every batch of two or more."""

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        return super().append(conversation_id, list(events)[:-1] if len(events) > 1 else events)


class IgnoresExpectedVersion(InMemoryStore):
    """Applies every plan, however stale."""

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return False
        return super().apply(
            conversation_id, dataclasses.replace(plan, expected_version=conversation.version)
        )


class KeepsTheOldSummary(InMemoryStore):
    """Replaces the summary without archiving the previous one."""

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        conversation = self._conversations.get(conversation_id)
        if conversation is not None and plan.summary is not None:
            conversation.summary = None
        return super().apply(conversation_id, plan)


class SearchesBeforeFiltering(InMemoryStore):
    """Pages the events first and filters the page (so pages come back short)."""

    def search(self, conversation_id, query):
        from chat_memory.search import SearchResult, search_events

        page = self.history(conversation_id)[query.offset : query.offset + query.limit]
        found = search_events(page, dataclasses.replace(query, offset=0))
        return SearchResult(
            events=found.events, total=search_events(self.history(conversation_id), query).total
        )


class ForgetsToClearTheError(InMemoryStore):
    """A successful compaction leaves the recorded compaction error in place."""

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        conversation = self._conversations.get(conversation_id)
        error = conversation.compaction_error if conversation else None
        applied = super().apply(conversation_id, plan)
        if conversation is not None:
            conversation.compaction_error = error
        return applied


class CountsFailuresInTheProcess(InMemoryStore):
    """Records the error but counts failures nowhere (as the engine once did, per process)."""

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        super().record_compaction_error(conversation_id, message)
        conversation = self._conversations.get(conversation_id)
        if conversation is not None:
            conversation.compaction_failures = 0


class KeepsTheFailureCount(InMemoryStore):
    """A successful compaction clears the error but leaves the failure count."""

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        conversation = self._conversations.get(conversation_id)
        count = conversation.compaction_failures if conversation else 0
        applied = super().apply(conversation_id, plan)
        if conversation is not None:
            conversation.compaction_failures = count
        return applied


BROKEN = [
    (NoVersionBump, "test_append_assigns_gap_free_seq_and_bumps_the_version"),
    (NoVersionBump, "test_apply_with_a_stale_version_changes_nothing"),
    (LosesTheLastEvent, "test_append_assigns_gap_free_seq_and_bumps_the_version"),
    (LosesTheLastEvent, "test_system_events_are_pinned"),
    (IgnoresExpectedVersion, "test_apply_with_a_stale_version_changes_nothing"),
    (KeepsTheOldSummary, "test_a_new_summary_replaces_the_old_one_which_is_archived"),
    (SearchesBeforeFiltering, "test_search_filters_before_paging"),
    (ForgetsToClearTheError, "test_apply_clears_the_compaction_error"),
    (CountsFailuresInTheProcess, "test_compaction_failures_are_counted_beside_the_error"),
    (CountsFailuresInTheProcess, "test_concurrent_compaction_failures_all_count"),
    (KeepsTheFailureCount, "test_apply_resets_the_compaction_failures"),
]


@pytest.mark.parametrize(
    ("broken", "test_name"), BROKEN, ids=[f"{b.__name__}-{t}" for b, t in BROKEN]
)
def test_the_suite_catches_a_broken_store(broken, test_name):
    suite = StoreConformance()
    getattr(suite, test_name)(InMemoryStore())  # passes on the reference store
    with pytest.raises(AssertionError):
        getattr(suite, test_name)(broken())


# -- what a third-party author runs: one import, their own store, plain pytest ----------------

THIRD_PARTY = '''
import pytest
from chat_memory.backends.base import Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.testing.store_conformance import StoreConformance


class DelegatingStore(Store):
    """A store of someone else's: everything but the optional abilities."""

    def __init__(self, lose_events=False):
        self.inner, self.lose_events = InMemoryStore(), lose_events

    @classmethod
    def from_url(cls, url, **options):
        return cls()

    def load(self, cid):
        return self.inner.load(cid)

    def append(self, cid, events):
        return self.inner.append(cid, events[:1] if self.lose_events else events)

    def apply(self, cid, plan):
        return self.inner.apply(cid, plan)

    def history(self, cid):
        return self.inner.history(cid)

    def search(self, cid, query):
        return self.inner.search(cid, query)

    def record_compaction_error(self, cid, message):
        self.inner.record_compaction_error(cid, message)

    def compactions(self, cid):
        return self.inner.compactions(cid)

    def clear(self, cid):
        self.inner.clear(cid)

    def conversations(self):
        return self.inner.conversations()


class TestTheirStore(StoreConformance):
    @pytest.fixture
    def store(self):
        return DelegatingStore(lose_events=LOSE_EVENTS)
'''


class Outcomes:
    """A pytest plugin that records each test's outcome by test name."""

    def __init__(self) -> None:
        self.by_test: dict[str, str] = {}
        self.skip_reasons: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            name = report.nodeid.split("::")[-1].split("[")[0]
            self.by_test[name] = "failed" if report.failed else report.outcome
            if report.skipped:
                self.skip_reasons.append(str(report.longrepr))


def run_third_party(tmp_path: Path, *, lose_events: bool) -> Outcomes:
    module = f"test_their_store_{'broken' if lose_events else 'sound'}"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(THIRD_PARTY).replace("LOSE_EVENTS", str(lose_events))
    )
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
    return outcomes


def test_a_third_party_store_runs_the_suite_with_one_import(tmp_path):
    outcomes = run_third_party(tmp_path, lose_events=False)
    tests = {name for name in dir(StoreConformance) if name.startswith("test_")}
    assert set(outcomes.by_test) == tests
    skipped = {name for name, outcome in outcomes.by_test.items() if outcome == "skipped"}
    retraction = {name for name in dir(RetractionConformance) if name.startswith("test_")}
    assert skipped == {
        "test_compacts_while_appending",
        "test_appends_without_window_and_finds_events_by_index",
        *retraction,
    }
    assert "does not declare CompactsWhileAppending" in " ".join(outcomes.skip_reasons)
    assert "does not declare Retracts" in " ".join(outcomes.skip_reasons)
    assert "does not declare AppendsWithoutWindow" in " ".join(outcomes.skip_reasons)
    assert {name for name, outcome in outcomes.by_test.items() if outcome == "failed"} == set()


def test_a_third_party_store_that_loses_events_fails_the_suite(tmp_path):
    outcomes = run_third_party(tmp_path, lose_events=True)
    failed = {name for name, outcome in outcomes.by_test.items() if outcome == "failed"}
    assert {
        "test_append_assigns_gap_free_seq_and_bumps_the_version",
        "test_appended_events_keep_their_fields",
    } <= failed
