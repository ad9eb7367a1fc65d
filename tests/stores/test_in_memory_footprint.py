"""What memory:// holds per event, counted (never timed): a long agent conversation, its
archive held packed (chat_memory/backends/packed.py), costs under 700 bytes an event of
Python allocations, and every read of it (history, search, finds, the window) returns the
events the store wrote, equal field for field, with the same ``model_fields_set``."""

from __future__ import annotations

import gc
import tracemalloc
import uuid

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import clear_parse_cache
from chat_memory.search import SearchQuery
from tests.support.helpers import fixed_tokens

TURN_WINDOW = MemoryConfig(compaction_strategy="turn_window", max_turns=10)


def agent_turn(memory: ChatMemory, cid: str, i: int) -> dict[int, Event]:
    """The benchmark's agent-loop turn (bench/turn_subjects.py): a question, the window read,
    a tool call, its result and the answer; returns the stored events the window showed."""
    call = f"c{uuid.uuid4().hex[:12]}"
    memory.add(cid, Event.user(f"Question {i}: where is order {4000 + i} and what of Bluefin?"))
    memory.window(cid)
    memory.add(
        cid,
        [
            Event.tool_call("get_order", {"order_id": 4000 + i}, call_id=call),
            Event.tool_result(call, f'{{"order": {4000 + i}, "status": "shipped"}}'),
            Event.assistant(f"Order {4000 + i} shipped with DHL; the Bluefin decision stands."),
        ],
    )
    return {e.seq or 0: e for e in memory.window(cid)}


def test_a_long_agent_conversation_holds_under_700_bytes_per_event():
    # 970 bytes an event when the archive held events whole (pydantic's 13-key __dict__ and
    # the object: 544 of them); about 560 packed. 1,600 events: the bench measures 20,000.
    store = InMemoryStore(max_archived_events=None)
    memory = ChatMemory(store, TURN_WINDOW, token_counter=fixed_tokens)
    for i in range(20):  # first-use caches and indexes: not the events' cost
        agent_turn(memory, "warm-up", i)
    turns = 400
    # Event.from_json's bounded cache (up to 2,048 hashes of envelopes seen) empty at both
    # ends: a sawtooth of up to 130 KB that is not the conversation's
    clear_parse_cache()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(turns):
            agent_turn(memory, "long", i)
        clear_parse_cache()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    events = len(memory.history("long"))
    assert events == 4 * turns
    assert held / events <= 700, f"{held / events:.0f} bytes per event"


def test_reads_of_the_packed_archive_return_the_events_the_store_wrote():
    store = InMemoryStore(max_archived_events=None)
    memory = ChatMemory(store, TURN_WINDOW, token_counter=fixed_tokens)
    shown: dict[int, Event] = {}
    for i in range(30):
        shown.update(agent_turn(memory, "c", i))
    history = memory.history("c")
    archived = [e for e in history if e.archived]
    assert len(archived) >= 60 and [e.seq for e in history] == sorted(shown)
    for event in history:
        # what the window showed, its archived flag set when the archive took it
        expected = shown[event.seq or 0]
        if event.archived and not expected.archived:
            expected = expected.model_copy(update={"archived": True})
        assert event == expected
        assert event.to_json() == expected.to_json()
        assert event.model_fields_set == expected.model_fields_set
    call = next(e for e in archived if e.tool_call_id is not None)
    pair = memory.store.find_tool_events("c", [call.tool_call_id or ""])
    assert pair == [e for e in history if e.tool_call_id == call.tool_call_id]
    assert all(e.archived for e in pair)
    found = store.search("c", SearchQuery.build("Question 2", page_size=50)).events
    assert len(found) == 11  # questions 2 and 20 to 29, most of them archived
    assert found == [e for e in history if "Question 2" in e.content]


def test_an_archive_read_returns_fresh_metadata_dicts_where_none_was_stored():
    store = InMemoryStore(max_archived_events=None)
    memory = ChatMemory(store, TURN_WINDOW, token_counter=fixed_tokens)
    for i in range(15):
        agent_turn(memory, "c", i)
    memory.add("c", Event.user("tagged", metadata={"source": "web"}))
    first, again = memory.history("c")[0], memory.history("c")[0]
    assert first.archived and first.metadata == {} and first.metadata is not again.metadata
    assert memory.history("c")[-1].metadata == {"source": "web"}
