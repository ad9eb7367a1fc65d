"""What one ``add()`` costs under strategy ``none`` at 30,000 events (a long conversation
that never compacts), on SQLite (a file), on a real redis-server and on moto's S3 server
over HTTP (both started here):
milliseconds per add for a user message + reply, and for a tool call and for its result,
the median of a few adds. Run from the repository root:

    .venv/bin/python bench/bench_append_cost.py [--events 30000] [--adds 15] [--only s3]

With the indexed appends (SQL schema 4, the Redis id and tool-call indexes, the S3 window
segments with their Bloom filters) these stay flat as the conversation grows; before them
each add read (on S3: rewrote) the whole window. For S3 it also prints the requests and the
bytes sent and received per add (moto runs in this process: read those, not only the ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.s3 import S3Store
from chat_memory.backends.sql import SQLStore
from tests.services.redis import start_redis
from tests.services.s3 import DUMMY_AWS_ENV, start_moto_server


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


class Wire:
    """Requests and body bytes of a boto3 client."""

    def __init__(self, client: Any) -> None:
        self.requests = self.bytes = 0
        client.meta.events.register_first("before-send.s3", self._sent)
        client.meta.events.register("after-call.s3", self._answered)

    def _sent(self, request: Any, **_: Any) -> None:
        self.requests += 1
        self.bytes += int(request.headers.get("Content-Length") or 0)

    def _answered(self, http_response: Any = None, **_: Any) -> None:
        if http_response is not None:
            self.bytes += int(http_response.headers.get("Content-Length") or 0)


def measure(name: str, store: Any, events: int, adds: int) -> None:
    store.append("long", history(events))
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="none"), token_counter=lambda t: len(t.split())
    )
    wire = Wire(store.client) if name == "S3" else None
    columns = []
    for label, add in (
        (
            "user+assistant",
            lambda i: memory.add("long", [Event.user(f"q{i}"), Event.assistant(f"a{i}")]),
        ),
        (
            "tool call",
            lambda i: memory.add("long", Event.tool_call("lookup", {"i": i}, call_id=f"b-{i}")),
        ),
        ("tool result", lambda i: memory.add("long", Event.tool_result(f"b-{i}", "done"))),
    ):
        if wire is not None:
            wire.requests = wire.bytes = 0
        ms = median_ms(adds, add)
        traffic = (
            f" ({wire.requests / adds:.1f} req, {wire.bytes / adds / 1024:.0f} KiB)"
            if wire is not None
            else ""
        )
        columns.append(f"{label} {ms:8.1f} ms{traffic}")
    print(f"{name:8} {events:>7,} events: " + "   ".join(columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--adds", type=int, default=15)
    parser.add_argument("--only", choices=("sqlite", "redis", "s3"), help="measure one store")
    args = parser.parse_args()
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            store = SQLStore(f"sqlite:///{folder}/bench.db")
            measure("SQLite", store, args.events, args.adds)
            store.close()
    if args.only in (None, "redis"):
        server = start_redis()
        try:
            store = RedisStore.from_url(server.url)
            measure("Redis", store, args.events, args.adds)
            store.close()
        finally:
            server.stop()
    if args.only in (None, "s3"):
        os.environ.update(DUMMY_AWS_ENV)
        moto, endpoint = start_moto_server()
        try:
            store = S3Store.from_url(
                f"s3://bench-append/cost?endpoint_url={endpoint}&region=us-east-1"
            )
            measure("S3", store, args.events, args.adds)
            store.close()
        finally:
            moto.stop()


if __name__ == "__main__":
    main()
