"""The cut rules every strategy shares (chat_memory/strategies/base.py, docs/tool-pairs.md,
docs/lean-window.md "Small windows"): cuts fall at turn starts and never archive the newest
turn; a tool call and its result leave together; a pending call stays until superseded; the
bound (within the limit, or the newest ``SUPERSEDING_TURNS`` turns) wins only when pairs
chain every turn to the next; ``compact_to_ratio`` targets and the ``MIN_KEPT_TURNS`` floor;
pinned system events and the summary are never part of a cut. Pure: windows in, cuts out."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import EventType, Window, turn_starts
from chat_memory.strategies import (
    MIN_KEPT_TURNS,
    SUPERSEDING_TURNS,
    Cut,
    Strategy,
    choose_cut,
    is_superseded,
    keep_min_turns,
    safe_cuts,
    strategy_for,
    strategy_names,
)
from chat_memory.strategies.base import compact_target
from tests.support.helpers import seqs


def stored(*turns: list[Event]) -> tuple[Event, ...]:
    """The turns' events as the store holds them in the window: seqs 1, 2, … in order."""
    events = [e for t in turns for e in t]
    return tuple(e.stored(seq=i, tokens=5) for i, e in enumerate(events, 1))


def u(n: int) -> Event:
    return Event.user(f"u{n}")


def a(n: int) -> Event:
    return Event.assistant(f"a{n}")


def call(call_id: str) -> Event:
    return Event.tool_call("lookup", call_id=call_id)


def result(call_id: str) -> Event:
    return Event.tool_result(call_id, f"result of {call_id}")


def test_the_documented_constants():
    # docs/tool-pairs.md (one interruption keeps a call) and docs/lean-window.md (two turns)
    assert SUPERSEDING_TURNS == 2
    assert MIN_KEPT_TURNS == 2


# -- Cut --------------------------------------------------------------------------------------


def test_a_cut_archives_the_events_before_its_index_and_keeps_the_rest():
    active = stored([u(1), a(1)], [u(2), a(2)])
    cut = Cut.at(active, 2)
    assert (cut.index, seqs(cut.archived), seqs(cut.kept)) == (2, [1, 2], [3, 4])
    assert cut.through_seq == 2


# -- safe_cuts: where a window may be cut -----------------------------------------------------


def test_every_turn_start_after_the_first_is_safe_without_tool_pairs():
    active = stored([u(1), a(1)], [u(2), a(2)], [u(3), call("c"), result("c"), a(3)])
    assert safe_cuts(active) == [2, 4]


def test_a_single_turn_and_an_empty_window_have_no_cut():
    assert safe_cuts(stored([u(1), a(1), a(1)])) == []
    assert safe_cuts(()) == []


def test_leading_events_before_any_user_message_form_the_first_turn():
    active = stored([a(0), call("c"), result("c")], [u(1), a(1)])
    assert turn_starts(active) == [0, 3]
    assert safe_cuts(active) == [3]


def test_a_result_a_turn_late_makes_the_turn_start_between_them_unsafe():
    active = stored([u(1), a(1)], [u(2), call("c")], [u(3), result("c"), a(3)], [u(4)])
    assert turn_starts(active) == [0, 2, 4, 7]
    assert safe_cuts(active) == [2, 7]


def test_a_result_two_turns_late_makes_both_turn_starts_between_them_unsafe():
    active = stored([u(1), call("c")], [u(2)], [u(3), result("c")], [u(4)])
    assert safe_cuts(active) == [5]


def test_a_pending_call_blocks_every_cut_after_it_until_superseded():
    # one newer turn (an interruption): the call's turn stays
    assert safe_cuts(stored([u(1)], [u(2), call("c")], [u(3)])) == [1]
    # two newer turns: superseded, it no longer holds anything
    assert safe_cuts(stored([u(1)], [u(2), call("c")], [u(3)], [u(4)])) == [1, 3, 4]


def test_a_result_whose_call_was_archived_constrains_nothing():
    active = stored([u(1), result("gone"), a(1)], [u(2), a(2)], [u(3)])
    assert safe_cuts(active) == [3, 5]


