"""``token_count`` (chat_memory/strategies/token_count.py): over ``max_tokens`` window tokens
(pinned events and the summary included) it archives the oldest whole turns until the window
fits in ``compact_to_ratio`` of ``max_tokens`` or only the newest turn is left; it keeps the
newest ``MIN_KEPT_TURNS`` (2) turns when the window with them fits in ``max_tokens``, and
never splits a tool pair (docs/lean-window.md "Small windows", docs/tool-pairs.md). Pure:
windows in, cuts out; no store."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import Window
from chat_memory.strategies import TokenCount, strategy_for
from tests.support.helpers import seqs


def turns(*token_sizes: tuple[int, ...]) -> list[list[Event]]:
    """One turn per tuple, one event per number: a user message then assistant replies, each
    with that many tokens (as the store would have counted them)."""
    return [
        [Event.user(f"u{t}", tokens=sizes[0])]
        + [Event.assistant(f"a{t}.{i}", tokens=n) for i, n in enumerate(sizes[1:])]
        for t, sizes in enumerate(token_sizes)
    ]


def window(
    *turns: list[Event], pinned: tuple[Event, ...] = (), summary: Event | None = None
) -> Window:
    """The turns as the store holds them in the window: seqs 1, 2, … in order."""
    events = [e for t in turns for e in t]
    active = tuple(e.stored(seq=i, tokens=e.tokens or 0) for i, e in enumerate(events, 1))
    return Window(pinned=pinned, summary=summary, active=active)


def token_count(max_tokens: int, ratio: float = 0.5) -> TokenCount:
    strategy = strategy_for(
        MemoryConfig(
            compaction_strategy="token_count", max_tokens=max_tokens, compact_to_ratio=ratio
        )
    )
    assert isinstance(strategy, TokenCount)
    return strategy


TEN = (10, 10)  # a turn of 20 tokens


# -- the limit ------------------------------------------------------------------------------


def test_a_window_at_max_tokens_is_not_cut():
    assert token_count(100).plan(window(*turns(*[TEN] * 5))) is None


def test_a_window_under_max_tokens_is_not_cut():
    assert token_count(100).plan(window(*turns(TEN, TEN))) is None


def test_one_token_over_compacts_to_the_ratio_keeping_pinned_events():
    # 100 active tokens + a 1-token pinned instruction = 101 over 100; at 0.5 the window must
    # fit in 50: 3 turns go (41 tokens left), the pinned event is never part of a cut
    rule = Event.system("be brief", tokens=1)
    cut = token_count(100, 0.5).plan(window(*turns(*[TEN] * 5), pinned=(rule,)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8, 9, 10]
    assert rule not in cut.archived + cut.kept


def test_the_summary_counts_against_max_tokens():
    # 80 active tokens fit in 100; with a 30-token summary the window is 110 and is cut, down
    # to the newest two turns (70 tokens with the summary: the floor, within 100)
    summary = Event.summary("earlier: talk", tokens=30)
    strategy = token_count(100, 0.5)
    assert strategy.plan(window(*turns(*[TEN] * 4))) is None
    cut = strategy.plan(window(*turns(*[TEN] * 4), summary=summary))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4]
    assert seqs(cut.kept) == [5, 6, 7, 8]


def test_far_over_compacts_to_the_ratio():
    # 12 turns of 30 tokens over 200: at 0.5 at most 100 tokens stay, 3 turns
    cut = token_count(200, 0.5).plan(window(*turns(*[(10, 20)] * 12)))
    assert cut is not None
    assert seqs(cut.kept) == [19, 20, 21, 22, 23, 24]


def test_a_ratio_of_one_compacts_just_within_max_tokens():
    cut = token_count(100, 1.0).plan(window(*turns((15, 15), *[TEN] * 4, (5,))))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2]
    assert seqs(cut.kept) == [3, 4, 5, 6, 7, 8, 9, 10, 11]


def test_the_cut_moves_forward_to_a_turn_start():
    # 145 tokens over 100, target 50: archiving 5 events (into the 3rd turn) reaches 50, so
    # the whole 3rd turn goes too and the newest 3 turns (35 tokens) stay
    sizes = ((20, 20), (20, 20), (15, 15), (5, 10), (5, 5), (5, 5))
    cut = token_count(100, 0.5).plan(window(*turns(*sizes)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8, 9, 10, 11, 12]


def test_the_floor_of_two_turns_holds_only_when_the_window_with_them_fits():
    # the newest two turns with the rest of the window are 140 tokens > 100: only the newest
    # turn (60 tokens) stays, although it is over the ratio's 50
    cut = token_count(100, 0.5).plan(window(*turns(TEN, (40, 40), (30, 30))))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4]
    assert seqs(cut.kept) == [5, 6]


def test_the_newest_turn_is_never_archived_even_alone_over_the_limit():
    cut = token_count(100, 0.5).plan(window(*turns(TEN, (100, 100))))
    assert cut is not None
    assert seqs(cut.kept) == [3, 4]
    assert token_count(100).plan(window(*turns((100, 100)))) is None


# -- tool pairs -----------------------------------------------------------------------------


def test_a_pair_straddling_the_limit_leaves_with_the_older_turn():
    # 70 tokens over 60 at ratio 1: the first turn alone would do, but the cut at u2 would
    # split c1 from its late result, so the next safe turn start (u3) is taken
    window_ = window(
        [Event.user("u1", tokens=10), Event.tool_call("lookup", call_id="c1", tokens=10)],
        [
            Event.user("hurry up", tokens=10),
            Event.tool_result("c1", "done", tokens=10),
            Event.assistant("a2", tokens=10),
        ],
        [Event.user("u3", tokens=10), Event.assistant("a3", tokens=10)],
    )
    cut = token_count(60, 1.0).plan(window_)
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5]
    assert seqs(cut.kept) == [6, 7]


# -- invariants over random windows ---------------------------------------------------------


def expected_kept_turns(sizes: list[list[int]], fixed: int, max_tokens: int, ratio: float) -> int:
    """The documented outcome from the turns' token counts (``fixed``: pinned and summary
    tokens): the most newest whole turns with which the window fits in
    ``floor(ratio × max_tokens)`` (at least the newest turn, never archived), raised to 2
    turns when the window with those 2 fits in ``max_tokens``."""
    target = max(1, math.floor(Fraction(str(ratio)) * max_tokens))
    totals = [fixed + sum(map(sum, sizes[-j:])) for j in range(1, len(sizes) + 1)]
    by_ratio = max([1] + [j for j, total in enumerate(totals, 1) if total <= target])
    if len(sizes) >= 2 and totals[1] <= max_tokens:
        return max(by_ratio, 2)
    return by_ratio


@settings(max_examples=100)
@given(
    sizes=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=4), min_size=1, max_size=10),
    fixed=st.integers(0, 40),
    max_tokens=st.integers(10, 200),
    ratio=st.sampled_from([0.1, 0.25, 0.5, 0.7, 1.0]),
)
def test_every_cut_keeps_the_newest_whole_turns_the_rules_ask_for(sizes, fixed, max_tokens, ratio):
    # no tool pairs: every turn start is a safe cut, so the kept part is exactly determined
    built = turns(*map(tuple, sizes))
    w = window(*built, summary=Event.summary("before", tokens=fixed))
    cut = token_count(max_tokens, ratio).plan(w)
    if w.tokens() <= max_tokens or len(built) == 1:
        assert cut is None
        return
    assert cut is not None
    kept = expected_kept_turns(sizes, fixed, max_tokens, ratio)
    assert [e.id for e in cut.kept] == [e.id for t in built[-kept:] for e in t]


# -- settings -------------------------------------------------------------------------------


def test_it_reads_max_tokens_and_the_ratio_and_declares_nothing_new():
    assert TokenCount.name == "token_count"
    assert TokenCount.settings == ("max_tokens", "compact_to_ratio")
    assert TokenCount.extra_settings is None
    assert TokenCount.reads("max_tokens") and not TokenCount.reads("max_events")
    assert TokenCount.compacts and not TokenCount.summarizes


def test_the_canvas_shows_max_tokens_for_token_count_only():
    from chat_memory.components.fields import shown_for

    assert shown_for("max_tokens") == ["token_count"]


@pytest.mark.parametrize("value", [0, -100])
def test_max_tokens_below_one_is_refused_naming_the_setting_and_the_value(value):
    with pytest.raises(ConfigurationError, match=rf"Max tokens \({value}\)"):
        MemoryConfig(compaction_strategy="token_count", max_tokens=value)
