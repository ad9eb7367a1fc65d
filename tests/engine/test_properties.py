"""Property-based tests: random histories through every strategy keep the invariants."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, EventType, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import Window, split_turns
from chat_memory.strategies import safe_cuts, strategy_for
from tests.support.helpers import check_cut, fixed_tokens

TEXT = st.text(alphabet=st.sampled_from("abcdefghij klmnop%_*ÄßΣ🙂"), min_size=0, max_size=30)


@st.composite
def conversations(draw):
    """A list of add() batches: turns of a user message, tool calls whose results may come in
    the same or the next batch (always before the next user message), and replies."""
    batches: list[list[Event]] = []
    for _ in range(draw(st.integers(1, 14))):
        batch = [Event.user(draw(TEXT))]
        for _ in range(draw(st.integers(0, 2))):
            call = Event.tool_call(
                draw(st.sampled_from(["search", "get_order"])), {"q": draw(TEXT)}
            )
            result = Event.tool_result(call.tool_call_id, draw(TEXT), is_error=draw(st.booleans()))
            if draw(st.booleans()):
                batch += [call, result]
            else:
                batch.append(call)
                batches.append(batch)
                batch = [result]
        if draw(st.booleans()):
            batch.append(Event.assistant(draw(TEXT)))
        if draw(st.integers(0, 9)) == 0:
            batch.append(Event.system(draw(TEXT)))
        batches.append(batch)
    return batches


@st.composite
def configs(draw):
    strategy = draw(
        st.sampled_from(
            ["none", "sliding_window", "turn_window", "token_count", "recursive_summarization"]
        )
    )
    keep = draw(st.integers(1, 8))
    return MemoryConfig(
        compaction_strategy=strategy,
        max_events=draw(st.integers(keep + 1, 14)),
        max_turns=draw(st.integers(1, 5)),
        max_tokens=draw(st.integers(10, 120)),
        max_events_to_keep=keep,
        overlap_size=draw(st.integers(0, keep - 1)),
        max_archived_events=100_000,
    )


def summarize(previous, events, upcoming):
    return f"{previous or ''}|{len(events)}"


def check_invariants(
    memory: ChatMemory, cid: str, config: MemoryConfig, added: list[Event]
) -> None:
    window = memory.window(cid)
    active = [e for e in window if e.is_real]
    history = memory.history(cid)

    # nothing lost, nothing duplicated, order kept, seq gap-free
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    stored = [e for e in history if e.type is not EventType.SUMMARY]
    assert [e.id for e in stored] == [e.id for e in added]
    assert [e.content for e in stored] == [e.content for e in added]

    # window = pinned, then at most one summary, then active events; archived ones are not in it
    kinds = [e.type for e in window]
    n_pinned = kinds.count(EventType.SYSTEM)
    assert all(k is EventType.SYSTEM for k in kinds[:n_pinned])
    assert kinds.count(EventType.SUMMARY) <= 1
    assert not any(e.archived for e in window)
    archived_real = [e for e in history if e.archived and e.is_real]
    assert [e.id for e in archived_real + active] == [e.id for e in added if e.is_real]

    # no orphaned tool result; the window starts at a turn start
    seen_calls = set()
    for e in active:
        if e.type is EventType.TOOL_CALL:
            seen_calls.add(e.tool_call_id)
        if e.type is EventType.TOOL_RESULT:
            assert e.tool_call_id in seen_calls, "orphaned tool result in the window"
    if archived_real:
        assert active[0].type is EventType.USER

    # limits hold unless only the newest turn is left
    turns = split_turns(active)
    if len(turns) > 1:
        strategy = config.compaction_strategy
        if strategy == "sliding_window":
            assert len(active) <= config.max_events
        elif strategy == "turn_window":
            assert len(turns) <= config.max_turns
        elif strategy == "token_count":
            assert sum(e.tokens or 0 for e in window) <= config.max_tokens
        elif strategy == "recursive_summarization":
            assert len(active) <= config.max_events


def run(memory: ChatMemory, cid: str, config: MemoryConfig, batches: list[list[Event]]) -> None:
    added: list[Event] = []
    for batch in batches:
        memory.add(cid, batch)
        added += batch
        check_invariants(memory, cid, config, added)


@settings(max_examples=300, deadline=None)
@given(config=configs(), batches=conversations())
def test_invariants_on_the_memory_store(config, batches):
    memory = ChatMemory(
        InMemoryStore(max_archived_events=None),
        config,
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    run(memory, "c", config, batches)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configs(), batches=conversations())
def test_invariants_on_every_store(store, config, batches):
    memory = ChatMemory(store, config, summarizer=summarize, token_counter=fixed_tokens)
    run(memory, f"prop-{uuid.uuid4().hex}", config, batches)


@st.composite
def tangled_windows(draw):
    """Active events where tool results may come turns after their call (a user message in
    between): cuts must still never separate a pair."""
    events: list[Event] = []
    pending: list[Event] = []
    for _ in range(draw(st.integers(1, 25))):
        choice = draw(st.integers(0, 3))
        if choice == 0 or not events:
            events.append(Event.user("u"))
        elif choice == 1:
            call = Event.tool_call("t", {})
            events.append(call)
            pending.append(call)
        elif choice == 2 and pending:
            call = pending.pop(draw(st.integers(0, len(pending) - 1)))
            events.append(Event.tool_result(call.tool_call_id, "r"))
        else:
            events.append(Event.assistant("a"))
    return [e.stored(seq=i, tokens=5) for i, e in enumerate(events, start=1)]


@settings(max_examples=400, deadline=None)
@given(active=tangled_windows(), config=configs())
def test_no_safe_cut_separates_a_tool_pair_and_a_strategy_only_as_the_bound_s_last_resort(
    active, config
):
    strategy = strategy_for(config)
    for index in safe_cuts(active):
        before = {e.tool_call_id for e in active[:index] if e.type is EventType.TOOL_CALL}
        after_results = {e.tool_call_id for e in active[index:] if e.type is EventType.TOOL_RESULT}
        assert not before & after_results
        assert active[index].type is EventType.USER
        assert index <= max(i for i, e in enumerate(active) if e.type is EventType.USER or i == 0)
    cut = strategy.plan(Window(active=tuple(active)))
    if cut is not None:
        check_cut(active, cut.index, strategy)


@pytest.mark.parametrize(
    "strategy", ["sliding_window", "turn_window", "token_count", "recursive_summarization"]
)
def test_a_single_huge_turn_is_kept_whole(strategy):
    config = MemoryConfig(
        compaction_strategy=strategy,
        max_events=3,
        max_events_to_keep=2,
        overlap_size=0,
        max_turns=1,
        max_tokens=10,
    )
    memory = ChatMemory(InMemoryStore(), config, summarizer=summarize, token_counter=fixed_tokens)
    memory.add("c", [Event.user("go")] + [Event.assistant("word " * 20) for _ in range(10)])
    assert len(memory.window("c")) == 11 and memory.stats("c").archived_events == 0
