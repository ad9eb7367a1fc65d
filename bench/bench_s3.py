"""S3 store benchmark against moto's S3 server over real HTTP (started here, on loopback).

Prints three tables:
1. per-turn cost (requests and bytes sent per ``add()``, with compaction) at 200 and 4000
   stored events, with the default archive cap and unbounded; goal: ratio ~1 (flat);
2. retries when 8 processes append to one conversation at full speed;
3. search latency over a full archive (1000 archived events) relative to reading the window.

Timings on this kind of machine are noisy: read the ratios, not the absolute numbers.

    .venv/bin/python bench/bench_s3.py [--turns 32] [--writer-turns 20]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.s3 import S3Store
from chat_memory.search import SearchQuery

os.environ.update(
    AWS_ACCESS_KEY_ID="bench",
    AWS_SECRET_ACCESS_KEY="bench",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_CONFIG_FILE=os.devnull,
    AWS_SHARED_CREDENTIALS_FILE=os.devnull,
)
TEXT = "lorem ipsum dolor sit amet " * 4


def words(text: str) -> int:
    return len(text.split())


def turn(label: str) -> list[Event]:
    return [Event.user(f"{label} {TEXT}"), Event.assistant(f"reply to {label} {TEXT}")]


class Traffic:
    """Counts requests, request-body bytes and 412 answers of one boto3 client."""

    def __init__(self, client) -> None:
        self.requests = self.bytes = self.conflicts = 0
        client.meta.events.register_first("before-send.s3", self._sent)
        client.meta.events.register("after-call.s3", self._answered)
        client.meta.events.register("after-call-error.s3", self._answered)

    def _sent(self, request, **_) -> None:
        self.requests += 1
        self.bytes += int(request.headers.get("Content-Length") or 0)

    def _answered(self, http_response=None, exception=None, **_) -> None:
        status = getattr(http_response, "status_code", None)
        if status == 412:
            self.conflicts += 1


def start_server() -> tuple[object, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.services.s3 import start_moto_server

    return start_moto_server()


def url(endpoint: str, **options: object) -> str:
    query = "&".join(
        [f"endpoint_url={endpoint}", "region=us-east-1", *(f"{k}={v}" for k, v in options.items())]
    )
    return f"s3://chat-memory-bench/{uuid.uuid4().hex[:10]}?{query}"


# -- 1. per-turn cost ----------------------------------------------------------------------


def per_turn_cost(endpoint: str, stored: int, turns: int, cap: str) -> dict[str, float]:
    store = S3Store.from_url(url(endpoint, max_archived_events=cap))
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=3), token_counter=words
    )
    seeded = 0
    while seeded < stored:
        memory.add("c", [e for i in range(100) for e in turn(f"seed {seeded + i}")])
        seeded += 200
    traffic = Traffic(store.client)
    started = time.perf_counter()
    for i in range(turns):
        memory.add("c", turn(f"question {i}"))
    elapsed = time.perf_counter() - started
    head = store.client.get_object(Bucket=store.bucket, Key=store.layout.head("c"))["ContentLength"]
    archived = store.load("c").archived_count
    store.close()
    return {
        "requests": traffic.requests / turns,
        "kib": traffic.bytes / turns / 1024,
        "head_kib": head / 1024,
        "ms": elapsed / turns * 1000,
        "archived": archived,
    }


# -- 2. contention -------------------------------------------------------------------------


def contending_writer(store_url: str, writer: int, turns: int) -> dict[str, float]:
    store = S3Store.from_url(store_url)
    traffic = Traffic(store.client)
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=3), token_counter=words
    )
    started = time.perf_counter()
    for i in range(turns):
        memory.add("shared", turn(f"w{writer} t{i}"))
    elapsed = time.perf_counter() - started
    store.close()
    return {"requests": traffic.requests, "conflicts": traffic.conflicts, "seconds": elapsed}


def contention(endpoint: str, writers: int, turns: int) -> dict[str, float]:
    store_url = url(endpoint)
    context = multiprocessing.get_context("spawn")
    with context.Pool(writers) as pool:
        results = pool.starmap(contending_writer, [(store_url, w, turns) for w in range(writers)])
    store = S3Store.from_url(store_url)
    history = store.history("shared")
    store.close()
    assert [e.seq for e in history] == list(range(1, 2 * writers * turns + 1)), (
        "lost or duplicated events"
    )
    adds = writers * turns
    wall = max(r["seconds"] for r in results)
    return {
        "adds_per_s": adds / wall,
        "adds": adds,
        "requests_per_add": sum(r["requests"] for r in results) / adds,
        "conflicts_per_add": sum(r["conflicts"] for r in results) / adds,
        "ms_per_add": statistics.mean(r["seconds"] for r in results) / turns * 1000,
    }


# -- 3. search -----------------------------------------------------------------------------


def search_latency(endpoint: str, read_workers: int, repeats: int = 20) -> dict[str, float]:
    store = S3Store.from_url(url(endpoint), read_workers=read_workers)
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=3), token_counter=words
    )
    for start in range(0, 1100, 100):
        memory.add(
            "c", [e for i in range(start, start + 50) for e in turn(f"needle{i % 7} seed {i}")]
        )
    snapshot = store.load("c")
    assert snapshot.archived_count == 1000, snapshot.archived_count
    traffic = Traffic(store.client)

    def timed(operation) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            operation()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples) * 1000

    load_ms = timed(lambda: store.load("c"))
    traffic.requests = 0
    query = SearchQuery.build("needle3", page=2, page_size=10)
    search_ms = timed(lambda: store.search("c", query))
    result = store.search("c", query)
    requests = traffic.requests / (repeats + 1)
    segments = len(store._read_head("c")[0].segments)
    store.close()
    return {
        "load_ms": load_ms,
        "search_ms": search_ms,
        "requests": requests,
        "total": result.total,
        "segments": segments,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=32, help="turns measured per size")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writer-turns", type=int, default=20, help="turns per contending writer")
    args = parser.parse_args()
    server, endpoint = start_server()
    try:
        print(
            "1. Per-turn cost of add() with turn_window compaction (requests and bytes sent per turn)"
        )
        print(
            f"{'archive cap':<12} {'stored':>7} {'archived':>8} {'req/turn':>9} {'KiB/turn':>9} {'head KiB':>9} {'ms/turn':>8}"
        )
        for cap in ("1000", "none"):
            rows = {}
            for stored in (200, 4000):
                rows[stored] = r = per_turn_cost(endpoint, stored, args.turns, cap)
                print(
                    f"{cap:<12} {stored:>7} {r['archived']:>8} {r['requests']:>9.2f} {r['kib']:>9.2f} {r['head_kib']:>9.2f} {r['ms']:>8.1f}"
                )
            small, large = rows[200], rows[4000]
            print(
                f"{'ratio 4000/200':<29} {large['requests'] / small['requests']:>9.2f} {large['kib'] / small['kib']:>9.2f} "
                f"{large['head_kib'] / small['head_kib']:>9.2f} {large['ms'] / small['ms']:>8.2f}"
            )
        print()
        print(
            f"2. {args.writers} processes appending to one conversation ({args.writer_turns} turns each, compaction on)"
        )
        print(
            f"{'writers':>7} {'adds':>5} {'req/add':>8} {'412/add':>8} {'ms/add':>7} {'adds/s, all':>12}"
        )
        alone = contention(endpoint, 1, args.writer_turns)
        crowd = contention(endpoint, args.writers, args.writer_turns)
        for n, r in ((1, alone), (args.writers, crowd)):
            print(
                f"{n:>7} {r['adds']:>5} {r['requests_per_add']:>8.2f} {r['conflicts_per_add']:>8.2f} "
                f"{r['ms_per_add']:>7.1f} {r['adds_per_s']:>12.1f}"
            )
        print(
            f"{'ratio':>7} {'':>5} {crowd['requests_per_add'] / alone['requests_per_add']:>8.2f} {'':>8} "
            f"{crowd['ms_per_add'] / alone['ms_per_add']:>7.2f} {crowd['adds_per_s'] / alone['adds_per_s']:>12.2f}"
        )
        print("   no event lost or duplicated (seq gap-free)")
        print()
        print(
            "3. Search (page 2 of 10) over a full archive (1000 archived events) vs reading the window"
        )
        print(
            f"{'segment reads':<14} {'segments':>8} {'load ms':>8} {'search ms':>10} {'ratio':>6} {'req/search':>11} {'matches':>8}"
        )
        for workers in (1, 8):
            r = search_latency(endpoint, workers)
            label = "sequential" if workers == 1 else f"{workers} threads"
            print(
                f"{label:<14} {r['segments']:>8} {r['load_ms']:>8.1f} {r['search_ms']:>10.1f} "
                f"{r['search_ms'] / r['load_ms']:>6.1f} {r['requests']:>11.1f} {r['total']:>8}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
