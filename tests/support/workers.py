"""Code run in child processes by the multi-process tests (importable, for the spawn start method)."""

from __future__ import annotations

from chat_memory import ChatMemory, Event, MemoryConfig, open_store


def append_turns(
    url: str, conversation_id: str, writer: int, turns: int, strategy: str = "turn_window"
) -> int:
    """Append ``turns`` two-event turns to one conversation; returns how many were added."""
    store = open_store(url)
    try:
        memory = ChatMemory(
            store, MemoryConfig(compaction_strategy=strategy, max_turns=3, max_events=6)
        )
        for i in range(turns):
            memory.add(
                conversation_id, [Event.user(f"w{writer}-t{i}"), Event.assistant(f"w{writer}-r{i}")]
            )
        return turns
    finally:
        store.close()


def edit_memory_file(url: str, namespace: str, writer: int, edits: int) -> int:
    """Insert ``edits`` lines of its own into one shared memory file through the memory tool,
    each a read-modify-write that another writer may race; returns how many succeeded."""
    from chat_memory.longterm import MemoryTool, long_term_memory

    store = open_store(url)
    try:
        tool = MemoryTool(long_term_memory(store, namespace))
        done = 0
        for i in range(edits):
            out = tool.run(
                {
                    "command": "insert",
                    "path": "/memories/shared.md",
                    "insert_line": 1,
                    "insert_text": f"w{writer}-e{i}",
                }
            )
            assert not out.is_error, out.text
            done += 1
        return done
    finally:
        store.close()


def s3_writer(url: str, writer: int, adds: int) -> int:
    """Add ``adds`` question/answer turns to the conversation ``shared`` (turn window of 3,
    the test suite's fixed token counter); returns how many were added."""
    from tests.support.helpers import fixed_tokens

    store = open_store(url)
    try:
        memory = ChatMemory(
            store,
            MemoryConfig(compaction_strategy="turn_window", max_turns=3),
            token_counter=fixed_tokens,
        )
        for i in range(adds):
            memory.add(
                "shared", [Event.user(f"q {writer} {i}"), Event.assistant(f"a {writer} {i}")]
            )
        return adds
    finally:
        store.close()
