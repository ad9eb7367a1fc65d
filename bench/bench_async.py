"""Async benchmark: many concurrent conversations on one event loop, on SQLite, PostgreSQL and
Redis (real servers it starts itself, loopback), through four drivers side by side:

- ``async, native``: ``AsyncChatMemory`` over ``open_async_store(url, threads=False)`` (the
  native async store: aiosqlite, psycopg's async mode, ``redis.asyncio``);
- ``async, threads``: ``AsyncChatMemory`` over ``open_async_store(url, threads=True)`` (the sync
  store in a bounded pool of ``--workers`` threads);
- ``sync API in threads``: ``ChatMemory`` called from the coroutines through
  ``loop.run_in_executor`` on a pool of ``--workers`` threads (what an asyncio app does with
  a sync library);
- ``sync API on the loop``: ``ChatMemory`` called straight from the coroutines (the control:
  every call stalls the loop).

The row marked ``*`` is what ``open_async_store(url)`` picks by default. Each of
``--conversations`` conversations runs ``--turns`` turns (``add`` a user message and a
reply, then read the ``window``) under ``turn_window`` with compaction. Meanwhile a ticker
coroutine sleeps 1 ms at a time and records how late it wakes: the longest stall is how long
the loop could not run anything else. Compare the ratios; absolute times are noisy.

    .venv-bench/bin/python bench/bench_async.py [--conversations 1000] [--turns 5] [--backends sqlite,postgres,redis]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import AsyncChatMemory, ChatMemory, Event, open_async_store, open_store

CONFIG = {"compaction_strategy": "turn_window", "max_turns": 4}
TICK = 0.001


def tokens(text: str) -> int:
    """A cheap stand-in counter: the benchmark measures the stores and the loop, not tokenization."""
    return len(text) // 4 + 1


def turn(conversation: int, i: int) -> list[Event]:
    return [
        Event.user(
            f"Conversation {conversation}, turn {i}: where is order #{conversation * 100 + i}?"
        ),
        Event.assistant(
            f"Order #{conversation * 100 + i} shipped; tracking code TRK-{conversation:04d}-{i:03d}."
        ),
    ]


@dataclass
class Run:
    driver: str
    default: bool
    seconds: float
    turns: int
    add_p99_ms: float
    longest_stall_ms: float

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds


class Ticker:
    """Sleeps ``TICK`` at a time on the loop and keeps the longest overshoot."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            self.longest = max(self.longest, time.perf_counter() - before - TICK)

    def stop(self) -> None:
        self._stop.set()


async def drive(
    driver: str,
    default: bool,
    conversations: int,
    turns: int,
    add: Callable[[str, list[Event]], Awaitable[Any]],
    window: Callable[[str], Awaitable[Any]],
) -> Run:
    """``conversations`` concurrent conversations of ``turns`` turns each, with the ticker."""
    latencies: list[float] = []

    async def conversation(c: int) -> None:
        for i in range(turns):
            begin = time.perf_counter()
            await add(f"conv-{c}", turn(c, i))
            latencies.append(time.perf_counter() - begin)
            await window(f"conv-{c}")

    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    await asyncio.sleep(TICK * 2)
    start = time.perf_counter()
    await asyncio.gather(*(conversation(c) for c in range(conversations)))
    seconds = time.perf_counter() - start
    ticker.stop()
    await ticking
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return Run(driver, default, seconds, conversations * turns, p99 * 1000, ticker.longest * 1000)


async def async_memory(
    url: str, conversations: int, turns: int, workers: int, threads: bool
) -> Run:
    store = open_async_store(url, threads=threads, max_workers=workers)
    default = open_async_store(url, max_workers=workers)
    picked = default.native == store.native
    await default.aclose()
    memory = AsyncChatMemory(store, CONFIG, token_counter=tokens)
    driver = "async, native" if store.native else f"async, threads ({workers})"
    try:
        return await drive(driver, picked, conversations, turns, memory.add, memory.window)
    finally:
        await memory.aclose()


