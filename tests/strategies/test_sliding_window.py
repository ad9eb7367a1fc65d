"""``sliding_window`` (chat_memory/strategies/sliding_window.py): over ``max_events`` active
real events it archives the oldest so that at most ``compact_to_ratio`` of ``max_events``
remain, the cut moved forward to the next turn start; it keeps the newest ``MIN_KEPT_TURNS``
(2) turns when they fit in ``max_events``, and never splits a tool pair (docs/lean-window.md
"Small windows", docs/tool-pairs.md). Pure: windows in, cuts out; no store."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import Window
from chat_memory.strategies import SlidingWindow, strategy_for
from tests.support.helpers import seqs


def window(*turns: list[Event], pinned: tuple[Event, ...] = ()) -> Window:
    """The turns as the store holds them in the window: seqs 1, 2, … in order."""
    events = [e for t in turns for e in t]
    active = tuple(e.stored(seq=i, tokens=1) for i, e in enumerate(events, 1))
    return Window(pinned=pinned, active=active)


def sliding_window(max_events: int, ratio: float = 0.5) -> SlidingWindow:
    strategy = strategy_for(
        MemoryConfig(
            compaction_strategy="sliding_window", max_events=max_events, compact_to_ratio=ratio
        )
    )
    assert isinstance(strategy, SlidingWindow)
    return strategy


def sized(*sizes: int) -> list[list[Event]]:
    """Turns of the given sizes in events: a user message, then assistant replies."""
    return [
        [Event.user(f"u{t}")] + [Event.assistant(f"a{t}.{i}") for i in range(size - 1)]
        for t, size in enumerate(sizes)
    ]


# -- the limit ------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(2,), (2, 2, 2), (2, 2, 2, 2), (3, 3, 2)])
def test_a_window_at_or_under_max_events_is_not_cut(sizes):
    assert sliding_window(8).plan(window(*sized(*sizes))) is None


def test_pinned_events_do_not_count_against_max_events():
    pinned = tuple(Event.system(f"rule {i}") for i in range(5))
    assert sliding_window(8).plan(window(*sized(2, 2, 2, 2), pinned=pinned)) is None


def test_over_the_limit_at_most_the_ratio_remains_cut_at_the_next_turn_start():
    # 12 events over 10 at 0.5: at most 5 remain; the 7th event is inside turn 3, so the cut
    # moves forward to the next turn start (event 9) and 4 events, 2 turns, stay
    cut = sliding_window(10, 0.5).plan(window(*sized(3, 3, 2, 2, 2)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert seqs(cut.kept) == [9, 10, 11, 12]


def test_one_event_over_keeps_the_newest_two_turns_that_fit():
    # 9 events over 8 at 0.5: the ratio's 4 events would leave the 3-event turn alone; the
    # newest two turns (5 events) fit in 8, so they stay
    cut = sliding_window(8, 0.5).plan(window(*sized(2, 2, 2, 3)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4]
    assert seqs(cut.kept) == [5, 6, 7, 8, 9]


def test_far_over_compacts_to_the_ratio():
    cut = sliding_window(8, 0.5).plan(window(*sized(*[2] * 10)))
    assert cut is not None
    assert seqs(cut.kept) == [17, 18, 19, 20]
    assert seqs(cut.archived) == list(range(1, 17))


def test_a_ratio_of_one_compacts_just_within_max_events():
    cut = sliding_window(8, 1.0).plan(window(*sized(3, 2, 2, 2)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3]
    assert seqs(cut.kept) == [4, 5, 6, 7, 8, 9]


def test_newer_turns_too_big_for_the_limit_leave_the_newest_turn_alone():
    # docs/lean-window.md: a 3-event turn and a 2-event turn under max_events=4
    cut = sliding_window(4, 0.5).plan(window(*sized(2, 3, 2)))
    assert cut is not None
    assert seqs(cut.kept) == [6, 7]


def test_the_newest_turn_is_never_archived_even_alone_over_the_limit():
    cut = sliding_window(4, 0.5).plan(window(*sized(2, 9)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2]
    assert len(cut.kept) == 9


def test_a_single_turn_over_the_limit_cannot_be_cut():
    assert sliding_window(4).plan(window(*sized(9))) is None


# -- tool pairs -----------------------------------------------------------------------------


def test_a_pair_straddling_the_limit_leaves_with_the_older_turn():
    # 7 events over 6 at ratio 1: one event must go; the cut at u2 would split c1 from its
    # late result, so the next safe turn start (u3) is taken
    turns = [
        [Event.user("u1"), Event.tool_call("lookup", call_id="c1")],
        [Event.user("hurry up"), Event.tool_result("c1", "done"), Event.assistant("a2")],
        [Event.user("u3"), Event.assistant("a3")],
    ]
    cut = sliding_window(6, 1.0).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5]
    assert seqs(cut.kept) == [6, 7]


def test_when_a_pair_blocks_the_floor_the_nearest_safe_cut_before_it_keeps_two_turns():
    # the two-turn floor is u3, inside the pair c2 (called in turn 2, answered in turn 3);
    # the safe cut before it (u2) brings 11 events within 10, so the pair and the floor stay
    turns = [
        [Event.user("u1"), Event.assistant("a1"), Event.assistant("a1b")],
        [Event.user("u2"), Event.tool_call("lookup", call_id="c2")],
        [Event.user("hurry up"), Event.tool_result("c2", "done"), Event.assistant("a3")],
        [Event.user("u4"), Event.assistant("a4"), Event.assistant("a4b")],
    ]
    cut = sliding_window(10, 0.5).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3]
    assert seqs(cut.kept) == [4, 5, 6, 7, 8, 9, 10, 11]


# -- invariants over random windows ---------------------------------------------------------


def expected_kept_turns(sizes: list[int], max_events: int, ratio: float) -> int:
    """The documented outcome, worked out from the turns' sizes: the most newest whole turns
    within ``floor(ratio × max_events)`` events (at least the newest turn, never archived),
    raised to 2 turns when those 2 fit in ``max_events``."""
    target = max(1, math.floor(Fraction(str(ratio)) * max_events))
    by_ratio = max([1] + [j for j in range(1, len(sizes) + 1) if sum(sizes[-j:]) <= target])
    if len(sizes) >= 2 and sum(sizes[-2:]) <= max_events:
        return max(by_ratio, 2)
    return by_ratio


@settings(max_examples=100)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=12),
    max_events=st.integers(2, 16),
    ratio=st.sampled_from([0.1, 0.25, 0.5, 0.7, 1.0]),
)
def test_every_cut_keeps_the_newest_whole_turns_the_rules_ask_for(sizes, max_events, ratio):
    # no tool pairs: every turn start is a safe cut, so the kept part is exactly determined
    turns = sized(*sizes)
    w = window(*turns)
    cut = sliding_window(max_events, ratio).plan(w)
    if len(w.active) <= max_events or len(turns) == 1:
        assert cut is None
        return
    assert cut is not None
    kept = expected_kept_turns(sizes, max_events, ratio)
    assert [e.id for e in cut.kept] == [e.id for t in turns[-kept:] for e in t]
    assert cut.archived + cut.kept == w.active


# -- settings -------------------------------------------------------------------------------


def test_it_reads_max_events_and_the_ratio_and_declares_nothing_new():
    assert SlidingWindow.name == "sliding_window"
    assert SlidingWindow.settings == ("max_events", "compact_to_ratio")
    assert SlidingWindow.extra_settings is None
    assert SlidingWindow.reads("max_events") and not SlidingWindow.reads("max_turns")
    assert SlidingWindow.compacts and not SlidingWindow.summarizes


def test_the_canvas_shows_max_events_for_sliding_window():
    from chat_memory.components.fields import shown_for

    assert "sliding_window" in shown_for("max_events")
    assert "sliding_window" not in shown_for("max_turns")


@pytest.mark.parametrize("value", [0, -1])
def test_max_events_below_one_is_refused_naming_the_setting_and_the_value(value):
    with pytest.raises(ConfigurationError, match=rf"Max events \({value}\)"):
        MemoryConfig(compaction_strategy="sliding_window", max_events=value)
