"""``auto_compact`` (chat_memory/strategies/auto_compact.py): the window runs verbatim until
its tokens (pinned events and the summary included) are over ``compact_at_ratio`` ×
``context_window_tokens``; then every turn but the newest is archived (to be summarised) at
the furthest safe cut. Its two settings are checked together when the config is built. Pure:
windows in, cuts out; no store, no summarizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.errors import ConfigurationError
from chat_memory.events import Window, turn_starts
from chat_memory.strategies import AutoCompact, strategy_for
from tests.support.helpers import seqs


def window(
    *turns: list[Event], pinned: tuple[Event, ...] = (), summary: Event | None = None
) -> Window:
    """The turns as the store holds them in the window: seqs 1, 2, … in order; an event
    without a token count given counts 10."""
    events = [e for t in turns for e in t]
    active = tuple(
        e.stored(seq=i, tokens=10 if e.tokens is None else e.tokens)
        for i, e in enumerate(events, 1)
    )
    return Window(pinned=pinned, summary=summary, active=active)


def chat(n: int) -> list[list[Event]]:
    """``n`` turns of a user message and a reply, 20 tokens a turn."""
    return [[Event.user(f"u{t}"), Event.assistant(f"a{t}")] for t in range(1, n + 1)]


def auto_compact(context_window_tokens: int = 100, ratio: float = 0.8) -> AutoCompact:
    strategy = strategy_for(
        MemoryConfig(
            compaction_strategy="auto_compact",
            context_window_tokens=context_window_tokens,
            compact_at_ratio=ratio,
        )
    )
    assert isinstance(strategy, AutoCompact)
    return strategy


# -- the threshold --------------------------------------------------------------------------


def test_the_threshold_is_the_ratio_of_the_context_window():
    assert auto_compact(100, 0.8).threshold == 80
    assert auto_compact(1000, 0.5).threshold == 500


def test_at_the_threshold_the_window_runs_verbatim():
    assert auto_compact(100, 0.8).plan(window(*chat(4))) is None  # 80 tokens


def test_under_the_threshold_the_window_runs_verbatim():
    assert auto_compact(100, 0.8).plan(window(*chat(2))) is None


def test_one_token_over_archives_every_turn_but_the_newest():
    rule = Event.system("be brief", tokens=1)  # 81 tokens with the 80 active
    cut = auto_compact(100, 0.8).plan(window(*chat(4), pinned=(rule,)))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2, 3, 4, 5, 6]
    assert seqs(cut.kept) == [7, 8]
    assert rule not in cut.archived


def test_the_summary_counts_toward_the_threshold():
    summary = Event.summary("earlier: talk", tokens=30)
    strategy = auto_compact(100, 0.8)
    assert strategy.plan(window(*chat(3))) is None  # 60 tokens
    cut = strategy.plan(window(*chat(3), summary=summary))  # 90 tokens
    assert cut is not None
    assert seqs(cut.kept) == [5, 6]


def test_far_over_still_keeps_only_the_newest_turn():
    cut = auto_compact(100, 0.8).plan(window(*chat(40)))
    assert cut is not None
    assert seqs(cut.kept) == [79, 80]
    assert len(cut.archived) == 78


def test_a_single_turn_over_the_threshold_cannot_be_cut():
    big = [Event.user("u1", tokens=60), Event.assistant("a1", tokens=60)]
    assert auto_compact(100, 0.8).plan(window(big)) is None


# -- tool pairs -----------------------------------------------------------------------------


def test_a_pair_straddling_the_newest_turn_keeps_the_turn_of_its_call():
    # the newest turn holds the late result of a call made in the turn before: the cut at the
    # newest turn would split them, so it falls at the furthest safe cut, before the call
    turns = [
        [Event.user("u1"), Event.assistant("a1")],
        [Event.user("u2"), Event.tool_call("lookup", call_id="c2")],
        [Event.user("hurry up"), Event.tool_result("c2", "done"), Event.assistant("a3")],
        [Event.assistant("a3b", tokens=50)],
    ]
    cut = auto_compact(100, 0.8).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1, 2]
    assert seqs(cut.kept) == [3, 4, 5, 6, 7, 8]


def test_two_turns_joined_by_a_pair_are_not_cut():
    turns = [
        [Event.user("u1", tokens=50), Event.tool_call("lookup", call_id="c1", tokens=50)],
        [Event.user("hurry up"), Event.tool_result("c1", "done"), Event.assistant("a2")],
    ]
    assert auto_compact(100, 0.8).plan(window(*turns)) is None


def test_a_pending_call_in_the_turn_before_the_newest_keeps_its_turn():
    turns = [
        [Event.user("u1"), Event.assistant("a1")],
        [Event.user("u2", tokens=50), Event.tool_call("lookup", call_id="c2", tokens=50)],
        [Event.user("hurry up")],
    ]
    cut = auto_compact(100, 0.8).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.kept) == [3, 4, 5]


def test_a_pair_is_split_only_when_no_cut_keeping_pairs_gets_under_the_threshold():
    # 54 tokens over 50; u1 is the only safe cut (u2 and u3 are inside the pairs c1 and c2),
    # and the window from u1 on is 14 tokens
    turns = [
        [Event.user("u0", tokens=40)],
        [Event.user("u1", tokens=2), Event.tool_call("lookup", call_id="c1", tokens=2)],
        [
            Event.user("u2", tokens=2),
            Event.tool_result("c1", "r", tokens=2),
            Event.tool_call("lookup", call_id="c2", tokens=2),
        ],
        [Event.user("u3", tokens=2), Event.tool_result("c2", "r", tokens=2)],
    ]
    cut = auto_compact(100, 0.5).plan(window(*turns))
    assert cut is not None
    assert seqs(cut.archived) == [1]
    assert seqs(cut.kept) == [2, 3, 4, 5, 6, 7, 8]


# -- invariants over random windows ---------------------------------------------------------


@settings(max_examples=60)
@given(
    tokens=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=3), min_size=1, max_size=10),
    fixed=st.integers(0, 50),
)
def test_over_the_threshold_only_the_newest_turn_stays(tokens, fixed):
    turns = [
        [Event.user(f"u{t}", tokens=sizes[0])]
        + [Event.assistant(f"a{t}", tokens=n) for n in sizes[1:]]
        for t, sizes in enumerate(tokens)
    ]
    w = window(*turns, summary=Event.summary("s", tokens=fixed))
    cut = auto_compact(200, 0.5).plan(w)
    if w.tokens() <= 100 or len(turns) == 1:
        assert cut is None
        return
    assert cut is not None
    assert [e.id for e in cut.kept] == [e.id for e in turns[-1]]
    assert len(turn_starts(cut.kept)) == 1


# -- pressure and settings ------------------------------------------------------------------


def test_pressure_is_the_window_tokens_against_the_threshold():
    strategy = auto_compact(100, 0.8)
    assert strategy.pressure(window(*chat(2))) == 0.5
    assert strategy.pressure(window(*chat(8))) == 2.0


def test_it_reads_the_context_window_its_ratio_and_placement_and_needs_a_summarizer():
    assert AutoCompact.name == "auto_compact"
    assert AutoCompact.settings == (
        "context_window_tokens",
        "compact_at_ratio",
        "summary_placement",
    )
    assert AutoCompact.extra_settings is None
    assert AutoCompact.summarizes and AutoCompact.compacts
    assert not AutoCompact.reads("compact_to_ratio") and not AutoCompact.reads("max_tokens")


def test_the_canvas_shows_compact_at_ratio_for_auto_compact_only():
    from chat_memory.components.fields import shown_for

    assert shown_for("compact_at_ratio") == ["auto_compact"]
    assert "auto_compact" not in shown_for("compact_to_ratio")


@pytest.mark.parametrize(("tokens", "ratio"), [(1, 0.5), (5, 0.1), (3, 0.3)])
def test_a_threshold_under_one_token_is_refused_naming_both_settings(tokens, ratio):
    with pytest.raises(
        ConfigurationError,
        match=rf"Compact at ratio \({ratio}\) of context window tokens \({tokens}\)",
    ):
        MemoryConfig(
            compaction_strategy="auto_compact", context_window_tokens=tokens, compact_at_ratio=ratio
        )


@pytest.mark.parametrize("ratio", [0, -0.5, 1.5])
def test_a_compact_at_ratio_outside_zero_to_one_is_refused(ratio):
    with pytest.raises(ConfigurationError, match=rf"Compact at ratio \({ratio}\)"):
        MemoryConfig(compaction_strategy="auto_compact", compact_at_ratio=ratio)


@pytest.mark.parametrize(("tokens", "ratio", "threshold"), [(100, 0.29, 29), (100, 0.57, 57)])
def test_the_threshold_survives_binary_floating_point(tokens, ratio, threshold):
    strategy = auto_compact(tokens, ratio)
    at_threshold = window([Event.user("u1", tokens=1)], [Event.user("u2", tokens=threshold - 1)])
    assert strategy.plan(at_threshold) is None
