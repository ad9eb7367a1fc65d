"""Retention (docs/lifecycle.md): the ``retention_seconds`` setting, and ``sweep`` on memory://
in batches and from many threads at once, never deleting a conversation written to during it.
The cases every lifecycle store shares are in chat_memory/testing/lifecycle_conformance.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from chat_memory import ChatMemory, ConfigurationError, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.lifecycle import decisions


def test_retention_seconds_is_a_setting_with_a_camel_case_name():
    assert MemoryConfig().retention_seconds is None
    assert MemoryConfig(retentionSeconds=86400).retention_seconds == 86400
    assert MemoryConfig.from_mapping({"retentionSeconds": 60}).retention_seconds == 60
    for bad in (0, -5, 1.5, "week", True):
        with pytest.raises(ConfigurationError, match=r"Retention seconds \("):
            MemoryConfig(retention_seconds=bad)


def test_a_sweep_goes_through_more_idle_conversations_than_one_batch(monkeypatch):
    memory = ChatMemory(InMemoryStore(), {"retention_seconds": 60})
    count = decisions.BATCH * 2 + 7
    for i in range(count):
        memory.for_user(f"user-{i % 3}").add(f"c{i}", Event.user("x"))
    calls = []
    store = memory.store
    listing = store.idle_conversations

    def counted(*args):
        calls.append(args)
        return listing(*args)

    monkeypatch.setattr(store, "idle_conversations", counted)
    later = decisions.now() + timedelta(seconds=61)
    monkeypatch.setattr(decisions, "now", lambda: later)
    report = memory.sweep()
    assert report.conversations == count and report.skipped == 0
    assert len(calls) == 3 and all(limit == decisions.BATCH for *_, limit in calls)
    assert store.conversations() == []


def test_sweepers_and_writers_at_once_delete_only_what_stayed_idle(monkeypatch):
    """Eight threads: four sweep over and over while four keep writing to their own
    conversations; every idle conversation is deleted once, every written one is kept."""
    store = InMemoryStore()
    memory = ChatMemory(store, {"retention_seconds": 30})
    idle = [f"idle-{i}" for i in range(40)]
    active = [f"active-{i}" for i in range(4)]
    for cid in idle + active:
        memory.add(cid, Event.user("start"))
    cutoff_base = decisions.now() + timedelta(milliseconds=5)
    # from now on, "now" is 30 s after the setup: the setup's writes are all idle
    monkeypatch.setattr(decisions, "now", lambda: cutoff_base + timedelta(seconds=30))
    time.sleep(0.01)
    deleted, stop = [], threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            deleted.append(memory.sweep().conversations)

    def write(cid: str) -> None:
        for i in range(30):
            memory.add(cid, Event.user(f"write {i}"))

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    writers = [threading.Thread(target=write, args=(cid,)) for cid in active]
    for thread in threads + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in threads:
        thread.join()
    assert sum(deleted) + memory.sweep().conversations <= len(idle) + len(active)
    remaining = set(store.conversations())
    assert not remaining & set(idle)
    # a writer's conversation may have been swept before its first new write (then it starts
    # again from that write), never after: the newest write is always there
    for cid in active:
        assert cid in remaining and memory.history(cid)[-1].content == "write 29"
