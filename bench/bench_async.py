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
the loop could not run anything else, and the garbage collector's pauses are timed
(``gc.callbacks``) to tell how much of that stall was a collection. Compare the ratios;
absolute times are noisy.

``--gc-freeze`` moves everything alive after the imports and one warm-up turn to the
collector's permanent generation (``gc.freeze()``, what docs/performance.md recommends to a
deployment) before the conversations start: a full collection then walks only what the
conversations allocate, not the interpreter's whole heap. ``--drivers native`` runs only the
native async stores (the issue-21 target: the longest stall at most 100 ms with 1,000
conversations); ``--gc-freeze both`` runs each driver without, then with, the freeze.

    .venv-bench/bin/python bench/bench_async.py [--conversations 1000] [--turns 5] \
        [--backends sqlite,postgres,redis] [--drivers native,threads,sync-threads,sync-loop] \
        [--gc-freeze yes|no|both]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
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


@dataclass(frozen=True)
class Load:
    """What every driver runs: conversations, turns each, the thread pools' size, and
    whether the heap is frozen (``gc.freeze()``) before the conversations start."""

    conversations: int
    turns: int
    workers: int
    freeze: bool = False


@dataclass
class Run:
    driver: str
    default: bool
    seconds: float
    turns: int
    add_p99_ms: float
    longest_stall_ms: float
    frozen: bool = False
    longest_stall_cpu_ms: float = 0.0  # the loop thread's CPU time between two ticks
    after_start_ms: float = 0.0  # the same two, once every conversation is past its first add
    after_start_cpu_ms: float = 0.0
    gc_longest_ms: float = 0.0  # the longest collection, any generation
    gc_longest_cpu_ms: float = 0.0
    gc_full: int = 0  # collections of the oldest generation during the run
    stall_gc_ms: float = 0.0  # collection time inside the longest stall

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds


class Ticker:
    """Sleeps ``TICK`` at a time on the loop and keeps the longest overshoot (and when it
    was), and the most CPU time the loop's thread spent between two ticks: the stall without
    what other processes took from it (on a loaded machine the wall-clock stall is mostly
    theirs). Only the loop's thread is counted: a thread pool's workers holding the GIL
    stall the loop without showing in it. Once ``started`` is set (every conversation past
    its first ``add``), the same is kept apart for the rest of the run: the start, when
    every conversation's first steps are ready on the loop at once, is a burst of its own."""

    def __init__(self) -> None:
        self.longest = self.longest_cpu = 0.0
        self.after_start = self.after_start_cpu = 0.0
        self.span = (0.0, 0.0)
        self.started = False
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            before, before_cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK)
            late, cpu = time.perf_counter() - before - TICK, time.thread_time() - before_cpu
            self.longest_cpu = max(self.longest_cpu, cpu)
            if late > self.longest:
                self.longest = late
                self.span = (before, before + TICK + late)
            if self.started:
                self.after_start = max(self.after_start, late)
                self.after_start_cpu = max(self.after_start_cpu, cpu)

    def stop(self) -> None:
        self._stop.set()


