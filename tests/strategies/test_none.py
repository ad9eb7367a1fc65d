"""``none`` (chat_memory/strategies/none.py): the window is the whole conversation. Its plan
never cuts, whatever the window's size, tool pairs or pinned events; it reads no setting and
never archives, so the canvas shows it no limit. Pure: windows in, no cut out; no store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import Event, MemoryConfig
from chat_memory.events import Window
from chat_memory.strategies import NoCompaction, strategy_for
from tests.support.helpers import turn


def none_strategy(**settings_: object) -> NoCompaction:
    strategy = strategy_for(MemoryConfig(compaction_strategy="none", **settings_))
    assert isinstance(strategy, NoCompaction)
    return strategy


def window(*turns: list[Event], pinned: tuple[Event, ...] = ()) -> Window:
    events = [e for t in turns for e in t]
    active = tuple(e.stored(seq=i, tokens=1000) for i, e in enumerate(events, 1))
    return Window(pinned=pinned, summary=Event.summary("s", tokens=10_000), active=active)


def test_it_is_the_default_strategy():
    assert isinstance(strategy_for(MemoryConfig()), NoCompaction)


def test_a_window_far_over_every_other_limit_is_not_cut():
    # 200 turns of 1000-token events: over every default limit (20 events, 10 turns, 4000
    # tokens, 80% of 200 000 tokens); with the limits set low too
    big = window(*[turn(f"t{t}", tool=t % 3 == 0) for t in range(200)])
    assert none_strategy().plan(big) is None
    assert none_strategy(max_events=1, max_turns=1, max_tokens=1).plan(big) is None


@settings(max_examples=30)
@given(
    sizes=st.lists(st.booleans(), max_size=30),
    pinned=st.integers(0, 3),
)
def test_no_window_is_ever_cut(sizes, pinned):
    w = window(
        *[turn(f"t{t}", tool=tool) for t, tool in enumerate(sizes)],
        pinned=tuple(Event.system(f"rule {i}") for i in range(pinned)),
    )
    assert none_strategy().plan(w) is None


def test_it_never_archives_and_reads_no_setting():
    assert NoCompaction.name == "none"
    assert NoCompaction.compacts is False
    assert NoCompaction.summarizes is False
    assert NoCompaction.settings == ()
    assert NoCompaction.extra_settings is None
    for setting in ("max_events", "max_turns", "max_tokens", "compact_to_ratio"):
        assert not NoCompaction.reads(setting)


def test_its_pressure_is_always_zero():
    # the summarizer fallback's 2× pressure rule never applies to a strategy that never cuts
    assert none_strategy().pressure(window(*[turn("t")] * 50)) == 0.0


def test_the_canvas_shows_it_no_limit_and_no_archive_cap():
    from chat_memory.components.fields import shown_for

    for setting in ("max_events", "max_turns", "max_tokens", "compact_to_ratio"):
        assert "none" not in shown_for(setting)
    assert "none" not in shown_for("max_archived_events")  # shown for compacting strategies


def test_a_limit_given_to_it_warns_that_it_has_no_effect():
    with pytest.warns(
        UserWarning, match=r"max_turns \(3\) has no effect with compaction_strategy 'none'"
    ):
        MemoryConfig(compaction_strategy="none", max_turns=3)
