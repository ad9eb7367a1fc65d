"""The engine's behaviour on every memory kind: adding, pinned events, windows, each
compaction strategy, summaries and their failures, the archive and its cap, the
compare-and-swap of compaction, bad input and bookkeeping. Each test takes ``memory``
(tests/conftest.py: ChatMemory on every store, AsyncChatMemory over ThreadedStore and over
each native async store, see tests/fixtures/memory_kinds.py), calls it for a memory with the
suite's defaults, and reaches the store through ``memory.store``. Search is in
test_search.py, concurrent writers and retried adds in test_concurrency.py."""

from __future__ import annotations

import pytest

from chat_memory import Event, EventType, InvalidEventError, InvalidInputError, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.events import split_turns
from tests.fixtures.memory_kinds import MemoryKit
from tests.support.helpers import fixed_tokens, seqs, turn

HOSTILE_IDS = [
    "../etc/passwd",
    "*",
    "%",
    "_",
    "{tag}",
    "a}b{c",
    "quote'\"",
    "ключ-🗝",
    "a:b:c",
    " ",
    "x" * 300,
]


def test_append_assigns_gap_free_seq_and_keeps_order(memory: MemoryKit) -> None:
    m = memory()
    first = m.add("c", [Event.user("one"), Event.assistant("two")])
    second = m.add("c", Event.user("three"))
    assert seqs(first) == [1, 2] and seqs(second) == [3]
    assert [e.content for e in m.history("c")] == ["one", "two", "three"]
    assert [e.id for e in m.history("c")] == [e.id for e in first + second]


def test_stored_fields_round_trip(memory: MemoryKit) -> None:
    m = memory()
    call = Event.tool_call(
        "get_order", {"id": 4512, "nested": {"a": [1, "ü"]}}, call_id="c1", metadata={"k": "v"}
    )
    result = Event.tool_result("c1", '{"status": "shipped"}', name="get_order", is_error=True)
    m.add("c", [Event.user("where is my order?"), call, result])
    stored = m.history("c")
    assert stored[1].tool_name == "get_order" and stored[1].arguments == {
        "id": 4512,
        "nested": {"a": [1, "ü"]},
    }
    assert stored[1].tool_call_id == "c1" and stored[1].metadata == {"k": "v"}
    assert (
        stored[2].is_error and stored[2].tool_name == "get_order" and stored[2].tool_call_id == "c1"
    )
    assert stored[1].created_at == call.created_at and stored[1].created_at.tzinfo is not None
    assert all(e.tokens and e.tokens > 0 for e in stored)
    assert stored[1].id == call.id


def test_system_events_are_pinned_and_never_archived(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=1)
    m.add("c", Event.system("You are terse."))
    for i in range(4):
        m.add("c", turn(f"q{i}"))
    window = m.window("c")
    assert window[0].type is EventType.SYSTEM and window[0].content == "You are terse."
    assert [e.content for e in window[1:]] == ["q3", "reply to q3"]
    assert m.stats("c").archived_events == 6
    assert not any(e.type is EventType.SYSTEM and e.archived for e in m.history("c"))


def test_window_is_pinned_then_summary_then_active(memory: MemoryKit) -> None:
    m = memory.ChatMemory(
        memory.store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=1,
        ),
        summarizer=lambda previous, events, upcoming: f"{previous or ''}+{len(events)}",
        token_counter=fixed_tokens,
    )
    m.add("c", Event.system("sys"))
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    window = m.window("c")
    assert [e.type for e in window[:2]] == [EventType.SYSTEM, EventType.SUMMARY]
    assert all(e.is_real for e in window[2:])
    # the newest two turns (4 events) fit in max_events (4): the floor of two turns keeps them
    assert window[1].content == "+2"


def test_turn_window_keeps_whole_turns(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=2)
    for i in range(5):
        m.add("c", turn(f"q{i}", tool=True))
    window = m.window("c")
    assert len(split_turns(window)) == 2
    assert window[0].type is EventType.USER and window[0].content == "q3"
    stats = m.stats("c")
    assert (stats.active_events, stats.archived_events, stats.turns) == (8, 12, 2)