async def sync_in_threads(url: str, conversations: int, turns: int, workers: int) -> Run:
    memory = ChatMemory(open_store(url), CONFIG, token_counter=tokens)
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=workers)

    async def add(cid: str, events: list[Event]) -> Any:
        return await loop.run_in_executor(pool, memory.add, cid, events)

    async def window(cid: str) -> Any:
        return await loop.run_in_executor(pool, memory.window, cid)

    try:
        return await drive(
            f"sync API in threads ({workers})", False, conversations, turns, add, window
        )
    finally:
        pool.shutdown()
        memory.store.close()


async def sync_on_the_loop(url: str, conversations: int, turns: int, workers: int) -> Run:
    memory = ChatMemory(open_store(url), CONFIG, token_counter=tokens)

    async def add(cid: str, events: list[Event]) -> Any:
        return memory.add(cid, events)

    async def window(cid: str) -> Any:
        return memory.window(cid)

    try:
        return await drive("sync API on the loop", False, conversations, turns, add, window)
    finally:
        memory.store.close()


DRIVERS: list[Callable[[str, int, int, int], Awaitable[Run]]] = [
    lambda url, c, t, w: async_memory(url, c, t, w, threads=False),
    lambda url, c, t, w: async_memory(url, c, t, w, threads=True),
    sync_in_threads,
    sync_on_the_loop,
]


class Backends:
    """Starts the servers a run needs and gives a fresh URL (own tables, keys or file) per run."""

    def __init__(self, names: list[str]) -> None:
        self.stops: list[Callable[[], None]] = []
        self.folder = tempfile.TemporaryDirectory(prefix="chat-memory-bench-async-")
        self.bases: dict[str, str] = {}
        for name in names:
            if name == "sqlite":
                self.bases[name] = f"sqlite:///{self.folder.name}/bench-{{n}}.db"
            elif name == "postgres":
                from tests.services.postgres import start_postgres

                server = start_postgres()
                self.stops.append(server.stop)
                self.bases[name] = f"{server.url}?table_prefix=bench{{n}}_"
            elif name == "redis":
                from tests.services.redis import start_redis

                redis = start_redis()
                self.stops.append(redis.stop)
                self.bases[name] = f"{redis.url}?prefix=bench{{n}}:"
            else:
                raise SystemExit(f"unknown backend {name!r} (sqlite, postgres, redis)")
        self.runs = 0

    def url(self, name: str) -> str:
        self.runs += 1
        return self.bases[name].format(n=self.runs)

    def close(self) -> None:
        for stop in self.stops:
            stop()
        self.folder.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--workers", type=int, default=16, help="threads of the thread-pool drivers"
    )
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    args = parser.parse_args()

    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    backends = Backends(names)
    results: dict[str, list[Run]] = {}
    try:
        for name in names:
            results[name] = [
                asyncio.run(run(backends.url(name), args.conversations, args.turns, args.workers))
                for run in DRIVERS
            ]
    finally:
        backends.close()

    print(
        f"{args.conversations} concurrent conversations x {args.turns} turns (add + window) on one event loop, "
        f"turn_window max_turns={CONFIG['max_turns']}; stall = how late a 1 ms ticker woke up"
    )
    print()
    print(
        f"{'store':<10}{'  driver (* = the default)':<30}{'turns/s':>9}{'vs sync threads':>17}{'add p99 ms':>12}{'longest stall ms':>18}"
    )
    for name, runs in results.items():
        baseline = next(
            run for run in runs if run.driver.startswith("sync API in threads")
        ).turns_per_second
        for run in runs:
            driver = ("* " if run.default else "  ") + run.driver
            print(
                f"{name:<10}{driver:<30}{run.turns_per_second:>9.0f}{run.turns_per_second / baseline:>17.2f}"
                f"{run.add_p99_ms:>12.1f}{run.longest_stall_ms:>18.1f}"
            )


if __name__ == "__main__":
    main()
