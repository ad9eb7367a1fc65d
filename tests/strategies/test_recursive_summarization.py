"""``recursive_summarization`` (chat_memory/strategies/recursive_summarization.py): over
``max_events`` active real events it keeps the newest ``max_events_to_keep`` events, or
``compact_to_ratio`` of ``max_events`` when that is fewer, cut at a turn start, or more to keep
the newest ``MIN_KEPT_TURNS`` (2) turns when they fit in ``max_events``; the archived events
are summarised, the first ``overlap_size`` kept ones shown to the summarizer as context
(docs/lean-window.md "Small windows"). Its settings are checked against each other when the
config is built. Pure: windows in, cuts out; no store, no summarizer."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import Window
from chat_memory.strategies import RecursiveSummarization, strategy_for
from tests.support.helpers import seqs


def window(*turns: list[Event], summary: Event | None = None) -> Window:
    """The turns as the store holds them in the window: seqs 1, 2, … in order."""
    events = [e for t in turns for e in t]
    active = tuple(e.stored(seq=i, tokens=1) for i, e in enumerate(events, 1))
    return Window(summary=summary, active=active)


def sized(*sizes: int) -> list[list[Event]]:
    """Turns of the given sizes in events: a user message, then assistant replies."""
    return [
        [Event.user(f"u{t}")] + [Event.assistant(f"a{t}.{i}") for i in range(size - 1)]
        for t, size in enumerate(sizes)
    ]


def recursive(
    max_events: int = 10, keep: int = 4, ratio: float = 0.5, overlap: int = 0
) -> RecursiveSummarization:
    strategy = strategy_for(
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=max_events,
            max_events_to_keep=keep,
            compact_to_ratio=ratio,
            overlap_size=overlap,
        )
    )
    assert isinstance(strategy, RecursiveSummarization)
    return strategy


# -- the limit ------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(2,), (2, 2, 2), (2, 2, 2, 2, 2), (3, 3, 4)])
def test_a_window_at_or_under_max_events_is_not_cut(sizes):
    assert recursive(max_events=10).plan(window(*sized(*sizes))) is None


def test_the_summary_does_not_count_against_max_events():
    summary = Event.summary("earlier: a long talk", tokens=500)
    assert recursive(max_events=10).plan(window(*sized(*[2] * 5), summary=summary)) is None


def test_one_over_keeps_max_events_to_keep_when_below_the_ratio():
    # 11 events over 10: keep min(4, floor(0.5 × 10) = 5) = 4, the newest two turns
    cut = recursive(max_events=10, keep=4, ratio=0.5).plan(window(*sized(3, 2, 2, 2, 2)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6, 7]
    assert seqs(cut.kept) == [8, 9, 10, 11]


def test_max_events_to_keep_is_the_lower_mark_even_at_a_ratio_of_one():
    # keep min(6, floor(1 × 10)) = 6: the gap to max_events is the hysteresis
    cut = recursive(max_events=10, keep=6, ratio=1.0).plan(window(*sized(*[2] * 6)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8, 9, 10, 11, 12]


def test_the_ratio_lowers_max_events_to_keep_and_the_cut_moves_to_a_turn_start():
    # keep min(6, floor(0.5 × 10) = 5) = 5 events; 12 events in turns of 2: the cut after 7
    # events is mid-turn, so it moves forward to the next turn start and 4 events stay
    cut = recursive(max_events=10, keep=6, ratio=0.5).plan(window(*sized(*[2] * 6)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert seqs(cut.kept) == [9, 10, 11, 12]


def test_far_over_keeps_the_same_lower_mark():
    cut = recursive(max_events=10, keep=4, ratio=0.5).plan(window(*sized(*[2] * 30)))
    assert cut is not None
    assert seqs(cut.kept) == [57, 58, 59, 60]
    assert len(cut.archived) == 56


def test_it_keeps_more_than_max_events_to_keep_for_the_newest_two_turns():
    # a mark of 2 events would leave the newest 3-event turn alone; the newest two turns (6
    # events) fit in max_events=10, so both stay: more than max_events_to_keep, as documented
    cut = recursive(max_events=10, keep=2, overlap=1).plan(window(*sized(3, 3, 3, 3)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8, 9, 10, 11, 12]


def test_newer_turns_too_big_for_max_events_leave_the_newest_turn_alone():
    cut = recursive(max_events=6, keep=2, overlap=1).plan(window(*sized(2, 4, 3)))
    assert cut is not None
    assert seqs(cut.kept) == [7, 8, 9]


def test_a_pair_straddling_the_cut_leaves_with_the_older_turn():
    # 7 events over 6, keep 2: the floor's turn start (u2) would split c1 from its late
    # result and no safe cut before it brings the window within 6: the pair leaves together
    turns = [
        [Event.user("u1"), Event.tool_call("lookup", call_id="c1")],
        [Event.user("hurry up"), Event.tool_result("c1", "done"), Event.assistant("a2")],
        [Event.user("u3"), Event.assistant("a3")],
    ]
    cut = recursive(max_events=6, keep=2, overlap=1).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5]
    assert seqs(cut.kept) == [6, 7]


# -- what the summarizer sees ---------------------------------------------------------------


@pytest.mark.parametrize("overlap", [0, 1, 3])
def test_the_summarizer_sees_the_first_overlap_size_kept_events_as_upcoming(overlap):
    strategy = recursive(max_events=10, keep=6, ratio=1.0, overlap=overlap)
    cut = strategy.plan(window(*sized(*[2] * 6)))
    assert cut is not None
    assert strategy.upcoming(cut) == list(cut.kept[:overlap])
    assert seqs(strategy.upcoming(cut)) == [7, 8, 9][:overlap]


def test_pressure_is_the_active_events_against_max_events():
    strategy = recursive(max_events=10)
    assert strategy.pressure(window(*sized(*[2] * 5))) == 1.0
    assert strategy.pressure(window(*sized(*[2] * 15))) == 3.0


# -- invariants over random windows ---------------------------------------------------------


def expected_kept_turns(sizes: list[int], max_events: int, keep: int, ratio: float) -> int:
    """The documented outcome from the turns' sizes: the most newest whole turns within
    ``min(max_events_to_keep, floor(ratio × max_events))`` events (at least the newest turn),
    raised to 2 turns when those 2 fit in ``max_events``."""
    target = min(keep, max(1, math.floor(Fraction(str(ratio)) * max_events)))
    by_mark = max([1] + [j for j in range(1, len(sizes) + 1) if sum(sizes[-j:]) <= target])
    if len(sizes) >= 2 and sum(sizes[-2:]) <= max_events:
        return max(by_mark, 2)
    return by_mark


@settings(max_examples=100)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=12),
    max_events=st.integers(3, 16),
    data=st.data(),
    ratio=st.sampled_from([0.1, 0.5, 0.7, 1.0]),
)
def test_every_cut_keeps_the_newest_whole_turns_the_rules_ask_for(sizes, max_events, data, ratio):
    keep = data.draw(st.integers(2, max_events - 1), label="max_events_to_keep")
    turns = sized(*sizes)
    w = window(*turns)
    cut = recursive(max_events, keep, ratio, overlap=1).plan(w)
    if len(w.active) <= max_events or len(turns) == 1:
        assert cut is None
        return
    assert cut is not None
    kept = expected_kept_turns(sizes, max_events, keep, ratio)
    assert [e.id for e in cut.kept] == [e.id for t in turns[-kept:] for e in t]


# -- settings -------------------------------------------------------------------------------


def test_it_reads_its_limits_overlap_placement_and_ratio_and_needs_a_summarizer():
    assert RecursiveSummarization.name == "recursive_summarization"
    assert RecursiveSummarization.settings == (
        "max_events",
        "max_events_to_keep",
        "overlap_size",
        "summary_placement",
        "compact_to_ratio",
    )
    assert RecursiveSummarization.extra_settings is None
    assert RecursiveSummarization.summarizes and RecursiveSummarization.compacts
    assert not RecursiveSummarization.reads("max_turns")


def test_the_canvas_shows_its_own_settings_for_it():
    from chat_memory.components.fields import shown_for

    assert shown_for("max_events_to_keep") == ["recursive_summarization"]
    assert shown_for("overlap_size") == ["recursive_summarization"]
    assert "recursive_summarization" in shown_for("max_events")


@pytest.mark.parametrize(("max_events", "keep"), [(5, 5), (4, 9)])
def test_max_events_must_exceed_max_events_to_keep(max_events, keep):
    with pytest.raises(
        ConfigurationError,
        match=rf"Max events \({max_events}\) must be greater than max events to keep \({keep}\)",
    ):
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=max_events,
            max_events_to_keep=keep,
            overlap_size=0,
        )


@pytest.mark.parametrize(("overlap", "keep"), [(4, 4), (6, 4)])
def test_overlap_size_must_be_below_max_events_to_keep(overlap, keep):
    with pytest.raises(
        ConfigurationError,
        match=rf"Overlap size \({overlap}\) must be less than max events to keep \({keep}\)",
    ):
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=10,
            max_events_to_keep=keep,
            overlap_size=overlap,
        )


def test_a_consistent_config_is_accepted():
    config = MemoryConfig(
        compaction_strategy="recursive_summarization",
        max_events=5,
        max_events_to_keep=4,
        overlap_size=3,
    )
    assert isinstance(strategy_for(config), RecursiveSummarization)