def test_a_call_is_superseded_once_two_newer_turns_started():
    starts = [0, 2, 4, 6]
    assert is_superseded(starts, 1)  # turns at 2, 4 and 6 started after it
    assert is_superseded(starts, 3)  # 4 and 6
    assert not is_superseded(starts, 5)  # only 6
    assert not is_superseded(starts, 7)


# -- choose_cut: the nearest safe cut, and the bound ------------------------------------------


def test_nothing_to_archive_is_no_cut():
    active = stored([u(1), a(1)], [u(2), a(2)])
    assert choose_cut(active, 0) is None
    assert choose_cut(active, -1) is None


def test_the_cut_is_the_nearest_safe_turn_start_at_or_after_required():
    active = stored([u(1), a(1)], [u(2), call("c")], [u(3), result("c"), a(3)], [u(4), a(4)])
    assert choose_cut(active, 1).index == 2
    assert choose_cut(active, 2).index == 2
    assert choose_cut(active, 3).index == 7  # 4 would split c from its result


def test_a_window_with_no_safe_cut_and_two_turns_is_not_cut():
    active = stored([u(1), call("c")], [u(2), result("c"), a(2)])
    assert choose_cut(active, 2) is None


def chain() -> tuple[Event, ...]:
    """Each turn's call answered in the next turn: no turn start is safe."""
    return stored(
        [u(0), call("c0")],
        [u(1), result("c0"), call("c1")],
        [u(2), result("c1"), call("c2")],
        [u(3), result("c2"), call("c3")],
        [u(4), result("c3"), a(4)],
    )


def test_when_pairs_chain_every_turn_the_bound_wins_at_the_required_turn_start():
    active = chain()
    assert safe_cuts(active) == []
    cut = choose_cut(active, 2)
    assert cut is not None and cut.index == 2  # the first turn start at or after 2
    # it gives up the pair c0 only, a call superseded by then (four turns started after it)
    archived_calls = {e.tool_call_id for e in cut.archived if e.type is EventType.TOOL_CALL}
    assert archived_calls == {"c0"} and is_superseded(turn_starts(active), 1)


def test_when_pairs_chain_every_turn_the_cut_goes_no_further_than_the_newest_two_turns():
    active = chain()
    cut = choose_cut(active, 12)
    assert cut is not None and cut.index == turn_starts(active)[-SUPERSEDING_TURNS] == 8
    archived_calls = {e.tool_call_id for e in cut.archived if e.type is EventType.TOOL_CALL}
    kept_results = {e.tool_call_id for e in cut.kept if e.type is EventType.TOOL_RESULT}
    assert archived_calls & kept_results == {"c2"}  # the one the bound gives up; superseded by then
    assert is_superseded(turn_starts(active), 7)


def test_within_lets_the_furthest_safe_cut_stand_instead_of_splitting_pairs():
    # one safe cut (2); the rest of the turn starts are inside pairs
    active = stored(
        [u(0), a(0)],
        [u(1), call("c")],
        [u(2), result("c"), call("d")],
        [u(3), result("d"), call("e")],
        [u(4), result("e"), a(4)],
    )
    assert safe_cuts(active) == [2]
    # archiving 2 already brings it within the limit: no pair is split
    assert choose_cut(active, 9, within=2).index == 2
    # when only archiving 9 does (within defaults to required), no safe cut is far enough:
    # the bound takes the cut to the newest two turns, splitting d (superseded by then)
    assert choose_cut(active, 9).index == 7


# -- compact_to_ratio and the MIN_KEPT_TURNS floor --------------------------------------------


@pytest.mark.parametrize(
    ("limit", "ratio", "target"),
    [
        (10, 0.5, 5),
        (3, 0.5, 1),
        (10, 0.01, 1),
        (1, 1.0, 1),
        (7, 1.0, 7),
        (50, 0.58, 29),
        (90, 0.7, 63),
    ],
)
def test_compact_target_is_the_floor_of_ratio_times_limit_and_at_least_one(limit, ratio, target):
    # 0.58 × 50 and 0.7 × 90 fall just under 29 and 63 in binary floating point
    assert compact_target(limit, ratio) == target


