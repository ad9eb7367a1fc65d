"""The per-turn chart's numbers, rebuilt from history() and compactions(), against what the
memory reports: the newest turn's point is the window's own token count, whatever the strategy
and however many turns each add() brought; the SVG carries one bar per charted turn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.inspector.chart import series, svg
from tests.inspector.seed import summarize, turn

STRATEGIES = {
    "turn_window": {"compaction_strategy": "turn_window", "max_turns": 3},
    "sliding_window": {"compaction_strategy": "sliding_window", "max_events": 7},
    "recursive_summarization": {
        "compaction_strategy": "recursive_summarization",
        "max_events": 9,
        "max_events_to_keep": 4,
        "overlap_size": 1,
    },
}


@settings(max_examples=25)
@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    batches=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=6),
    pinned=st.booleans(),
)
def test_the_newest_point_is_the_windows_token_count(strategy, batches, pinned):
    memory = ChatMemory(
        open_store("memory://"), MemoryConfig(**STRATEGIES[strategy]), summarizer=summarize
    )
    if pinned:
        memory.add("c", Event.system("Be brief."))
    n = 0
    for size in batches:
        memory.add("c", [e for k in range(n + 1, n + size + 1) for e in turn(k)])
        n += size
    data = series(memory.history("c", include_retracted=True), memory.compactions("c"))
    assert data.turns == n and [p.turn for p in data.points] == list(range(1, n + 1))
    assert data.points[-1].window_tokens == memory.stats("c").window_tokens
    assert all(0.0 <= p.cached_share <= 1.0 for p in data.points)
    assert svg(data).count("<rect") == n + sum(p.compacted for p in data.points)


def test_a_turn_after_a_compaction_is_served_from_the_cache_only_up_to_the_system_prompt():
    memory = ChatMemory(open_store("memory://"), MemoryConfig(**STRATEGIES["turn_window"]))
    memory.add("c", Event.system("Be brief."))
    for k in range(1, 6):
        memory.add("c", turn(k))
    points = series(memory.history("c"), memory.compactions("c")).points
    pins = memory.window("c")[0].tokens
    # turn_window archives two turns at once at the end of turn 4 (compact_to_ratio)
    assert [p.compacted for p in points] == [False, False, False, True, False]
    (record,) = memory.compactions("c")
    assert points[3].window_tokens == record.tokens_after
    assert points[1].cached_share == points[0].window_tokens / points[1].window_tokens
    assert points[3].cached_share == pins / points[3].window_tokens
    assert points[4].cached_share == points[3].window_tokens / points[4].window_tokens
