"""The store conformance suite: the :class:`~chat_memory.backends.base.Store` protocol,
tested directly (not through ``ChatMemory``), for chat-memory's own stores and yours.

Subclass :class:`StoreConformance` in a test module and give it a ``store`` fixture that
returns an empty store (a fresh one for every test)::

    # tests/test_my_store.py
    import pytest
    from chat_memory.testing.store_conformance import StoreConformance

    from my_package import MyStore


    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self):
            store = MyStore(...)        # empty: a fresh database, prefix or bucket
            yield store
            store.close()

Then ``pytest tests/test_my_store.py``. Tests of an optional ability (such as
:class:`~chat_memory.backends.base.CompactsWhileAppending`) are skipped, with the reason,
for a store that does not declare it. Every test is a plain method taking ``store``, so a
single one can also be called directly: ``StoreConformance().test_clear_restarts_seq(store)``.

This module imports pytest; only test code imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ..backends.base import (
    AppendsWithoutWindow,
    CompactionPlan,
    CompactsWhileAppending,
    Snapshot,
    Store,
)
from ..errors import InvalidInputError
from ..events import Event, EventType
from ..search import SearchQuery
from .retraction_conformance import RetractionConformance

#: Conversation ids that are data, never paths, patterns, hash tags or SQL wildcards.
HOSTILE_IDS = (
    "../etc/passwd",
    "*",
    "%",
    "_",
    "?",
    "[a]",
    "{tag}",
    "a}b{c",
    "quote'\"",
    "back\\slash",
    "ключ-🗝",
    "a:b:c",
    "a/b",
    " ",
    "x" * 300,
)


def words(text: str) -> int:
    """The token count the suite gives its events (stores receive events already counted)."""
    return max(1, len(text.split()))


def user(text: str) -> Event:
    return Event.user(text, tokens=words(text))


def assistant(text: str) -> Event:
    return Event.assistant(text, tokens=words(text))


def system(text: str, key: str | None = None) -> Event:
    return Event.system(text, tokens=words(text), metadata={"key": key} if key else {})


def summary(text: str) -> Event:
    return Event.summary(text, tokens=words(text))


def turn(i: int) -> list[Event]:
    return [user(f"question {i}"), assistant(f"answer {i}")]


def query(keyword: str, mode: str = "phrase", offset: int = 0, limit: int = 10) -> SearchQuery:
    return replace(SearchQuery.build(keyword, match_mode=mode), offset=offset, limit=limit)


def seqs(events: Sequence[Event]) -> list[int]:
    return [e.seq or 0 for e in events]


@dataclass(frozen=True)
class _Seen:
    """What a reader can observe of a conversation, for before/after comparisons."""

    version: int
    last_seq: int
    archived_count: int
    window: tuple[tuple[str, int | None, bool], ...]
    history: tuple[tuple[str, int | None, bool], ...]

    @classmethod
    def of(cls, store: Store, cid: str) -> _Seen:
        snapshot = store.load(cid)
        return cls(
            snapshot.version,
            snapshot.last_seq,
            snapshot.archived_count,
            tuple((e.id, e.seq, e.archived) for e in snapshot.window.events()),
            tuple((e.id, e.seq, e.archived) for e in store.history(cid)),
        )


def _archive_through(store: Store, cid: str, seq: int, **plan: Any) -> bool:
    return store.apply(
        cid, CompactionPlan(store.load(cid).version, archive_through_seq=seq, **plan)
    )


class StoreConformance(RetractionConformance):
    """The behaviour every store shares (the optional abilities' cases included, such as
    :class:`~chat_memory.testing.retraction_conformance.RetractionConformance`'s). Subclass it
    and provide a ``store`` fixture."""

    @pytest.fixture
    def store(self) -> Store:
        pytest.fail(
            f"{type(self).__name__} must define a `store` fixture that returns an empty store"
        )

    # -- load and append -------------------------------------------------------------------

    def test_unknown_conversation_is_empty(self, store: Store) -> None:
        snapshot = store.load("never-written")
        assert snapshot == Snapshot.empty("never-written")
        assert store.history("never-written") == []
        assert store.search("never-written", query("anything")).total == 0
        assert store.conversations() == []

    def test_append_assigns_gap_free_seq_and_bumps_the_version(self, store: Store) -> None:
        first = store.append("c", [user("one"), assistant("two")])
        assert first.last_seq == 2 and first.version > 0
        assert seqs(first.appended(2)) == [1, 2]
        second = store.append("c", [user("three")])
        assert second.last_seq == 3 and second.version > first.version
        assert [(e.seq, e.content) for e in second.appended(1)] == [(3, "three")]
        assert seqs(store.history("c")) == [1, 2, 3]

    def test_append_returns_the_snapshot_right_after_it(self, store: Store) -> None:
        store.append("c", turn(1))
        returned = store.append("c", [system("be brief"), *turn(2)])
        assert returned == store.load("c")
        assert [e.content for e in returned.appended(3)] == ["be brief", "question 2", "answer 2"]

    def test_appended_events_keep_their_fields(self, store: Store) -> None:
        call = Event.tool_call(
            "get_order",
            {"id": 4512, "nested": {"a": [1, "ü"]}},
            call_id="c1",
            metadata={"k": "v"},
            tokens=7,
        )
        result = Event.tool_result(
            "c1", '{"status": "shipped"}', name="get_order", is_error=True, tokens=3
        )
        sent = [user("where is my order?"), call, result]
        store.append("c", sent)
        stored = store.history("c")
        assert [e.id for e in stored] == [e.id for e in sent]
        for original, kept in zip(sent, stored):
            assert kept.model_dump(exclude={"seq", "archived"}) == original.model_dump(
                exclude={"seq", "archived"}
            )
            assert kept.archived is False
        assert stored[1].created_at.tzinfo is not None

    def test_system_events_are_pinned(self, store: Store) -> None:
        snapshot = store.append(
            "c",
            [system("rule one", "one"), user("hi"), system("rule two", "two"), assistant("hello")],
        )
        window = snapshot.window
        assert [(e.seq, e.content) for e in window.pinned] == [(1, "rule one"), (3, "rule two")]
        assert [(e.seq, e.content) for e in window.active] == [(2, "hi"), (4, "hello")]
        assert window.summary is None
        assert all(e.type is EventType.SYSTEM for e in window.pinned)

    def test_a_newer_pin_with_the_same_key_supersedes_the_older(self, store: Store) -> None:
        """A pinned event's key is ``metadata["key"]``, or ``"system"``: a newer one of the
        same key archives the older (kept in history, out of the window)."""
        store.append("c", [system("be brief"), system("speak French", "language"), *turn(1)])
        snapshot = store.append("c", [system("be thorough"), user("next")])
        assert [e.content for e in snapshot.window.pinned] == ["speak French", "be thorough"]
        assert [e.content for e in store.load("c").window.pinned] == ["speak French", "be thorough"]
        history = {e.content: e.archived for e in store.history("c") if e.type is EventType.SYSTEM}
        assert history == {"be brief": True, "speak French": False, "be thorough": False}
        assert store.load("c").archived_count == 1

    def test_empty_append_changes_no_event(self, store: Store) -> None:
        store.append("c", turn(1))
        snapshot = store.append("c", [])
        assert snapshot.last_seq == 2 and seqs(store.history("c")) == [1, 2]

    def test_a_large_append_is_whole_and_a_retry_stores_nothing_twice(self, store: Store) -> None:
        # 5,000 events: past the size (about 4,000) where passing every value of a batch to
        # one command breaks a Lua script (unpack) after its first writes
        batch = [user(f"big q{i}") if i % 2 == 0 else assistant(f"big a{i}") for i in range(5_000)]
        snapshot = store.append("c", batch)
        assert snapshot.last_seq == 5_000 and seqs(snapshot.window.active) == list(range(1, 5_001))
        assert [e.id for e in snapshot.window.active] == [e.id for e in batch]
        assert [e.seq for e in store.search("c", query("big a4999")).events] == [5_000]
        again = store.append("c", batch)
        assert (again.version, again.last_seq) == (snapshot.version, 5_000)
        assert store.append("c", [user("next")]).last_seq == 5_001

    def test_concurrent_appends_lose_and_duplicate_nothing(self, store: Store) -> None:
        errors: list[BaseException] = []

        def write(worker: int) -> None:
            try:
                for i in range(5):
                    store.append("c", [user(f"w{worker} q{i}"), assistant(f"w{worker} a{i}")])
            except BaseException as exc:  # reported below, in the test's own thread
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        history = store.history("c")
        assert seqs(history) == list(range(1, 41))
        for w in range(4):  # each writer's events stay in order and adjacent in pairs
            mine = [e.content for e in history if e.content.startswith(f"w{w} ")]
            assert mine == [text for i in range(5) for text in (f"w{w} q{i}", f"w{w} a{i}")]

    # -- apply -----------------------------------------------------------------------------

    def test_apply_archives_through_seq_and_bumps_the_version(self, store: Store) -> None:
        store.append("c", [system("pinned")])
        for i in range(3):
            store.append("c", turn(i))
        before = store.load("c")
        assert store.apply("c", CompactionPlan(before.version, archive_through_seq=5))
        after = store.load("c")
        assert after.version > before.version and after.last_seq == before.last_seq == 7
        assert [e.content for e in after.window.pinned] == ["pinned"]
        assert seqs(after.window.active) == [6, 7] and after.archived_count == 4
        history = store.history("c")
        assert seqs(history) == list(range(1, 8))
        assert [e.seq for e in history if e.archived] == [2, 3, 4, 5]
        assert all(not e.archived for e in history if e.type is EventType.SYSTEM)

    def test_apply_with_a_stale_version_changes_nothing(self, store: Store) -> None:
        store.append("c", turn(1))
        stale = store.load("c").version
        store.append("c", turn(2))
        before = _Seen.of(store, "c")
        assert store.apply("c", CompactionPlan(stale, archive_through_seq=2)) is False
        assert (
            store.apply(
                "c", CompactionPlan(before.version + 1, archive_through_seq=2, summary=summary("s"))
            )
            is False
        )
        assert _Seen.of(store, "c") == before

    def test_apply_to_an_unknown_conversation_is_refused(self, store: Store) -> None:
        assert (
            store.apply("nobody", CompactionPlan(0, archive_through_seq=5, summary=summary("s")))
            is False
        )
        assert store.load("nobody") == Snapshot.empty("nobody") and store.conversations() == []

    def test_a_new_summary_replaces_the_old_one_which_is_archived(self, store: Store) -> None:
        for i in range(3):
            store.append("c", turn(i))
        assert _archive_through(store, "c", 2, summary=summary("first summary"))
        snapshot = store.load("c")
        first = snapshot.window.summary
        assert (
            first is not None
            and first.content == "first summary"
            and first.type is EventType.SUMMARY
        )
        assert first.seq == 7 and snapshot.last_seq == 7 and not first.archived
        assert seqs(store.append("c", turn(3)).appended(2)) == [
            8,
            9,
        ]  # seq continues after the summary
        assert _archive_through(store, "c", 4, summary=summary("second summary"))
        snapshot = store.load("c")
        assert (
            snapshot.window.summary is not None
            and snapshot.window.summary.content == "second summary"
        )
        assert snapshot.window.summary.seq == 10
        assert seqs(snapshot.window.active) == [5, 6, 8, 9]
        history = store.history("c")
        assert seqs(history) == list(range(1, 11))
        old = [e for e in history if e.type is EventType.SUMMARY and e.archived]
        assert [(e.seq, e.content) for e in old] == [(7, "first summary")]
        assert snapshot.archived_count == 5  # four real events and the first summary

    def test_apply_clears_the_compaction_error(self, store: Store) -> None:
        store.append("c", turn(1))
        store.record_compaction_error("c", "summarizer down")
        assert _archive_through(store, "c", 0)
        assert store.load("c").compaction_error is None

    def test_compaction_records_are_kept_with_the_apply_newest_last(self, store: Store) -> None:
        store.append("c", [*turn(1), *turn(2)])
        stale = CompactionPlan(expected_version=0, archive_through_seq=2, record={"n": 0})
        assert store.apply("c", stale) is False
        assert store.compactions("c") == []  # a plan that lost its race leaves no record
        kept_count = store.compaction_records_kept
        for n in range(1, kept_count + 3):
            store.append("c", turn(n + 2))
            version = store.load("c").version
            assert store.apply(
                "c",
                CompactionPlan(version, archive_through_seq=2 * n, record={"n": n, "why": "ß ✓"}),
            )
        kept = store.compactions("c")
        assert [r["n"] for r in kept] == list(range(3, kept_count + 3))
        assert kept[-1]["why"] == "ß ✓"
        assert store.apply(
            "c", CompactionPlan(store.load("c").version, archive_through_seq=0)
        )  # no record given
        assert len(store.compactions("c")) == kept_count
        assert store.compactions("other") == []
        store.clear("c")
        assert store.compactions("c") == []

    def test_archive_cap_drops_the_oldest_archived_events(self, store: Store) -> None:
        for i in range(5):
            store.append("c", turn(i))
        assert _archive_through(store, "c", 6, max_archived_events=4)
        snapshot = store.load("c")
        assert snapshot.archived_count == 4
        history = store.history("c")
        assert [e.seq for e in history if e.archived] == [3, 4, 5, 6]
        assert seqs(history) == [3, 4, 5, 6, 7, 8, 9, 10]
        assert (
            store.search("c", query("question 0")).total == 0
        )  # dropped events are not found either
        assert _archive_through(store, "c", 8, max_archived_events=0)
        assert store.load("c").archived_count == 0
        assert seqs(store.history("c")) == [9, 10]

    # -- history and search ----------------------------------------------------------------

    def test_history_is_in_seq_order_with_archived_flags(self, store: Store) -> None:
        store.append("c", [system("sys"), *turn(0)])
        store.append("c", turn(1))
        assert _archive_through(store, "c", 3, summary=summary("so far"))
        store.append("c", turn(2))
        history = store.history("c")
        assert seqs(history) == list(range(1, 9))
        assert [(e.type.value, e.archived) for e in history] == [
            ("system", False),
            ("user", True),
            ("assistant", True),
            ("user", False),
            ("assistant", False),
            ("summary", False),
            ("user", False),
            ("assistant", False),
        ]

    def test_search_is_literal_and_case_insensitive(self, store: Store) -> None:
        store.append(
            "c",
            [user("Our service is code-named BLUEFIN."), assistant("Noted: Straße 50% off, a_b.")],
        )
        assert seqs(store.search("c", query("bluefin")).events) == [1]
        assert seqs(store.search("c", query("STRASSE")).events) == [2]  # case folding, not lower()
        assert store.search("c", query("50%")).total == 1
        for pattern in ("%", "_b", "a.c", "code.named", ".*", "[a-z]"):
            found = store.search("c", query(pattern)).events
            assert all(pattern.casefold() in e.text().casefold() for e in found), pattern
        assert store.search("c", query("code%named")).total == 0
        assert store.search("c", query("a_b")).total == 1

    def test_search_match_modes(self, store: Store) -> None:
        store.append("c", [user("red apple"), assistant("green apple"), user("red pepper")])
        assert seqs(store.search("c", query("red apple")).events) == [1]
        assert seqs(store.search("c", query("apple red", "all")).events) == [1]
        assert seqs(store.search("c", query("apple red", "any")).events) == [1, 2, 3]
        assert store.search("c", query("apple red", "phrase")).total == 0

    def test_search_covers_tool_calls_results_and_the_archive(self, store: Store) -> None:
        store.append(
            "c",
            [
                user("order?"),
                Event.tool_call("get_order", {"id": 4512}, call_id="c1", tokens=3),
                Event.tool_result("c1", "status SHIPPED", name="get_order", tokens=2),
            ],
        )
        assert _archive_through(store, "c", 3)
        store.append("c", [user("shipped already?")])
        assert seqs(store.search("c", query("4512")).events) == [2]
        assert seqs(store.search("c", query("get_order")).events) == [2]
        result = store.search("c", query("shipped"))
        assert seqs(result.events) == [3, 4] and [e.archived for e in result.events] == [
            True,
            False,
        ]

    def test_search_never_returns_system_events_or_summaries(self, store: Store) -> None:
        store.append("c", [system("secret rule"), user("a secret question"), assistant("ok")])
        assert _archive_through(store, "c", 3, summary=summary("secret summary one"))
        assert _archive_through(
            store, "c", 3, summary=summary("secret summary two")
        )  # one archived summary
        result = store.search("c", query("secret"))
        assert result.total == 1 and [e.content for e in result.events] == ["a secret question"]

    def test_search_filters_before_paging(self, store: Store) -> None:
        texts = [f"needle {i}" if i % 3 == 0 else f"hay {i}" for i in range(20)]
        store.append("c", [user(t) for t in texts[:10]])
        assert _archive_through(store, "c", 8)
        store.append("c", [user(t) for t in texts[10:]])
        matching = [i + 1 for i, t in enumerate(texts) if t.startswith("needle")]
        pages = [store.search("c", query("NEEDLE", offset=o, limit=3)) for o in (0, 3, 6)]
        assert [p.total for p in pages] == [len(matching)] * 3
        assert [seqs(p.events) for p in pages] == [matching[0:3], matching[3:6], matching[6:9]]
        assert store.search("c", query("needle", offset=100, limit=3)).events == []

    def test_search_sees_one_conversation_only(self, store: Store) -> None:
        store.append("a", [user("shared word alpha")])
        store.append("b", [user("shared word beta")])
        assert [e.content for e in store.search("a", query("shared")).events] == [
            "shared word alpha"
        ]
        assert store.search("nobody", query("shared")).total == 0

    # -- bookkeeping -----------------------------------------------------------------------

    def test_compaction_error_is_recorded_and_forgotten(self, store: Store) -> None:
        store.append("c", turn(1))
        store.record_compaction_error("c", "summarizer down: 529 overloaded")
        assert store.load("c").compaction_error == "summarizer down: 529 overloaded"
        assert store.append("c", turn(2)).compaction_error == "summarizer down: 529 overloaded"
        store.record_compaction_error("c", None)
        assert store.load("c").compaction_error is None

    def test_compaction_failures_are_counted_beside_the_error(self, store: Store) -> None:
        store.record_compaction_error("nobody", "summarizer down")  # not stored: no write
        assert store.load("nobody") == Snapshot.empty("nobody")
        store.append("c", turn(1))
        assert store.load("c").compaction_failures == 0
        store.record_compaction_error("c", "summarizer down")
        store.record_compaction_error("c", "summarizer down")  # the same error counts again
        assert store.load("c").compaction_failures == 2
        appended = store.append("c", turn(2))  # an append keeps both
        assert (appended.compaction_error, appended.compaction_failures) == ("summarizer down", 2)
        store.record_compaction_error("c", None)
        forgotten = store.load("c")
        assert (forgotten.compaction_error, forgotten.compaction_failures) == (None, 0)

    def test_apply_resets_the_compaction_failures(self, store: Store) -> None:
        store.append("c", turn(1))
        store.record_compaction_error("c", "summarizer down")
        store.record_compaction_error("c", "summarizer down")
        stale = CompactionPlan(expected_version=0, archive_through_seq=2)
        assert store.apply("c", stale) is False
        assert store.load("c").compaction_failures == 2  # a lost race resets nothing
        assert _archive_through(store, "c", 0)
        assert store.load("c").compaction_failures == 0
        store.record_compaction_error("c", "summarizer down again")
        assert store.load("c").compaction_failures == 1

    def test_concurrent_compaction_failures_all_count(self, store: Store) -> None:
        """Several workers failing at once: each failure counts (an atomic increment)."""
        store.append("c", turn(1))
        errors: list[BaseException] = []

        def fail(worker: int) -> None:
            try:
                for i in range(3):
                    store.record_compaction_error("c", f"worker {worker}: failure {i}")
            except BaseException as exc:  # reported below, in the test's own thread
                errors.append(exc)

        threads = [threading.Thread(target=fail, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.load("c").compaction_failures == 12

    def test_clear_restarts_seq(self, store: Store) -> None:
        store.append("c", [system("sys"), *turn(1)])
        assert _archive_through(store, "c", 2, summary=summary("s"))
        store.append("other", turn(9))
        store.clear("c")
        assert store.load("c") == Snapshot.empty("c")
        assert store.history("c") == [] and store.search("c", query("question")).total == 0
        assert store.conversations() == ["other"]
        assert seqs(store.append("c", turn(2)).appended(2)) == [1, 2]
        assert [e.content for e in store.history("c")] == ["question 2", "answer 2"]
        assert seqs(store.history("other")) == [1, 2]
        store.clear("never-written")  # a no-op, not an error

    def test_conversations_are_sorted(self, store: Store) -> None:
        for cid in ("b", "a", "c", "a"):
            store.append(cid, [user(cid)])
        assert store.conversations() == ["a", "b", "c"]

    def test_hostile_conversation_ids_are_data(self, store: Store) -> None:
        for i, cid in enumerate(HOSTILE_IDS):
            store.append(cid, [user(f"message {i} of its own")])
        for i, cid in enumerate(HOSTILE_IDS):
            assert [(e.seq, e.content) for e in store.history(cid)] == [
                (1, f"message {i} of its own")
            ], cid
            assert store.search(cid, query("of its own")).total == 1, cid
        assert store.conversations() == sorted(HOSTILE_IDS)
        store.clear("*")
        assert store.conversations() == sorted(set(HOSTILE_IDS) - {"*"})
        assert store.load("%").last_seq == 1

    @pytest.mark.parametrize("bad", ["", None, 42, "nul\x00inside"])
    def test_unusable_conversation_ids_are_refused(self, store: Store, bad: Any) -> None:
        with pytest.raises(InvalidInputError):
            store.append(bad, [user("hi")])
        with pytest.raises(InvalidInputError):
            store.load(bad)
        assert store.conversations() == []

    def test_close_can_be_called_twice(self, store: Store) -> None:
        store.append("c", turn(1))
        store.close()
        store.close()

    # -- optional abilities ----------------------------------------------------------------

    def test_compacts_while_appending(self, store: Store) -> None:
        if not isinstance(store, CompactsWhileAppending):
            pytest.skip(f"{type(store).__name__} does not declare CompactsWhileAppending")
        store.append("c", turn(1))
        seen: list[Snapshot] = []

        def no_plan(snapshot: Snapshot) -> CompactionPlan | None:
            seen.append(snapshot)
            return None

        snapshot, applied = store.append_compacting("c", turn(2), no_plan)
        assert (
            not applied
            and seen == [snapshot]
            and snapshot.last_seq == 4
            and snapshot == store.load("c")
        )

        def archive_all_but_newest(snapshot: Snapshot) -> CompactionPlan:
            return CompactionPlan(
                snapshot.version, archive_through_seq=snapshot.last_seq - 2, summary=summary("s")
            )

        snapshot, applied = store.append_compacting("c", turn(3), archive_all_but_newest)
        assert (
            applied
            and snapshot.last_seq == 6
            and seqs(snapshot.window.active) == [1, 2, 3, 4, 5, 6]
        )
        after = store.load("c")
        assert after.version > snapshot.version and after.archived_count == 4
        assert seqs(after.window.active) == [5, 6] and after.window.summary is not None
        assert after.window.summary.seq == 7

    def test_appends_without_window_and_finds_events_by_index(self, store: Store) -> None:
        if not isinstance(store, AppendsWithoutWindow):
            pytest.skip(f"{type(store).__name__} does not declare AppendsWithoutWindow")
        pin, (question, answer) = system("rules"), turn(1)
        assert seqs(store.append_without_window("c", [pin, question, answer])) == [1, 2, 3]
        call = Event.tool_call("get", {"id": 1}, call_id="k1", tokens=1)
        stored = store.append_without_window("c", [answer, call])  # one retried event, one new
        assert seqs(stored) == [3, 4] and stored[0].content == "answer 1" and not stored[0].archived
        assert store.append_without_window("c", [call])[0].seq == 4  # stored once
        assert (store.load("c").version, store.load("c").last_seq) == (2, 4)
        result = Event.tool_result("k1", "done", tokens=1)
        store.append(
            "c", [result, user("later"), Event.tool_call("get", {}, call_id="k2", tokens=1)]
        )
        assert _archive_through(store, "c", 5)
        found = store.find_events("c", [pin.id, question.id, "no such id"], ["k1", "k2", "k3"])
        # archived events are found by call id (marked), never by id; the pin is in the window
        assert [(e.seq, e.archived) for e in found] == [
            (1, False),
            (4, True),
            (5, True),
            (7, False),
        ]
        assert [e.id for e in found[1:3]] == [call.id, result.id] and found[2].content == "done"
        assert [e.seq for e in store.find_tool_events("c", ["k1"])] == [4, 5]
        assert _archive_through(store, "c", 6, max_archived_events=2)  # drops seqs 2-4
        assert [e.seq for e in store.find_events("c", [], ["k1"])] == [5]
        assert store.find_events("unknown", [pin.id], ["k1"]) == []


__all__ = ["HOSTILE_IDS", "StoreConformance"]
