"""A seeded store for the inspector's tests, its benchmark and its screenshots: a support
conversation with tool calls, summaries (a scripted summarizer), compactions, a retraction, a
summarizer failure on a second conversation, a fork that parts from the first, and a user's
long-term notes with three versions. Events are added a batch of turns at a time (one
``add()`` each), so 500 turns take a few seconds."""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from typing import Any

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.longterm import long_term_memory

USER = "alice"
APP = "support"
CONVERSATION = "order-4512"
FORK = "order-4512-retry"
FAILING = "order-9001"
NAMESPACE = "notes"
#: the rendering settings the inspector shares with the seeding memory
RENDER = {
    "compress_tool_results": True,
    "min_tool_result_compress_tokens": 60,
    "keep_recent_tool_results": 1,
    "max_tokens": 600,
}
with warnings.catch_warnings():
    # max_tokens is read by compress_tool_results (its pressure mark) here, not by the strategy
    warnings.simplefilter("ignore", UserWarning)
    CONFIG = MemoryConfig(
        compaction_strategy="recursive_summarization",
        max_events=40,
        max_events_to_keep=16,
        overlap_size=2,
        **RENDER,
    )


def summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    """A scripted summarizer: names the seqs it folded in (enough for the pages to show)."""
    seqs = [e.seq for e in events if e.seq]
    before = f"{previous} " if previous else ""
    return f"{before}[turns through seq {max(seqs, default=0)}: order 4512 discussed]"


def failing(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    raise RuntimeError("summarizer unavailable (HTTP 529)")


def turn(n: int) -> list[Event]:
    """Turn ``n``: a question and an answer; every third turn a tool call and its (large) result."""
    events = [Event.user(f"Question {n}: where is order 4512 now? (turn {n})")]
    if n % 3 == 0:
        call = f"call-{n}"
        events.append(Event.tool_call("get_order", {"id": 4512, "turn": n}, call_id=call))
        body = json.dumps(
            {"status": "shipped", "turn": n, "lines": [f"line {i}" for i in range(60)]}
        )
        events.append(Event.tool_result(call, body))
    events.append(Event.assistant(f"Answer {n}: order 4512 shipped; tracking BLUEFIN-{n}."))
    return events


@dataclass(frozen=True)
class Seeded:
    """What was seeded: the store, alice's memory on it and the ids."""

    store: Any
    memory: ChatMemory
    conversation: str = CONVERSATION
    fork: str = FORK
    failing: str = FAILING
    retracted_seq: int = 0


def seed(store: Any, turns: int = 24, batch: int = 12) -> Seeded:
    """Seed ``store`` (see the module docstring) under user ``alice`` of app ``support``."""
    memory = ChatMemory(store, CONFIG, summarizer=summarize).for_user(USER, APP)
    memory.add(CONVERSATION, Event.system("You are the support agent for ACME orders."))
    for start in range(1, turns + 1, batch):
        events = [e for n in range(start, min(start + batch, turns + 1)) for e in turn(n)]
        memory.add(CONVERSATION, events)
    # take the newest answer back, as an "edit and resend" would
    last = memory.window(CONVERSATION)[-1]
    memory.retract(CONVERSATION, [last.id])
    memory.add(CONVERSATION, Event.assistant("Answer (edited): order 4512 is out for delivery."))
    fork_at = memory.history(CONVERSATION)[-3].seq
    memory.fork(CONVERSATION, FORK, at=fork_at)
    memory.add(
        FORK, [Event.user("Cancel it instead, please."), Event.assistant("Cancelled order 4512.")]
    )
    broken = ChatMemory(
        store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=1,
        ),
        summarizer=failing,
    ).for_user(USER, APP)
    chat_log = logging.getLogger("chat_memory")
    level = chat_log.level
    chat_log.setLevel(logging.CRITICAL)  # the failure is expected: stats() and the pages show it
    try:
        broken.add(FAILING, [e for n in range(1, 4) for e in turn(n)])
    finally:
        chat_log.setLevel(level)
    notes = long_term_memory(store, NAMESPACE, user=USER, app=APP)
    notes.create("/memories/customer.md", "Prefers email.\n")
    notes.str_replace(
        "/memories/customer.md", "Prefers email.", "Prefers email.\nOrder 4512: shipped."
    )
    notes.str_replace("/memories/customer.md", "shipped", "delivered")
    return Seeded(store, memory, retracted_seq=last.seq or 0)
