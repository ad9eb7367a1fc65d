"""The fork property's parts, shared by the memory store's test (tests/engine/test_fork.py)
and the real stores' (tests/stores/test_redis_fork.py, test_sql_transfer.py,
test_s3_transfer.py): the strategies, random traffic with tool pairs, retractions, rewinds
and forced compactions, the model window and history recorded at every seq, and the checks
that a fork at each seq shows exactly them and that later writes stay on their side."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event

STRATEGIES: list[dict[str, Any]] = [
    {"compaction_strategy": "none"},
    {"compaction_strategy": "turn_window", "max_turns": 2},
    {"compaction_strategy": "sliding_window", "max_events": 4},
    {"compaction_strategy": "token_count", "max_tokens": 30},
    {
        "compaction_strategy": "recursive_summarization",
        "max_events": 5,
        "max_events_to_keep": 2,
        "overlap_size": 1,
    },
]


def summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return f"{previous or ''}|{','.join(str(e.seq) for e in events)}"


def turn(i: int, call: bool, system: bool) -> list[Event]:
    events = [Event.system(f"rule {i}")] if system else []
    events.append(Event.user(f"question {i}"))
    if call:
        c = Event.tool_call("lookup", {"q": i}, call_id=f"call-{i}")
        events += [c, Event.tool_result(f"call-{i}", f"result {i}")]
    return [*events, Event.assistant(f"answer {i}")]


ADD = st.tuples(st.just("add"), st.booleans(), st.integers(0, 5))
OPERATIONS = st.lists(
    st.one_of(
        ADD,
        ADD,
        ADD,
        st.tuples(st.just("retract"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("compact"), st.booleans(), st.just(0)),
    ),
    min_size=1,
    max_size=16,
)


def traffic(memory: ChatMemory, operations: list[tuple[str, Any, int]]) -> dict[int, Any]:
    """Run the operations on conversation "c"; the (model window, history) at each last seq
    (the latest state while that seq was the highest)."""
    seen: dict[int, Any] = {}
    for i, (kind, flag, n) in enumerate(operations):
        if kind == "add":
            memory.add("c", turn(i, call=flag, system=n == 0))
        elif kind == "retract":
            stored = memory.history("c")
            real = [e for e in stored if e.is_real]
            if real:
                memory.retract("c", [real[flag % len(real)].id])
        elif kind == "rewind":
            last = memory.store.load("c").last_seq
            memory.rewind("c", max(0, last - flag))
        else:
            memory.compact("c", force=flag)
        last_seq = memory.store.load("c").last_seq
        seen[last_seq] = (memory.model_window("c"), memory.history("c"))
    return seen


def check_forks(memory: ChatMemory, seen: dict[int, Any]) -> None:
    """A fork at every recorded seq returns its window and shows exactly the model window and
    history recorded then."""
    for seq, (window, history) in seen.items():
        if seq == 0:
            continue
        fork = f"fork-{seq}"
        assert memory.fork("c", fork, at=seq) == memory.window(fork)
        assert memory.model_window(fork) == window, seq
        assert memory.history(fork) == history, seq


async def check_forks_async(memory: AsyncChatMemory, seen: dict[int, Any]) -> None:
    """:func:`check_forks` through an AsyncChatMemory."""
    for seq, (window, history) in seen.items():
        if seq == 0:
            continue
        fork = f"fork-{seq}"
        await memory.fork("c", fork, at=seq)
        assert await memory.model_window(fork) == window, seq
        assert await memory.history(fork) == history, seq


def check_independent(memory: ChatMemory, seq: int) -> None:
    """After a fork at ``seq``, writes to either side never show in the other, and the fork
    goes on from ``seq + 1``."""
    if seq == 0:
        return
    memory.fork("c", "side", at=seq)
    original, side = memory.window("c"), memory.window("side")
    memory.add("side", [Event.user("only on the side"), Event.assistant("ok")])
    assert memory.window("c") == original
    assert memory.search("c", "only on the side").total == 0
    memory.add("c", [Event.user("only on the original"), Event.assistant("ok")])
    assert memory.search("side", "only on the original").total == 0
    assert [e.seq for e in memory.window("side")][-2:] == [seq + 1, seq + 2]
    assert side != memory.window("side")
