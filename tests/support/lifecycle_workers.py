"""Worker functions of the multi-process lifecycle tests (spawned processes import them by
name): writers adding to their users' conversations while sweepers sweep the same store."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from chat_memory import ChatMemory, Event, MemoryConfig, open_store

#: The retention the sweepers run with; their clock is moved on by this much (no sleeping).
RETENTION_SECONDS = 3600


def lifecycle_writer(url: str, writer: int, rounds: int) -> int:
    """Add ``rounds`` events to each of ``user<writer>``'s conversations ``warm`` (seeded
    before the sweep's cutoff) and ``fresh``; returns how many adds it made."""
    store = open_store(url)
    try:
        user = ChatMemory(store).for_user(f"user{writer}", app="app")
        for r in range(rounds):
            for conversation in ("warm", "fresh"):
                user.add(conversation, Event.user(f"w{writer} r{r}"))
        return 2 * rounds
    finally:
        store.close()


def lifecycle_sweeper(url: str, cutoff: str, sweeps: int) -> tuple[int, int]:
    """Sweep the whole store ``sweeps`` times with the engine's clock at ``cutoff`` plus the
    retention (so everything last written before ``cutoff`` is idle); returns (conversations
    deleted, skipped)."""
    from chat_memory.lifecycle import decisions

    moment = datetime.fromisoformat(cutoff) + timedelta(seconds=RETENTION_SECONDS)
    clock = decisions.now
    # this worker process's sweep clock only, put back after (the pool outlives the test)
    decisions.now = lambda: moment
    store = open_store(url)
    try:
        memory = ChatMemory(store, MemoryConfig(retention_seconds=RETENTION_SECONDS))
        deleted = skipped = 0
        for _ in range(sweeps):
            report = memory.sweep()
            deleted += report.conversations
            skipped += report.skipped
        return deleted, skipped
    finally:
        decisions.now = clock
        store.close()


def writers_race_sweepers(memory: ChatMemory, url: str, pool: Any, processes: int) -> list[str]:
    """The scenario the stores' multi-process lifecycle tests share, run in the parent: seed
    idle conversations (three users' and a bare one, compacted so they own archived events)
    and each writer's ``warm`` one, take a cutoff just after the last seed, then run
    ``processes // 2`` :func:`lifecycle_writer` and as many :func:`lifecycle_sweeper` in
    ``pool`` at once. Asserts that every idle conversation was deleted exactly once and that
    no event written after the cutoff was lost; returns the idle conversations' keys, for the
    store's own check that nothing of them is left."""
    from chat_memory.lifecycle import Scope, scoped_key

    writers = sweepers = processes // 2
    rounds = 3
    store = memory.store
    idle: list[str] = []
    for i in range(6):
        user = memory.for_user(f"idle{i % 3}", app="app")
        user.add(f"idle-{i}", [Event.user("q"), Event.assistant("a")])
        user.add(f"idle-{i}", Event.user(f"idle words {i}"))
        idle.append(scoped_key(Scope(f"idle{i % 3}", "app"), f"idle-{i}"))
    memory.add("idle-bare", Event.user("idle words bare"))
    idle.append("idle-bare")
    for w in range(writers):
        memory.for_user(f"user{w}", app="app").add("warm", Event.user(f"seed {w}"))
    records = [store.conversation_record(k) for k in store.conversations()]
    cutoff = max(r.last_active_at for r in records if r) + timedelta(milliseconds=1)
    while datetime.now(timezone.utc) <= cutoff:  # writes from here on are after the cutoff
        time.sleep(0.001)
    jobs = [pool.submit(lifecycle_writer, url, w, rounds) for w in range(writers)]
    jobs += [pool.submit(lifecycle_sweeper, url, cutoff.isoformat(), 2) for _ in range(sweepers)]
    results = [job.result(timeout=240) for job in jobs]
    assert results[:writers] == [2 * rounds] * writers
    deleted = sum(d for d, _ in results[writers:])
    seeds_gone = 0
    for w in range(writers):
        user = memory.for_user(f"user{w}", app="app")
        written = [f"w{w} r{r}" for r in range(rounds)]
        assert [e.content for e in user.history("fresh")] == written
        warm = [e.content for e in user.history("warm")]
        assert warm in (written, [f"seed {w}", *written])
        seeds_gone += warm == written
    assert deleted == len(idle) + seeds_gone  # each deleted exactly once
    assert not set(store.conversations()) & set(idle)
    return idle
