"""``turn_window`` (chat_memory/strategies/turn_window.py): over ``max_turns`` turns it
archives the oldest whole turns until ``compact_to_ratio`` of ``max_turns`` remain (all
``max_turns`` at a ratio of 1), never fewer than ``min(max_turns, MIN_KEPT_TURNS)``, and never
splitting a tool pair (docs/lean-window.md "Small windows", docs/tool-pairs.md). Pure: windows
in, cuts out; no store."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import EventType, Window, turn_starts
from chat_memory.strategies import SUPERSEDING_TURNS, TurnWindow, strategy_for
from tests.support.helpers import check_cut, seqs, turn


def window(*turns: list[Event]) -> Window:
    """The turns as the store holds them in the window: seqs 1, 2, … in order."""
    events = [e for t in turns for e in t]
    return Window(active=tuple(e.stored(seq=i, tokens=1) for i, e in enumerate(events, 1)))


def turn_window(max_turns: int, ratio: float = 0.5) -> TurnWindow:
    strategy = strategy_for(
        MemoryConfig(compaction_strategy="turn_window", max_turns=max_turns, compact_to_ratio=ratio)
    )
    assert isinstance(strategy, TurnWindow)
    return strategy


def chat(n: int) -> list[list[Event]]:
    """``n`` turns of a user message and a reply (seqs 2t-1 and 2t for turn t, from 1)."""
    return [turn(f"t{t}") for t in range(1, n + 1)]


# -- the limit ------------------------------------------------------------------------------


@pytest.mark.parametrize("turns", [1, 3, 4])
def test_a_window_at_or_under_max_turns_is_not_cut(turns):
    assert turn_window(4).plan(window(*chat(turns))) is None


def test_one_turn_over_compacts_to_the_ratio_of_max_turns():
    # 5 turns over 4 at 0.5: floor(0.5 × 4) = 2 turns stay
    cut = turn_window(4, 0.5).plan(window(*chat(5)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8, 9, 10]
    assert cut.index == 6 and cut.through_seq == 6


def test_far_over_still_compacts_to_the_ratio_of_max_turns():
    cut = turn_window(4, 0.5).plan(window(*chat(12)))
    assert cut is not None
    assert seqs(cut.kept) == [21, 22, 23, 24]
    assert seqs(cut.archived) == list(range(1, 21))


@pytest.mark.parametrize(("turns", "kept_from"), [(5, 3), (9, 11)])
def test_a_ratio_of_one_keeps_max_turns(turns, kept_from):
    cut = turn_window(4, 1.0).plan(window(*chat(turns)))
    assert cut is not None
    assert seqs(cut.kept) == list(range(kept_from, 2 * turns + 1))
    assert len(turn_starts(cut.kept)) == 4


def test_the_ratio_target_survives_binary_floating_point():
    # 0.58 × 50 is 28.999999999999996 in binary floating point: 29 turns must stay, not 28
    cut = turn_window(50, 0.58).plan(window(*chat(51)))
    assert cut is not None
    assert len(turn_starts(cut.kept)) == 29
    assert seqs(cut.kept)[0] == 2 * (51 - 29) + 1


# -- the MIN_KEPT_TURNS floor ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_turns", "ratio", "kept_turns"),
    [
        (3, 0.5, 2),  # floor(1.5) = 1 turn raised to 2
        (2, 0.5, 2),  # floor(1) = 1 raised to 2: one turn a turn, like a ratio of 1
        (8, 0.1, 2),  # floor(0.8) = 0, at least 1, raised to 2
        (1, 0.5, 1),  # the floor never goes past the limit itself
        (6, 0.5, 3),  # the ratio's 3 is above the floor: unchanged
    ],
)
def test_a_compaction_keeps_at_least_min_of_max_turns_and_two_turns(max_turns, ratio, kept_turns):
    total = max_turns + 3
    cut = turn_window(max_turns, ratio).plan(window(*chat(total)))
    assert cut is not None
    assert seqs(cut.kept) == list(range(2 * (total - kept_turns) + 1, 2 * total + 1))


# -- tool pairs -----------------------------------------------------------------------------


def test_a_pair_straddling_the_cut_leaves_with_the_older_turn():
    # the ratio asks for the cut at u2, inside the pair c1 (called in turn 1, answered in
    # turn 2): the pair stays together, so the cut moves forward to u3
    call = Event.tool_call("lookup", {"q": "slow"}, call_id="c1")
    turns = [
        [Event.user("u1"), call],
        [Event.user("hurry up"), Event.tool_result("c1", "done"), Event.assistant("a2")],
        [Event.user("u3"), Event.assistant("a3")],
    ]
    cut = turn_window(2, 1.0).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5]
    assert seqs(cut.kept) == [6, 7]


def test_a_pending_call_keeps_its_turn_until_superseded():
    # max_turns=1: one interruption keeps the unanswered call (2 turns stay, the bound
    # allows the newest SUPERSEDING_TURNS); a second message supersedes it
    turns = [[Event.user("u1"), Event.tool_call("lookup", call_id="c1")], [Event.user("hurry")]]
    strategy = turn_window(1, 1.0)
    assert strategy.plan(window(*turns)) is None
    cut = strategy.plan(window(*turns, [Event.user("never mind")]))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3]
    assert seqs(cut.kept) == [4]


def test_a_pair_inside_a_turn_is_archived_or_kept_whole():
    turns = [turn("t1", tool=True), turn("t2", tool=True), turn("t3", tool=True)]
    cut = turn_window(2, 0.5).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4]
    assert [e.type for e in cut.kept[:4]] == [
        EventType.USER,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT,
    ]


# -- invariants over random windows ---------------------------------------------------------

RATIOS = [0.1, 0.25, 0.5, 0.7, 0.75, 1.0]

#: a turn: how many tool calls it makes (each answered in the same turn)
in_turn_pairs = st.lists(st.integers(0, 2), min_size=1, max_size=14)


def _turns_with_pairs(calls_per_turn: list[int]) -> list[list[Event]]:
    turns = []
    for t, calls in enumerate(calls_per_turn):
        events = [Event.user(f"u{t}")]
        for c in range(calls):
            events += [
                Event.tool_call("look", call_id=f"c{t}_{c}"),
                Event.tool_result(f"c{t}_{c}", "r"),
            ]
        turns.append([*events, Event.assistant(f"a{t}")])
    return turns


@settings(max_examples=60)
@given(shape=in_turn_pairs, max_turns=st.integers(1, 8), ratio=st.sampled_from(RATIOS))
def test_with_pairs_inside_turns_the_kept_turns_are_exactly_the_target(shape, max_turns, ratio):
    turns = _turns_with_pairs(shape)
    cut = turn_window(max_turns, ratio).plan(window(*turns))
    if len(turns) <= max_turns:
        assert cut is None
        return
    target = max(1, math.floor(Fraction(str(ratio)) * max_turns))
    expected = max(target, min(max_turns, 2))
    assert cut is not None
    assert [e.id for e in cut.kept] == [e.id for t in turns[-expected:] for e in t]


#: a turn: tool calls, each answered in its turn (0), a turn late (1) or never (None)
late_results = st.lists(
    st.lists(st.sampled_from([0, 1, None]), max_size=2), min_size=1, max_size=12
)


def _turns_with_late_results(shape: list[list[int | None]]) -> list[list[Event]]:
    turns: list[list[Event]] = [[Event.user(f"u{t}")] for t in range(len(shape))]
    for t, calls in enumerate(shape):
        for c, delay in enumerate(calls):
            call_id = f"c{t}_{c}"
            turns[t].append(Event.tool_call("look", call_id=call_id))
            if delay is not None and t + delay < len(turns):
                turns[t + delay].append(Event.tool_result(call_id, "r"))
    return turns


@settings(max_examples=80)
@given(shape=late_results, max_turns=st.integers(1, 6), ratio=st.sampled_from(RATIOS))
def test_every_cut_keeps_whole_turns_within_the_bound_and_pairs_together(shape, max_turns, ratio):
    strategy = turn_window(max_turns, ratio)
    active = window(*_turns_with_late_results(shape)).active
    cut = strategy.plan(Window(active=active))
    if cut is None:
        # not cut: within the limit, or only the newest turns that a pending call holds
        assert len(turn_starts(active)) <= max(max_turns, SUPERSEDING_TURNS)
        return
    check_cut(active, cut.index, strategy)  # whole turns, pairs kept unless the bound's last resort
    kept_turns = len(turn_starts(cut.kept))
    assert kept_turns <= max_turns or kept_turns <= SUPERSEDING_TURNS
    assert cut.archived + cut.kept == active


# -- settings -------------------------------------------------------------------------------


def test_it_reads_max_turns_and_the_ratio_and_declares_nothing_new():
    assert TurnWindow.name == "turn_window"
    assert TurnWindow.settings == ("max_turns", "compact_to_ratio")
    assert TurnWindow.extra_settings is None
    assert TurnWindow.reads("max_turns") and not TurnWindow.reads("max_events")
    assert TurnWindow.compacts and not TurnWindow.summarizes


def test_the_canvas_shows_max_turns_for_turn_window_only():
    from chat_memory.components.fields import shown_for

    assert shown_for("max_turns") == ["turn_window"]
    assert "turn_window" in shown_for("compact_to_ratio")


@pytest.mark.parametrize("value", [0, -3])
def test_max_turns_below_one_is_refused_naming_the_setting_and_the_value(value):
    with pytest.raises(ConfigurationError, match=rf"Max turns \({value}\)"):
        MemoryConfig(compaction_strategy="turn_window", max_turns=value)