def test_sliding_window_moves_cut_forward_to_a_turn_start(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="sliding_window", max_events=5)
    for i in range(3):
        m.add("c", turn(f"q{i}", tool=True))  # 4 events a turn
    window = m.window("c")
    assert len(window) <= 5 and window[0].type is EventType.USER
    assert [e.content for e in window][0] == "q2"


def test_newest_turn_is_never_archived_even_when_over_the_limit(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="sliding_window", max_events=2)
    m.add("c", turn("first"))
    big = [Event.user("big")] + [Event.assistant(f"part {i}") for i in range(6)]
    m.add("c", big)
    assert [e.content for e in m.window("c")] == [e.content for e in big]


def test_token_count_archives_until_the_window_fits(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="token_count", max_tokens=60)
    for i in range(6):
        m.add("c", turn(f"question number {i}"))
    stats = m.stats("c")
    assert stats.window_tokens <= 60
    assert stats.archived_events > 0
    assert m.window("c")[0].type is EventType.USER


def test_recursive_summarization_replaces_the_summary_and_sees_overlap(memory: MemoryKit) -> None:
    calls = []

    def summarize(previous, events, upcoming):
        calls.append((previous, [e.content for e in events], [e.content for e in upcoming]))
        return f"summary {len(calls)}"

    m = memory.ChatMemory(
        memory.store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=6,
            max_events_to_keep=4,
            overlap_size=1,
            compact_to_ratio=1.0,
        ),
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    for i in range(4):
        m.add("c", turn(f"q{i}"))  # 2 events a turn: triggers at 8 events
    assert calls[0] == (None, ["q0", "reply to q0", "q1", "reply to q1"], ["q2"])
    for i in range(4, 6):
        m.add("c", turn(f"q{i}"))
    assert calls[1][0] == "summary 1"
    window = m.window("c")
    summaries = [e for e in window if e.type is EventType.SUMMARY]
    assert [s.content for s in summaries] == ["summary 2"]
    old = [e for e in m.history("c") if e.type is EventType.SUMMARY and e.archived]
    assert [s.content for s in old] == ["summary 1"]
    # summaries are never search hits
    assert m.search("c", "summary").total == 0


def test_summarizer_outage_loses_nothing_and_is_retried(memory: MemoryKit) -> None:
    state = {"down": True}

    def summarize(previous, events, upcoming):
        if state["down"]:
            raise TimeoutError("summarizer timed out")
        return "all good"

    m = memory.ChatMemory(
        memory.store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=0,
        ),
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    for i in range(4):
        m.add("c", turn(f"q{i}"))
    stats = m.stats("c")
    assert stats.archived_events == 0 and stats.active_events == 8
    assert "summarizer timed out" in (stats.last_compaction_error or "")
    state["down"] = False
    m.add("c", turn("q4"))
    stats = m.stats("c")
    # five turns: the newest two (4 events, within max_events) stay, the other six are archived
    assert stats.last_compaction_error is None and (stats.archived_events, stats.active_events) == (
        6,
        4,
    )
    assert [e.content for e in m.history("c") if e.type is EventType.USER] == [
        f"q{i}" for i in range(5)
    ]


def test_empty_summary_is_a_failure_not_a_loss(memory: MemoryKit) -> None:
    m = memory.ChatMemory(
        memory.store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=0,
        ),
        summarizer=lambda p, e, u: "   ",
        token_counter=fixed_tokens,
    )
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    assert m.stats("c").archived_events == 0
    with pytest.raises(Exception, match="no summary"):
        m.compact("c")


def test_compact_reports_what_it_did(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="none")
    for i in range(4):
        m.add("c", turn(f"q{i}"))
    assert not memory().compact("c").compacted
    result = memory(compaction_strategy="turn_window", max_turns=1).compact("c")
    assert result.compacted and result.archived_events == 6 and result.archived_through_seq == 6


def test_archive_cap_drops_the_oldest_archived_events(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=1, max_archived_events=3)
    for i in range(5):
        m.add("c", turn(f"q{i}"))
    history = m.history("c")
    archived = [e for e in history if e.archived]
    assert [e.content for e in archived] == ["reply to q2", "q3", "reply to q3"]
    assert seqs(archived) == [6, 7, 8] and m.stats("c").archived_events == 3
    assert [e.content for e in m.window("c")] == ["q4", "reply to q4"]


