"""What one ``add()`` costs under strategy ``none`` at 30,000 events (a long conversation
that never compacts), on SQLite (a file) and on a real redis-server it starts itself:
milliseconds per add for a user message + reply, and for a tool call and for its result,
the median of a few adds. Run from the repository root:

    .venv/bin/python bench/bench_append_cost.py [--events 30000] [--adds 15]

With the indexed appends (SQL schema 4, the Redis id and tool-call indexes) these stay flat
as the conversation grows; before them each add read the whole window.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig  # noqa: E402
from chat_memory.backends.redis import RedisStore  # noqa: E402
from chat_memory.backends.sql import SQLStore  # noqa: E402
from tests.services.redis import start_redis  # noqa: E402


def history(n: int) -> list[Event]:
    """``n`` events in turns of user, tool call, tool result, assistant (tokens counted)."""
    events: list[Event] = []
    while len(events) < n:
        k = len(events)
        events += [
            Event.user(f"question {k}", tokens=2),
            Event.tool_call("lookup", {"k": k}, call_id=f"h-{k}", tokens=3),
            Event.tool_result(f"h-{k}", f"result {k}", name="lookup", tokens=2),
            Event.assistant(f"answer {k}", tokens=2),
        ]
    return events[:n]


def median_ms(adds: int, add: Callable[[int], Any]) -> float:
    times = []
    for i in range(adds):
        start = time.perf_counter()
        add(i)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(name: str, store: Any, events: int, adds: int) -> None:
    store.append("long", history(events))
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="none"), token_counter=lambda t: len(t.split()))
    turn = median_ms(adds, lambda i: memory.add("long", [Event.user(f"q{i}"), Event.assistant(f"a{i}")]))
    call = median_ms(adds, lambda i: memory.add("long", Event.tool_call("lookup", {"i": i}, call_id=f"b-{i}")))
    result = median_ms(adds, lambda i: memory.add("long", Event.tool_result(f"b-{i}", "done")))
    print(f"{name:8} {events:>7,} events: user+assistant {turn:8.1f} ms   tool call {call:8.1f} ms   tool result {result:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--adds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = SQLStore(f"sqlite:///{folder}/bench.db")
        measure("SQLite", store, args.events, args.adds)
        store.close()
    server = start_redis()
    try:
        store = RedisStore.from_url(server.url)
        measure("Redis", store, args.events, args.adds)
        store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
