"""Worker functions of the multi-process lifecycle tests (spawned processes import them by
name): writers adding to their users' conversations while sweepers sweep the same store."""

from __future__ import annotations

from datetime import datetime, timedelta

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
