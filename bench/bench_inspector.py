"""The inspector's conversations page over 10,000 conversations (chat_memory/inspector,
docs/inspector.md): time to first byte of the page against the store's own list call.

    .venv/bin/python bench/bench_inspector.py                 # 10,000 conversations, memory:// and SQLite
    .venv/bin/python bench/bench_inspector.py --count 2000    # quicker

One user's conversations are written (two events each) through ``memory.for_user``; then, in
interleaved rounds, the list call (``memory.conversations(page=N, page_size=50)``, the index
read the page makes) and the page itself over HTTP on loopback, from the request to its
status line (time to first byte: the page is rendered whole before it is sent, so this is its
full cost: the listing plus one ``stats()`` per row plus the HTML), for the first page and a
deep one. Prints a markdown table: medians and the ratio page / list call. Compare ratios,
not absolute times (a shared machine)."""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.inspector import serve

USER = "bench"
PAGE_SIZE = 50
BATCH = 500


def fill(store: Any, count: int) -> ChatMemory:
    memory = ChatMemory(store, MemoryConfig()).for_user(USER)
    for i in range(count):
        memory.add(f"conv-{i:05d}", [Event.user(f"hello {i}"), Event.assistant(f"hi {i}")])
    return memory


def ttfb(host: str, port: int, path: str) -> float:
    connection = http.client.HTTPConnection(host, port)
    started = time.perf_counter()
    connection.request("GET", path)
    response = connection.getresponse()  # returns once the status line and headers are read
    elapsed = time.perf_counter() - started
    response.read()
    connection.close()
    return elapsed


def measure(label: str, store: Any, count: int, rounds: int) -> list[str]:
    started = time.perf_counter()
    memory = fill(store, count)
    seeded = time.perf_counter() - started
    server = serve(store, MemoryConfig(), port=0).start()
    rows = []
    try:
        for page in (1, count // PAGE_SIZE):
            lists, pages = [], []
            path = f"/?user={USER}&page={page}"
            ttfb(server.host, server.port, path)  # warm
            for _ in range(rounds):
                t = time.perf_counter()
                found = memory.conversations(page=page, page_size=PAGE_SIZE)
                lists.append(time.perf_counter() - t)
                assert len(found) == PAGE_SIZE
                pages.append(ttfb(server.host, server.port, path))
            a, b = statistics.median(lists), statistics.median(pages)
            rows.append(
                f"| {label} | {count} | {page} | {a * 1000:.1f} | {b * 1000:.1f} | {b / a:.1f} |"
            )
    finally:
        server.stop()
    print(f"({label}: {count} conversations written in {seeded:.1f} s)", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = [
        "| store | conversations | page | list call (ms) | page TTFB (ms) | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows += measure("memory://", open_store("memory://"), args.count, args.rounds)
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{folder}/bench.db")
        try:
            rows += measure("sqlite", store, args.count, args.rounds)
        finally:
            store.close()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
