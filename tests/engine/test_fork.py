"""``memory.fork(conv, new_conv, at=None)``: the fork's window is exactly the original's right
after seq ``at`` (summary, archive flags and retractions as they were), its history the
history then, and later writes to either side never show in the other; sync and async, on
the memory store (other stores plug into chat_memory.testing.transfer_conformance)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import ConfigurationError, InvalidInputError
from chat_memory.transfer import export_store, import_store
from tests.support.helpers import fixed_tokens

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


def _memory(config: dict[str, Any], store: InMemoryStore | None = None) -> ChatMemory:
    return ChatMemory(
        store or InMemoryStore(), MemoryConfig(**config), summarize, token_counter=fixed_tokens
    )


def _turn(i: int, call: bool, system: bool) -> list[Event]:
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


def _traffic(memory: ChatMemory, operations: list[tuple[str, Any, int]]) -> dict[int, Any]:
    """Run the operations on conversation "c"; the (model window, history) at each last seq
    (the latest state while that seq was the highest)."""
    seen: dict[int, Any] = {}
    for i, (kind, flag, n) in enumerate(operations):
        if kind == "add":
            memory.add("c", _turn(i, call=flag, system=n == 0))
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(STRATEGIES), operations=OPERATIONS)
@example(config=STRATEGIES[4], operations=[("add", False, 1)] * 8)  # a summary replaced 5 times
def test_a_fork_at_any_seq_shows_exactly_the_window_and_history_then(
    config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    memory = _memory(config)
    seen = _traffic(memory, operations)
    for seq, (window, history) in seen.items():
        if seq == 0:
            continue
        fork = f"fork-{seq}"
        assert memory.fork("c", fork, at=seq) == memory.window(fork)
        assert memory.model_window(fork) == window, seq
        assert memory.history(fork) == history, seq
    _check_independent(memory, max(seen))
    _check_round_trip(memory)


def _check_round_trip(memory: ChatMemory) -> None:
    """Every conversation, through a JSON Lines export and import into a new store, is the
    same conversation: history with retracted events, window, records, checksum."""
    out = io.StringIO()
    exported = export_store(memory.store, out)
    target = InMemoryStore()
    imported = import_store(target, io.StringIO(out.getvalue()))
    assert imported.checksums == exported.checksums
    moved = ChatMemory(target, memory.config, summarize, token_counter=fixed_tokens)
    for cid in memory.store.conversations():
        assert moved.history(cid, include_retracted=True) == memory.history(
            cid, include_retracted=True
        )
        assert moved.model_window(cid) == memory.model_window(cid)
        assert moved.compactions(cid) == memory.compactions(cid)


def _check_independent(memory: ChatMemory, seq: int) -> None:
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


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(STRATEGIES[1:]), operations=OPERATIONS)
def test_an_async_fork_at_any_seq_shows_exactly_the_window_then(
    config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    store = InMemoryStore()
    seen = _traffic(_memory(config, store), operations)

    async def check() -> None:
        memory = AsyncChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens)
        try:
            for seq, (window, history) in seen.items():
                if seq:
                    await memory.fork("c", f"fork-{seq}", at=seq)
                    assert await memory.model_window(f"fork-{seq}") == window, seq
                    assert await memory.history(f"fork-{seq}") == history, seq
        finally:
            await memory.aclose()

    asyncio.run(check())


def test_fork_now_copies_everything_and_continues_the_seqs() -> None:
    memory = _memory(STRATEGIES[4])
    for i in range(6):
        memory.add("c", _turn(i, call=i == 2, system=i == 0))
    taken = memory.retract("c", [memory.window("c")[-1].id])
    window = memory.fork("c", "f")
    assert window == memory.window("c")
    assert memory.history("f", include_retracted=True) == memory.history(
        "c", include_retracted=True
    )
    assert memory.compactions("f") == memory.compactions("c") and memory.compactions("f")
    assert memory.store.load("f").last_seq == memory.store.load("c").last_seq
    assert taken and all(e.retracted for e in taken)


def test_fork_refuses_unknown_source_existing_target_and_out_of_range_seq() -> None:
    memory = _memory(STRATEGIES[1])
    memory.add("c", _turn(1, call=False, system=False))
    memory.add("taken", [Event.user("hi")])
    with pytest.raises(InvalidInputError, match="'nope'"):
        memory.fork("nope", "f")
    with pytest.raises(InvalidInputError, match="'taken'"):
        memory.fork("c", "taken")
    with pytest.raises(InvalidInputError, match=r"at \(3\).*0 to 2"):
        memory.fork("c", "f", at=3)
    with pytest.raises(InvalidInputError, match=r"at \(-1\)"):
        memory.fork("c", "f", at=-1)
    with pytest.raises(InvalidInputError, match="must differ"):
        memory.fork("c", "c")
    assert memory.store.conversations() == ["c", "taken"]


def test_fork_refuses_a_seq_whose_window_the_archive_cap_deleted() -> None:
    memory = _memory(STRATEGIES[1], InMemoryStore(max_archived_events=2))
    for i in range(6):
        memory.add("c", _turn(i, call=False, system=False))
    with pytest.raises(InvalidInputError, match=r"at \(4\) is too far back.*max_archived_events"):
        memory.fork("c", "f", at=4)
    memory.fork("c", "f", at=10)  # its window (turns 4 and 5) is still stored
    assert [e.seq for e in memory.window("f")] == [7, 8, 9, 10]


def test_a_pin_in_force_then_but_dropped_since_refuses_the_fork() -> None:
    memory = _memory(STRATEGIES[1], InMemoryStore(max_archived_events=2))
    memory.add("c", [Event.system("old rule"), *_turn(1, call=False, system=False)])  # 1-3
    memory.add("c", _turn(2, call=False, system=False))  # 4-5
    memory.add("c", _turn(3, call=False, system=False))  # 6-7: turn 1 archived (through 3)
    memory.add("c", [Event.system("new rule"), *_turn(4, call=False, system=False)])  # 8-10
    # the cap deleted seqs 1-3: at seq 7 only the pin (seq 1) was still in the window
    assert [e.seq for e in memory.history("c")][0] == 4
    with pytest.raises(InvalidInputError, match=r"at \(7\) is too far back.*seq 1\)"):
        memory.fork("c", "f", at=7)
    assert [e.content for e in memory.fork("c", "f", at=10)][0] == "new rule"


def test_a_store_without_the_ability_is_refused_naming_it() -> None:
    from chat_memory import ThreadedStore
    from chat_memory.testing.blocking import blocking_store

    # every store of the package forks: a sync store over an async one has the protocol only
    store = blocking_store(ThreadedStore(InMemoryStore()))
    memory = ChatMemory(store, MemoryConfig(), token_counter=fixed_tokens)
    memory.add("c", [Event.user("hi")])
    with pytest.raises(ConfigurationError, match="Forks ability"):
        memory.fork("c", "f")


def test_a_seq_before_the_timeline_was_kept_is_refused_and_survives_a_copy() -> None:
    from dataclasses import replace

    store = InMemoryStore()
    memory = _memory(STRATEGIES[1], store)
    for i in range(4):
        memory.add("c", _turn(i, call=False, system=False))
    dump = store.dump("c")
    assert dump is not None
    store.restore(replace(dump, conversation_id="legacy", timeline_from=6))
    with pytest.raises(InvalidInputError, match=r"at \(5\) is before.*from seq 6"):
        memory.fork("legacy", "f", at=5)
    memory.fork("legacy", "f", at=6)
    assert memory.window("f") == memory.fork("c", "g", at=6)
    legacy = store.dump("legacy")
    assert legacy is not None and legacy.timeline_from == 6
