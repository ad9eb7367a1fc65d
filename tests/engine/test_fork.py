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
from tests.support.forks import (
    OPERATIONS,
    STRATEGIES,
    check_forks,
    check_forks_async,
    check_independent,
    summarize,
    traffic,
    turn,
)
from tests.support.helpers import fixed_tokens


def _memory(config: dict[str, Any], store: InMemoryStore | None = None) -> ChatMemory:
    return ChatMemory(
        store or InMemoryStore(), MemoryConfig(**config), summarize, token_counter=fixed_tokens
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(STRATEGIES), operations=OPERATIONS)
@example(config=STRATEGIES[4], operations=[("add", False, 1)] * 8)  # a summary replaced 5 times
def test_a_fork_at_any_seq_shows_exactly_the_window_and_history_then(
    config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    memory = _memory(config)
    seen = traffic(memory, operations)
    check_forks(memory, seen)
    check_independent(memory, max(seen))
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


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(STRATEGIES[1:]), operations=OPERATIONS)
def test_an_async_fork_at_any_seq_shows_exactly_the_window_then(
    config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    store = InMemoryStore()
    seen = traffic(_memory(config, store), operations)

    async def check() -> None:
        memory = AsyncChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens)
        try:
            await check_forks_async(memory, seen)
        finally:
            await memory.aclose()

    asyncio.run(check())


def test_fork_now_copies_everything_and_continues_the_seqs() -> None:
    memory = _memory(STRATEGIES[4])
    for i in range(6):
        memory.add("c", turn(i, call=i == 2, system=i == 0))
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
    memory.add("c", turn(1, call=False, system=False))
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
        memory.add("c", turn(i, call=False, system=False))
    with pytest.raises(InvalidInputError, match=r"at \(4\) is too far back.*max_archived_events"):
        memory.fork("c", "f", at=4)
    memory.fork("c", "f", at=10)  # its window (turns 4 and 5) is still stored
    assert [e.seq for e in memory.window("f")] == [7, 8, 9, 10]


def test_a_pin_in_force_then_but_dropped_since_refuses_the_fork() -> None:
    memory = _memory(STRATEGIES[1], InMemoryStore(max_archived_events=2))
    memory.add("c", [Event.system("old rule"), *turn(1, call=False, system=False)])  # 1-3
    memory.add("c", turn(2, call=False, system=False))  # 4-5
    memory.add("c", turn(3, call=False, system=False))  # 6-7: turn 1 archived (through 3)
    memory.add("c", [Event.system("new rule"), *turn(4, call=False, system=False)])  # 8-10
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
        memory.add("c", turn(i, call=False, system=False))
    dump = store.dump("c")
    assert dump is not None
    store.restore(replace(dump, conversation_id="legacy", timeline_from=6))
    with pytest.raises(InvalidInputError, match=r"at \(5\) is before.*from seq 6"):
        memory.fork("legacy", "f", at=5)
    memory.fork("legacy", "f", at=6)
    assert memory.window("f") == memory.fork("c", "g", at=6)
    legacy = store.dump("legacy")
    assert legacy is not None and legacy.timeline_from == 6
