"""Compaction that keeps the prefix stable (``compact_to_ratio``), the prefix-cache model the
benchmark prices requests with, and the cache-share and cost bounds on the benchmark transcript."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cache_model import PrefixCache, keep_facts, run_chat_memory, transcript, unreachable
from chat_memory import ChatMemory, ConfigurationError, Event, MemoryConfig, to_anthropic
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import Window, turn_starts
from chat_memory.strategies.base import MIN_KEPT_TURNS, compact_target

LIMITS = {
    "turn_window": ("max_turns", lambda w: len(turn_starts(w.active)), st.integers(1, 6)),
    "sliding_window": ("max_events", lambda w: len(w.active), st.integers(2, 16)),
    "token_count": ("max_tokens", lambda w: w.tokens(), st.integers(40, 400)),
    "recursive_summarization": ("max_events", lambda w: len(w.active), st.integers(4, 16)),
}

# one turn: a user message, then (tool call, result size in words) pairs, then an answer
turn_shape = st.tuples(
    st.integers(1, 30), st.lists(st.integers(1, 60), max_size=3), st.integers(1, 30)
)


def _config(strategy: str, limit: int, ratio: float) -> MemoryConfig:
    field = LIMITS[strategy][0]
    settings_: dict = {"compaction_strategy": strategy, field: limit, "compact_to_ratio": ratio}
    if strategy == "recursive_summarization":
        settings_.update(max_events_to_keep=max(1, limit // 2), overlap_size=0)
    return MemoryConfig(**settings_, max_archived_events=100_000)


def _events(turns: list[tuple[int, list[int], int]]) -> list[Event]:
    out = []
    for t, (asked, results, answered) in enumerate(turns):
        out.append(Event.user(" ".join(["ask"] * asked)))
        for j, size in enumerate(results):
            call = Event.tool_call("look", {"t": t}, call_id=f"c{t}_{j}")
            out += [call, Event.tool_result(call.tool_call_id, " ".join(["data"] * size))]
        out.append(Event.assistant(" ".join(["said"] * answered)))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(sorted(LIMITS)),
    data=st.data(),
    ratio=st.floats(0.05, 1.0),
    turns=st.lists(turn_shape, min_size=1, max_size=25),
)
def test_compaction_goes_down_to_the_ratio_and_leaves_the_prefix_alone_until_the_next(
    strategy, data, ratio, turns
):
    field, measure, limits = LIMITS[strategy]
    limit = data.draw(limits)
    config = _config(strategy, limit, ratio)
    memory = ChatMemory(InMemoryStore(), config, summarizer=keep_facts)
    target = compact_target(limit, ratio)
    if strategy == "recursive_summarization":
        target = min(target, config.max_events_to_keep)
    previous: Window = memory.store.load("c").window
    for event in _events(turns):
        memory.add("c", event)
        window = memory.store.load("c").window
        before = [e.id for e in previous.active] + [event.id]
        now = [e.id for e in window.active]
        if now == before:  # no compaction: the window only grew at its end, summary unchanged
            assert window.summary == previous.summary
            assert measure(window) <= limit or len(turn_starts(window.active)) == 1
        else:
            assert now == before[len(before) - len(now) :], (
                "a compaction archives a prefix, nothing else"
            )
            grown = Window(
                active=(*previous.active, window.active[-1]),
                pinned=previous.pinned,
                summary=previous.summary,
            )
            assert measure(grown) > limit, "the trigger is the limit itself, not the ratio"
            # over the ratio's target only to keep the newest MIN_KEPT_TURNS turns (within the limit)
            assert measure(window) <= target or len(turn_starts(window.active)) <= MIN_KEPT_TURNS, (
                f"{strategy}: {measure(window)} > {target} ({ratio} of {limit}) after a compaction"
            )
        previous = window


def test_a_ratio_of_one_keeps_the_old_behaviour_and_half_compacts_to_half():
    def turns_after(ratio: float, n: int) -> int:
        memory = ChatMemory(
            InMemoryStore(),
            MemoryConfig(compaction_strategy="turn_window", max_turns=4, compact_to_ratio=ratio),
        )
        for t in range(n):
            memory.add("c", [Event.user(f"q{t}"), Event.assistant(f"a{t}")])
        return memory.stats("c").turns

    assert [turns_after(1.0, n) for n in (4, 5, 6, 9)] == [4, 4, 4, 4]
    # compacts to 2 when the 5th turn arrives, then grows back to 4 before the next
    assert [turns_after(0.5, n) for n in (4, 5, 6, 7, 8, 9)] == [4, 2, 3, 4, 2, 3]


def test_compact_target_rounds_down_but_keeps_at_least_one():
    assert [compact_target(10, r) for r in (1.0, 0.7, 0.5, 0.3, 0.01)] == [10, 7, 5, 3, 1]


@pytest.mark.parametrize(
    "value", [0, 0.0, -0.5, 1.01, 2, "abc", True, math.nan, math.inf, None, [0.5]]
)
def test_bad_ratios_are_refused_naming_the_field_and_value(value):
    with pytest.raises(ConfigurationError) as caught:
        MemoryConfig(compact_to_ratio=value)
    assert "Compact to ratio" in str(caught.value) and repr(value)[:3] in str(caught.value)


def test_ratios_in_range_are_taken_by_either_name():
    assert MemoryConfig(compactToRatio="0.25").compact_to_ratio == 0.25
    assert MemoryConfig(compact_to_ratio=1).compact_to_ratio == 1.0
    assert MemoryConfig().compact_to_ratio == 0.5


# -- the cache model ------------------------------------------------------------------------


def _request(*texts: str) -> tuple:
    events = []
    for i, text in enumerate(texts):
        events.append(Event.user(text) if i % 2 == 0 else Event.assistant(text))
    return to_anthropic(events, "system prompt", cache=True)


def test_the_cache_model_reads_a_repeated_prefix_and_misses_a_changed_one():
    cache = PrefixCache()
    first = cache.send(*_request("one two three", "four", "five six"))
    assert first[1] == 0
    total, cached = cache.send(*_request("one two three", "four", "five six", "seven", "eight"))
    assert 0 < cached < total  # the previous request's tail (three from the end) is read
    changed = cache.send(*_request("ONE two three", "four", "five six", "seven", "eight"))
    assert 0 < changed[1] < cached  # only the system prompt is still the same
    before = cache.tally.cost_cached
    cache.clock += 301  # past the cache lifetime
    total, cached = cache.send(*_request("ONE two three", "four", "five six", "seven", "eight"))
    assert cached == 0 and cache.tally.cost_cached - before == pytest.approx(1.25 * total)


def test_without_breakpoints_nothing_is_cached_and_everything_costs_the_base_price():
    cache = PrefixCache()
    for _ in range(3):
        system, messages = to_anthropic([Event.user("same every time")], "system", cache=False)
        cache.send(system, messages)
    assert cache.tally.cached_tokens == 0 and cache.tally.cost_cached == cache.tally.input_tokens


# -- the benchmark transcript: cache share and cost bounds ----------------------------------


def test_turn_window_of_ten_with_the_recommended_settings_is_served_from_the_cache_and_keeps_every_fact():
    turns, facts = transcript(300, 50)
    today = MemoryConfig(
        compaction_strategy="turn_window",
        max_turns=10,
        compact_to_ratio=1.0,
        max_archived_events=100_000,
    )
    baseline, _, _ = run_chat_memory(turns, today, cache=False)
    # recommended: the defaults (compact_to_ratio 0.5, cache breakpoints on); the archive cap
    # is raised so that recall measures compaction, not the storage cap (as tests/engine/test_recall.py)
    recommended = MemoryConfig(
        compaction_strategy="turn_window", max_turns=10, max_archived_events=100_000
    )
    tally, memory, cid = run_chat_memory(turns, recommended)
    assert tally.hit_share >= 0.85, f"cache-hit share {tally.hit_share:.1%}"
    assert tally.cost_cached <= 0.30 * baseline.cost_uncached, (
        f"{tally.cost_cached / baseline.cost_uncached:.1%} of today's cost"
    )
    assert memory.stats(cid).archived_events > 0
    assert unreachable(memory, cid, facts) == []