class CollectorClock:
    """Times every garbage collection while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []  # (generation, start, end)
        self.longest_cpu = 0.0  # the collecting thread's CPU time: what load cannot inflate
        self._start = self._start_cpu = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start, self._start_cpu = time.perf_counter(), time.thread_time()
        else:
            self.pauses.append((info["generation"], self._start, time.perf_counter()))
            self.longest_cpu = max(self.longest_cpu, time.thread_time() - self._start_cpu)

    def __enter__(self) -> CollectorClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def longest_ms(self) -> float:
        return max((end - start for _, start, end in self.pauses), default=0.0) * 1000

    def full(self) -> int:
        return sum(1 for generation, _, _ in self.pauses if generation == 2)

    def within_ms(self, span: tuple[float, float]) -> float:
        low, high = span
        return (
            sum(max(0.0, min(end, high) - max(start, low)) for _, start, end in self.pauses) * 1000
        )


async def drive(
    driver: str,
    default: bool,
    load: Load,
    add: Callable[[str, list[Event]], Awaitable[Any]],
    window: Callable[[str], Awaitable[Any]],
) -> Run:
    """``load.conversations`` concurrent conversations of ``load.turns`` turns each, with the ticker,
    after one warm-up turn (and the freeze, with ``--gc-freeze``)."""
    latencies: list[float] = []
    await add("warm-up", turn(-1, 0))
    await window("warm-up")
    gc.collect()
    if load.freeze:
        gc.freeze()

    ticker = Ticker()
    waiting = load.conversations  # for their first add

    async def conversation(c: int) -> None:
        nonlocal waiting
        for i in range(load.turns):
            begin = time.perf_counter()
            await add(f"conv-{c}", turn(c, i))
            latencies.append(time.perf_counter() - begin)
            if i == 0:
                waiting -= 1
                ticker.started = waiting == 0
            await window(f"conv-{c}")

    try:
        with CollectorClock() as clock:
            ticking = asyncio.create_task(ticker.run())
            await asyncio.sleep(TICK * 2)
            start = time.perf_counter()
            await asyncio.gather(*(conversation(c) for c in range(load.conversations)))
            seconds = time.perf_counter() - start
            ticker.stop()
            await ticking
    finally:
        if load.freeze:
            gc.unfreeze()  # the next run starts from the same heap
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return Run(
        driver,
        default,
        seconds,
        load.conversations * load.turns,
        p99 * 1000,
        ticker.longest * 1000,
        frozen=load.freeze,
        longest_stall_cpu_ms=ticker.longest_cpu * 1000,
        after_start_ms=ticker.after_start * 1000,
        after_start_cpu_ms=ticker.after_start_cpu * 1000,
        gc_longest_ms=clock.longest_ms(),
        gc_longest_cpu_ms=clock.longest_cpu * 1000,
        gc_full=clock.full(),
        stall_gc_ms=clock.within_ms(ticker.span),
    )


async def async_memory(url: str, load: Load, threads: bool) -> Run:
    workers = load.workers
    store = open_async_store(url, threads=threads, max_workers=workers)
    default = open_async_store(url, max_workers=workers)
    picked = default.native == store.native
    await default.aclose()
    memory = AsyncChatMemory(store, CONFIG, token_counter=tokens)
    driver = "async, native" if store.native else f"async, threads ({workers})"
    try:
        return await drive(driver, picked, load, memory.add, memory.window)
    finally:
        await memory.aclose()


async def sync_in_threads(url: str, load: Load) -> Run:
    memory = ChatMemory(open_store(url), CONFIG, token_counter=tokens)
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=load.workers)

    async def add(cid: str, events: list[Event]) -> Any:
        return await loop.run_in_executor(pool, memory.add, cid, events)

    async def window(cid: str) -> Any:
        return await loop.run_in_executor(pool, memory.window, cid)

    try:
        return await drive(f"sync API in threads ({load.workers})", False, load, add, window)
    finally:
        pool.shutdown()
        memory.store.close()


async def sync_on_the_loop(url: str, load: Load) -> Run:
    memory = ChatMemory(open_store(url), CONFIG, token_counter=tokens)

    async def add(cid: str, events: list[Event]) -> Any:
        return memory.add(cid, events)

    async def window(cid: str) -> Any:
        return memory.window(cid)

    try:
        return await drive("sync API on the loop", False, load, add, window)
    finally:
        memory.store.close()


DRIVERS: dict[str, Callable[[str, Load], Coroutine[Any, Any, Run]]] = {
    "native": lambda url, load: async_memory(url, load, threads=False),
    "threads": lambda url, load: async_memory(url, load, threads=True),
    "sync-threads": sync_in_threads,
    "sync-loop": sync_on_the_loop,
}


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
    parser.add_argument("--drivers", default=",".join(DRIVERS), help=", ".join(DRIVERS))
    parser.add_argument(
        "--gc-freeze",
        choices=("no", "yes", "both"),
        default="no",
        help="gc.freeze() after the imports and a warm-up turn (both: a run without, then with)",
    )
    parser.add_argument(
        "--engine-admission",
        choices=("yes", "no"),
        default="yes",
        help="no: AsyncChatMemory skips the store's admitted() (the tree before it took it; "
        "for before/after runs back to back)",
    )
    parser.add_argument(
        "--windows-kept",
        type=int,
        default=None,
        help="the Redis stores' held-window cache size (default: WINDOWS_KEPT in redis_base.py)",
    )
    args = parser.parse_args()
    if args.engine_admission == "no":
        import chat_memory.aio
        from chat_memory.steps import arun

        chat_memory.aio._admitted = arun  # an A/B switch, not an API
    if args.windows_kept is not None:
        from chat_memory.backends import redis_base

        redis_base.WINDOWS_KEPT = args.windows_kept

    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    drivers = [name.strip() for name in args.drivers.split(",") if name.strip()]
    unknown = sorted(set(drivers) - set(DRIVERS))
    if unknown:
        raise SystemExit(f"unknown driver {unknown[0]!r} ({', '.join(DRIVERS)})")
    freezes = {"no": [False], "yes": [True], "both": [False, True]}[args.gc_freeze]
    backends = Backends(names)
    results: dict[str, list[Run]] = {}
    try:
        for name in names:
            results[name] = []
            for driver in drivers:
                for freeze in freezes:
                    run = DRIVERS[driver]
                    results[name].append(
                        asyncio.run(
                            run(
                                backends.url(name),
                                Load(args.conversations, args.turns, args.workers, freeze),
                            )
                        )
                    )
    finally:
        backends.close()
    print(report(results, args.conversations, args.turns))


def report(results: dict[str, list[Run]], conversations: int, turns: int) -> str:
    """A markdown table of the runs, one row per store, driver and freeze."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"{conversations:,} concurrent conversations x {turns} turns (add + window) on one "
        f"event loop, turn_window max_turns={CONFIG['max_turns']}; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, load average at the end {load}.",
        "",
        "Stall: how late a 1 ms ticker woke (wall), and in brackets the most CPU time the "
        "loop's thread spent between two ticks (what other processes on the machine cannot "
        "inflate); over the whole run, and after the start (once every conversation is past "
        "its first add: at the start all their first steps are ready at once). GC: "
        "the longest collection (wall / the collecting thread's CPU), how many full "
        "(oldest-generation) ones ran, and the collection time inside the longest stall.",
        "",
        "| store | driver (* = the default) | gc.freeze | turns/s | x sync API in threads "
        "| add p99 ms | longest stall ms (CPU) | after the start ms (CPU) | longest GC ms (CPU) "
        "| full GCs | GC in the longest stall ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        baseline = next((run for run in runs if run.driver.startswith("sync API in threads")), None)
        for run in runs:
            ratio = f"{run.turns_per_second / baseline.turns_per_second:.2f}" if baseline else "-"
            lines.append(
                f"| {name} | {'* ' if run.default else ''}{run.driver} "
                f"| {'yes' if run.frozen else 'no'} | {run.turns_per_second:,.0f} | {ratio} "
                f"| {run.add_p99_ms:,.0f} "
                f"| {run.longest_stall_ms:,.1f} ({run.longest_stall_cpu_ms:,.1f}) "
                f"| {run.after_start_ms:,.1f} ({run.after_start_cpu_ms:,.1f}) "
                f"| {run.gc_longest_ms:,.1f} ({run.gc_longest_cpu_ms:,.1f}) | {run.gc_full} "
                f"| {run.stall_gc_ms:,.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
