"""Several processes writing to one conversation at full speed, on every shared backend."""

from __future__ import annotations

import pytest

from chat_memory import ChatMemory, EventType, MemoryConfig, open_store
from chat_memory.events import split_turns
from tests.conftest import WRITER_PROCESSES as WRITERS
from tests.support.workers import append_turns

TURNS = 25


@pytest.mark.slow
@pytest.mark.parametrize(
    "strategy", ["turn_window", "sliding_window", "none"]
)  # none: the lean append
def test_eight_processes_lose_nothing(store_url, strategy, writer_processes):
    done = list(
        writer_processes.map(
            append_turns,
            [store_url] * WRITERS,
            ["shared"] * WRITERS,
            range(WRITERS),
            [TURNS] * WRITERS,
            [strategy] * WRITERS,
        )
    )
    assert done == [TURNS] * WRITERS

    store = open_store(store_url)
    try:
        memory = ChatMemory(
            store, MemoryConfig(compaction_strategy=strategy, max_turns=3, max_events=6)
        )
        history = memory.history("shared")
        assert [e.seq for e in history] == list(range(1, len(history) + 1))
        users = [e for e in history if e.type is EventType.USER]
        expected = {f"w{w}-t{i}" for w in range(WRITERS) for i in range(TURNS)}
        assert len(users) == len(expected) and {e.content for e in users} == expected
        by_seq = {e.seq: e for e in history}
        for user in users:  # each add() landed contiguously
            assert by_seq[user.seq + 1].content == user.content.replace("-t", "-r")
        # per writer, its turns are in its own order
        for w in range(WRITERS):
            mine = [int(e.content.split("-t")[1]) for e in users if e.content.startswith(f"w{w}-")]
            assert mine == sorted(mine)
        window = memory.window("shared")
        active = [e for e in window if e.is_real]
        assert window and active[0].type is EventType.USER
        if strategy == "turn_window":
            assert len(split_turns(active)) <= 3
        elif strategy == "sliding_window":
            assert len(active) <= 6
        assert memory.stats("shared").archived_events == len(history) - len(active)
    finally:
        store.close()