def test_compaction_plan_is_compare_and_swap(memory: MemoryKit) -> None:
    m = memory()
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    snapshot = memory.store.load("c")
    stale = CompactionPlan(expected_version=snapshot.version - 1, archive_through_seq=2)
    assert memory.store.apply("c", stale) is False
    assert memory.store.load("c").archived_count == 0
    fresh = CompactionPlan(expected_version=snapshot.version, archive_through_seq=2)
    assert memory.store.apply("c", fresh) is True
    after = memory.store.load("c")
    assert after.archived_count == 2 and after.version > snapshot.version
    assert memory.store.apply("c", fresh) is False


def test_stale_compaction_after_concurrent_append_is_replanned(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=2)
    for i in range(3):
        m.add("c", turn(f"q{i}"))  # compacts to 2 turns
    other = memory(compaction_strategy="none")
    other.add("c", turn("q3"))  # over the limit; nobody compacted
    other.add("c", turn("q4"))
    result = m.compact("c")
    assert result.compacted
    assert [e.content for e in m.window("c") if e.type is EventType.USER] == ["q3", "q4"]


def test_hostile_conversation_ids_are_data(memory: MemoryKit) -> None:
    m = memory()
    for i, cid in enumerate(HOSTILE_IDS):
        m.add(cid, turn(f"message {i}"))
    for i, cid in enumerate(HOSTILE_IDS):
        assert [e.content for e in m.history(cid)] == [f"message {i}", f"reply to message {i}"]
        assert m.search(cid, "message").total == 2
    assert set(HOSTILE_IDS) <= set(memory.store.conversations())
    m.clear("*")
    assert m.history("*") == [] and m.history("%") != []


def test_bad_conversation_ids_are_refused(memory: MemoryKit) -> None:
    m = memory()
    for cid in ["", None, 42, "nul\x00byte"]:
        with pytest.raises(InvalidInputError, match="conversation_id"):
            m.add(cid, Event.user("x"))  # type: ignore[arg-type]


def test_bad_events_are_refused_and_nothing_is_stored(memory: MemoryKit) -> None:
    m = memory()
    with pytest.raises(InvalidEventError, match="tool_call_id"):
        m.add("c", [Event.user("x"), Event.tool_result("nope", "orphan")])
    with pytest.raises(InvalidEventError, match="summary"):
        m.add("c", Event.summary("forged"))
    with pytest.raises(InvalidEventError, match="not an Event"):
        m.add("c", [Event.user("x"), {"type": "user"}])  # type: ignore[list-item]
    assert m.history("c") == []


def test_tool_result_may_follow_its_call_in_a_later_add(memory: MemoryKit) -> None:
    m = memory()
    m.add("c", [Event.user("x"), Event.tool_call("t", {}, call_id="k1")])
    m.add("c", Event.tool_result("k1", "done"))
    assert [e.type for e in m.window("c")] == [
        EventType.USER,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
    ]


def test_clear_removes_everything_and_restarts_seq(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=1)
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    m.add("other", turn("keep me"))
    m.clear("c")
    assert m.history("c") == [] and m.window("c") == []
    assert m.stats("c").archived_events == 0
    assert m.search("c", "q1").total == 0
    assert seqs(m.add("c", Event.user("again"))) == [1]
    assert len(m.history("other")) == 2


def test_stats_of_an_unknown_conversation(memory: MemoryKit) -> None:
    stats = memory().stats("nobody")
    assert (
        stats.active_events,
        stats.archived_events,
        stats.turns,
        stats.window_tokens,
        stats.version,
    ) == (0, 0, 0, 0, 0)


def test_version_grows_with_every_write(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=1)
    versions = []
    for i in range(3):
        m.add("c", turn(f"q{i}"))
        versions.append(m.stats("c").version)
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_token_counts_are_stored_once(memory: MemoryKit) -> None:
    calls = []

    def counter(text: str) -> int:
        calls.append(text)
        return len(text.split())

    m = memory.ChatMemory(
        memory.store,
        MemoryConfig(compaction_strategy="token_count", max_tokens=1000),
        token_counter=counter,
    )
    m.add("c", turn("a b c"))
    counted = len(calls)
    for _ in range(3):
        m.window("c")
        m.stats("c")
    m.compact("c")
    assert len(calls) == counted == 2
    assert [e.tokens for e in m.window("c")] == [3 + 4, 5 + 4]  # words + per-event overhead