@given(limit=st.integers(1, 100_000), percent=st.integers(1, 100))
def test_compact_target_is_exact_for_every_ratio_in_hundredths(limit, percent):
    ratio = percent / 100
    assert compact_target(limit, ratio) == max(1, math.floor(Fraction(percent, 100) * limit))


@pytest.mark.parametrize("ratio", [0, -0.1, 1.01, 2])
def test_a_compact_to_ratio_outside_zero_to_one_is_refused(ratio):
    with pytest.raises(ConfigurationError, match=rf"Compact to ratio \({ratio}\)"):
        MemoryConfig(compaction_strategy="turn_window", compact_to_ratio=ratio)


def test_the_floor_lowers_a_cut_to_keep_the_newest_two_turns():
    active = stored([u(1), a(1)], [u(2), a(2)], [u(3), a(3)], [u(4), a(4)])
    assert keep_min_turns(active, required=7, within=1) == 4


def test_the_floor_leaves_a_cut_that_already_keeps_two_turns():
    active = stored([u(1), a(1)], [u(2), a(2)], [u(3), a(3)], [u(4), a(4)])
    assert keep_min_turns(active, required=2, within=1) == 2


def test_the_floor_never_goes_past_the_limit():
    # being within the limit needs 5 events gone, past the floor's turn start (4)
    active = stored([u(1), a(1)], [u(2), a(2)], [u(3), a(3)], [u(4), a(4)])
    assert keep_min_turns(active, required=7, within=5) == 7


def test_the_floor_does_not_apply_to_two_turns_or_fewer():
    active = stored([u(1), a(1)], [u(2), a(2), a(2)])
    assert keep_min_turns(active, required=3, within=1) == 3


def test_a_pair_on_the_floor_takes_the_nearest_safe_cut_before_it_within_the_limit():
    active = stored([u(1), a(1)], [u(2), call("c")], [u(3), result("c")], [u(4), a(4)])
    assert turn_starts(active) == [0, 2, 4, 6] and 4 not in safe_cuts(active)
    assert keep_min_turns(active, required=7, within=1) == 2
    # with no safe cut between the limit and the floor, the tool-pair rules win
    assert keep_min_turns(active, required=7, within=3) == 4


# -- forced compaction ------------------------------------------------------------------------


@pytest.mark.parametrize("name", strategy_names())
def test_a_forced_cut_archives_every_turn_but_the_newest_whatever_the_strategy(name):
    strategy = strategy_for(MemoryConfig(compaction_strategy=name))
    active = stored([u(1), a(1)], [u(2), call("c"), result("c")], [u(3), a(3)])
    cut = strategy.forced_cut(Window(active=active))
    assert cut is not None and seqs(cut.kept) == [6, 7]
    assert strategy.forced_cut(Window(active=stored([u(1), a(1)]))) is None


def test_a_forced_cut_keeps_a_pair_together():
    strategy = strategy_for(MemoryConfig(compaction_strategy="none"))
    active = stored([u(1), a(1)], [u(2), call("c")], [u(3), result("c"), a(3)])
    cut = strategy.forced_cut(Window(active=active))
    assert cut is not None and seqs(cut.kept) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("name", [n for n in strategy_names() if n != "none"])
def test_pinned_events_and_the_summary_are_never_part_of_a_cut(name):
    # far over every limit of the strategy, pinned events and the summary included
    config = MemoryConfig(
        compaction_strategy=name,
        max_events=3,
        max_events_to_keep=2,
        overlap_size=0,
        max_turns=1,
        max_tokens=10,
        context_window_tokens=20,
    )
    pinned = (Event.system("rule", tokens=50), Event.system("tone", tokens=50))
    summary = Event.summary("before", tokens=50)
    active = stored(*[[u(t), a(t)] for t in range(6)])
    cut = strategy_for(config).plan(Window(pinned=pinned, summary=summary, active=active))
    assert cut is not None
    assert cut.archived + cut.kept == active
    assert {e.type for e in cut.archived} == {EventType.USER, EventType.ASSISTANT}


# -- every strategy on tangled windows --------------------------------------------------------


