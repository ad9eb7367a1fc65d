"""A small window never drops to the current turn alone: a compaction leaves at least the
newest ``MIN_KEPT_TURNS`` (2) whole turns whenever the strategy's limit itself allows them,
whatever ``compact_to_ratio`` asks for (docs/lean-window.md, "Small windows")."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import Window, turn_starts
from chat_memory.strategies import MIN_KEPT_TURNS, keep_min_turns
from tests.support.helpers import fixed_tokens, turn

#: strategy -> (limit field, the window's size against that limit, limits to draw)
LIMITS = {
    "turn_window": ("max_turns", lambda w: len(turn_starts(w.active)), st.integers(1, 5)),
    "sliding_window": ("max_events", lambda w: len(w.active), st.integers(2, 12)),
    "token_count": ("max_tokens", lambda w: w.tokens(), st.integers(20, 200)),
    "recursive_summarization": ("max_events", lambda w: len(w.active), st.integers(3, 12)),
}

# one turn: words in the question, tool results (sizes in words) answered within the turn, words in the answer
turn_shape = st.tuples(
    st.integers(1, 20), st.lists(st.integers(1, 40), max_size=2), st.integers(1, 20)
)


def _events(t: int, shape: tuple[int, list[int], int]) -> list[Event]:
    asked, results, answered = shape
    out = [Event.user(" ".join([f"q{t}"] * asked))]
    for j, size in enumerate(results):
        call = Event.tool_call("look", {"t": t}, call_id=f"c{t}_{j}")
        out += [call, Event.tool_result(call.tool_call_id, " ".join(["data"] * size))]
    return [*out, Event.assistant(" ".join(["said"] * answered))]


def _config(strategy: str, limit: int, ratio: float) -> MemoryConfig:
    field = LIMITS[strategy][0]
    extra: dict[str, Any] = {}
    if strategy == "recursive_summarization":
        extra = {"max_events_to_keep": max(1, limit // 3), "overlap_size": 0}
    return MemoryConfig(
        compaction_strategy=strategy, **{field: limit}, compact_to_ratio=ratio, **extra
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(sorted(LIMITS)),
    data=st.data(),
    ratio=st.sampled_from([0.05, 0.25, 0.5, 0.75, 1.0]),
    shapes=st.lists(turn_shape, min_size=2, max_size=16),
)
def test_after_any_compaction_the_window_keeps_two_whole_turns_when_the_limit_allows(
    strategy, data, ratio, shapes
):
    field, measure, limits = LIMITS[strategy]
    limit = data.draw(limits, label=field)
    memory = ChatMemory(
        InMemoryStore(),
        _config(strategy, limit, ratio),
        summarizer=lambda p, e, u: "earlier: talk",
        token_counter=fixed_tokens,
    )
    for t, shape in enumerate(shapes):
        before = memory.store.load("c")
        batch = _events(t, shape)
        memory.add("c", batch)
        after = memory.store.load("c")
        if after.archived_count == before.archived_count:
            continue  # no compaction on this turn
        window = after.window
        grown = (
            *before.window.active,
            *window.active[-len(batch) :],
        )  # the window the compaction cut
        available = len(turn_starts(grown))
        floor = min(MIN_KEPT_TURNS, available)
        newest = grown[turn_starts(grown)[-floor] :]
        if measure(Window(pinned=window.pinned, summary=window.summary, active=newest)) <= limit:
            kept = len(turn_starts(window.active))
            assert kept >= floor, (
                f"{strategy} {field}={limit} ratio={ratio}: {kept} turn(s) kept of {available}"
            )
        assert [e.id for e in window.active[-len(batch) :]] == [
            e.id for e in batch
        ]  # the newest turn stays


@pytest.mark.parametrize("strategy", sorted(LIMITS))
def test_each_strategy_at_the_default_ratio_keeps_the_previous_exchange(strategy):
    field = LIMITS[strategy][0]
    # limits whose default-ratio target is a single two-event turn
    limit = {"max_turns": 3, "max_events": 6, "max_tokens": 40}[field]
    extra = (
        {"max_events_to_keep": 2, "overlap_size": 0}
        if strategy == "recursive_summarization"
        else {}
    )
    memory = ChatMemory(
        InMemoryStore(),
        MemoryConfig(compaction_strategy=strategy, **{field: limit}, **extra),
        summarizer=lambda p, e, u: "earlier: talk",
        token_counter=fixed_tokens,
    )
    for i in range(12):
        memory.add("c", turn(f"question number {i}", reply=f"answer number {i}"))
        users = [e.content for e in memory.window("c") if e.type.value == "user"]
        if i:
            assert users[-2:] == [f"question number {i - 1}", f"question number {i}"], (i, users)
    assert memory.stats("c").archived_events > 0  # it did compact along the way


def test_a_turn_window_of_three_alternates_between_two_and_three_turns():
    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(compaction_strategy="turn_window", max_turns=3)
    )
    sizes = []
    for i in range(9):
        memory.add("c", turn(f"q{i}"))
        sizes.append(memory.stats("c").turns)
    assert sizes == [1, 2, 3, 2, 3, 2, 3, 2, 3]


def test_large_windows_still_compact_to_the_ratio():
    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(compaction_strategy="turn_window", max_turns=10)
    )
    sizes = []
    for i in range(16):
        memory.add("c", turn(f"q{i}"))
        sizes.append(memory.stats("c").turns)
    assert sizes[9:] == [
        10,
        5,
        6,
        7,
        8,
        9,
        10,
    ]  # half of 10, as before: the cache-friendly hysteresis


def test_a_limit_too_small_for_two_turns_still_wins():
    memory = ChatMemory(
        InMemoryStore(),
        MemoryConfig(compaction_strategy="sliding_window", max_events=4),
        token_counter=fixed_tokens,
    )
    memory.add("c", turn("q0", tool=True))  # 4 events
    memory.add("c", turn("q1"))  # 6 > 4: the two turns do not fit; only the newest stays
    assert [e.content for e in memory.window("c")] == ["q1", "reply to q1"]
    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(compaction_strategy="turn_window", max_turns=1)
    )
    for i in range(3):
        memory.add("c", turn(f"q{i}"))
    assert memory.stats("c").turns == 1


def test_the_floor_takes_a_safe_cut_before_a_late_tool_result():
    # q1's call is answered in q2's turn: a cut at q2's start would split the pair, so keeping
    # at least two turns means cutting at q1's start (three turns stay), not at q3's (one)
    events = [
        *turn("q0"),
        Event.user("q1"),
        Event.tool_call("look", {}, call_id="late"),
        Event.assistant("waiting"),
    ]
    events += [
        Event.user("q2"),
        Event.tool_result("late", "found"),
        Event.assistant("done"),
        *turn("q3"),
    ]
    stored = [e.model_copy(update={"seq": i + 1}) for i, e in enumerate(events)]
    starts = turn_starts(stored)
    assert keep_min_turns(stored, required=starts[-1], within=1) == starts[1]
    assert (
        keep_min_turns(stored, required=starts[-1], within=starts[2] + 1) == starts[-1]
    )  # the limit wins


def test_a_langchain_agent_with_a_window_of_three_always_sees_the_exchange_before():
    pytest.importorskip("langchain.agents", reason="needs the langchain extra")
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from chat_memory.integrations.langchain import ChatMemoryMiddleware

    seen: list[list[str]] = []

    class Recorder(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "recorder"

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            seen.append([str(m.content) for m in messages if isinstance(m, HumanMessage)])
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(f"answer {len(seen)}"))]
            )

    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(compaction_strategy="turn_window", max_turns=3)
    )
    agent = create_agent(
        Recorder(), tools=[], middleware=[ChatMemoryMiddleware(memory, conversation_id="c")]
    )
    for i in range(10):
        agent.invoke({"messages": [HumanMessage(f"question {i}")]})
    assert seen[9][-2:] == ["question 8", "question 9"]  # the 10th model call (it was 1 message)
    assert all(len(asked) >= 2 for asked in seen[1:])
