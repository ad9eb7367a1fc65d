"""Code run in child processes by the multi-process tests (importable, for the spawn start method)."""

from __future__ import annotations

from chat_memory import ChatMemory, Event, MemoryConfig, open_store


def append_turns(url: str, conversation_id: str, writer: int, turns: int, strategy: str = "turn_window") -> int:
    """Append ``turns`` two-event turns to one conversation; returns how many were added."""
    store = open_store(url)
    try:
        memory = ChatMemory(store, MemoryConfig(compaction_strategy=strategy, max_turns=3, max_events=6))
        for i in range(turns):
            memory.add(conversation_id, [Event.user(f"w{writer}-t{i}"), Event.assistant(f"w{writer}-r{i}")])
        return turns
    finally:
        store.close()