@st.composite
def configs(draw: st.DrawFn) -> MemoryConfig:
    name = draw(st.sampled_from(strategy_names()))
    ratio = draw(st.sampled_from([0.1, 0.5, 1.0]))
    max_events = draw(st.integers(3, 12))
    keep = draw(st.integers(1, max_events - 1))
    return MemoryConfig(
        compaction_strategy=name,
        compact_to_ratio=ratio,
        max_events=max_events,
        max_events_to_keep=keep,
        overlap_size=0,
        max_turns=draw(st.integers(1, 5)),
        max_tokens=draw(st.integers(5, 60)),
        context_window_tokens=draw(st.integers(10, 100)),
        compact_at_ratio=0.5,
    )


@st.composite
def tangled(draw: st.DrawFn) -> Window:
    """Pinned events, maybe a summary, and active events whose tool results come in the same
    turn, a turn or two later (after that turn's user message) or never."""
    shape = draw(
        st.lists(
            st.tuples(st.lists(st.sampled_from([0, 0, 1, 2, None]), max_size=2), st.booleans()),
            min_size=1,
            max_size=10,
        )
    )
    turns: list[list[Event]] = [[Event.user(f"u{t}")] for t in range(len(shape))]
    for t, (delays, replies) in enumerate(shape):
        for c, delay in enumerate(delays):
            call_id = f"c{t}_{c}"
            turns[t].append(Event.tool_call("look", call_id=call_id))
            if delay is not None and t + delay < len(turns):
                turns[t + delay].append(Event.tool_result(call_id, "r"))
        if replies:
            turns[t].append(Event.assistant(f"a{t}"))
    tokens = draw(st.integers(1, 8))
    events = [e for t in turns for e in t]
    active = tuple(e.stored(seq=i, tokens=tokens) for i, e in enumerate(events, 1))
    pinned = tuple(Event.system(f"rule {i}", tokens=2) for i in range(draw(st.integers(0, 2))))
    summary = Event.summary("before", tokens=3) if draw(st.booleans()) else None
    return Window(pinned=pinned, summary=summary, active=active)


def assert_follows_the_rules(w: Window, cut: Cut, strategy: Strategy) -> None:
    """The rules of docs/tool-pairs.md for a cut of ``w``, judged on the whole window (pinned
    events and the summary count against a token limit: tests.support.helpers.check_cut
    judges the active events alone)."""
    active = w.active
    starts = turn_starts(active)
    assert cut.index in starts[1:], f"cut at {cut.index}: not a turn start after the first"
    calls = {e.tool_call_id: i for i, e in enumerate(active) if e.type is EventType.TOOL_CALL}
    answered = {e.tool_call_id for e in active if e.type is EventType.TOOL_RESULT}
    kept_results = {e.tool_call_id for e in cut.kept if e.type is EventType.TOOL_RESULT}
    for call_id, i in calls.items():
        if i >= cut.index:
            continue
        if call_id not in answered or call_id in kept_results:
            assert is_superseded(starts, i), f"{call_id} archived in its grace turns"
        if call_id in kept_results:
            for s in safe_cuts(active):
                rest = Window(pinned=w.pinned, summary=w.summary, active=active[s:])
                assert strategy.plan(rest) is not None, f"{call_id} split; the safe cut {s} does"
                assert len(turn_starts(rest.active)) > SUPERSEDING_TURNS


@settings(max_examples=250)
@given(config=configs(), w=tangled())
def test_every_strategy_cuts_whole_turns_of_active_events_by_the_shared_rules(config, w):
    strategy = strategy_for(config)
    cut = strategy.plan(w)
    if cut is None:
        return
    # only active real events are cut: pinned events and the summary never
    assert cut.archived + cut.kept == w.active
    assert all(e.is_real for e in cut.archived)
    assert not {e.id for e in w.pinned} & {e.id for e in cut.archived}
    # whole turns, never the newest, pairs together unless as the bound's last resort
    assert_follows_the_rules(w, cut, strategy)
    # the bound: within the limit after the cut, or at most the newest SUPERSEDING_TURNS turns
    after = Window(pinned=w.pinned, summary=w.summary, active=cut.kept)
    assert strategy.plan(after) is None or len(turn_starts(cut.kept)) <= SUPERSEDING_TURNS
