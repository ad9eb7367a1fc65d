"""The agent-loop turn against the leanest peer, side by side in one run.

    scripts/bench turn                 # 200, 2,000 and 20,000 events, 9 rounds of 30 turns
    scripts/bench turn --quick         # 200 and 2,000 events, 3 rounds: a quick look
    scripts/bench turn --redis         # adds chat-memory on Redis (starts a redis-server)
    scripts/bench turn --readme        # then copies turn.md's headline table into README.md
    scripts/bench turn --readme-only   # only that copy, from the last run's turn.md

(or ``.venv/bin/python bench/bench_turn.py …``: it needs openai-agents, in the dev extra.)
A turn: add the user message, read the window, add a tool call, its result and the reply
(bench/turn_subjects.py). Ours is ``turn_window`` with ``max_turns=10`` and the rest at its
defaults, on SQLite (and at ``compact_to_ratio=1.0``, a compaction every turn), memory://
and optionally Redis. Beside it: the OpenAI Agents SDK's ``SQLiteSession`` at its default
(WAL + synchronous FULL) and at equal durability (WAL + NORMAL), and a raw sqlite3 + json
floor doing the same work. Each history is built once per size and copied for every round;
a round's turns go round the subjects one at a time, in a rotating order, so a ratio compares
turns measured moments apart, and the spread of the per-round ratios says how stable it is.
How and why, in detail: docs/performance.md.
Per turn it also counts SQL statements, COMMITs and transactions, ``Event.from_json`` calls,
Redis commands and round trips, and measures the bytes each event holds in memory://.
Prints markdown and writes bench/results/turn.md. Compare ratios, not absolute times."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.per_turn import progress  # noqa: E402
from bench.turn_report import (  # noqa: E402
    MEMORY,
    METRICS,
    OURS,
    OURS_1,
    REDIS,
    TurnRun,
    report,
    update_readme,
)
from bench.turn_subjects import (  # noqa: E402
    AgentsTurnSubject,
    OursSubject,
    RawSQLiteSubject,
    TurnSubject,
    agent_turn,
    copy_database,
    counting,
)

RESULTS = ROOT / "bench" / "results"
WARM_TURNS = 3
STORE_MODULES = [
    "chat_memory.backends.in_memory",
    "chat_memory.backends.sql.store",
    "chat_memory.backends.redis",
]
COUNTED_TURNS = 30  # a multiple of 6: whole compaction periods at the default ratio


@contextmanager
def redis_url() -> Iterator[str]:
    from tests.services.redis import start_redis

    server = start_redis()
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


def build_subjects(redis: str | None) -> list[TurnSubject]:
    def sqlite(path: Path) -> str:
        return f"sqlite:///{path}"

    chosen: list[TurnSubject] = [
        OursSubject(OURS, sqlite),
        OursSubject(OURS_1, sqlite, ratio=1.0),
        OursSubject(MEMORY, lambda _: "memory://"),
        AgentsTurnSubject(equal=False),
        AgentsTurnSubject(equal=True),
        RawSQLiteSubject(),
        RawSQLiteSubject("FULL"),
    ]
    if redis is not None:
        chosen.append(OursSubject(REDIS, lambda _: f"{redis}?prefix=t{uuid.uuid4().hex[:8]}:"))
    return chosen


def run_round(
    subjects: list[TurnSubject], snapshot: dict[str, Path], events: int, folder: Path, turns: int
) -> dict[str, list[float]]:
    """Seconds of each of ``turns`` turns per subject, each on a fresh copy of its history:
    every subject is opened and warmed up, then the turns go round the subjects one turn at
    a time, so that the turns a ratio compares were measured moments apart."""
    opened: list[TurnSubject] = []
    try:
        for k, subject in enumerate(subjects):
            work = folder / f"work-{k}.db"
            copy_database(snapshot[subject.name], work)
            subject.open(work, events)
            opened.append(subject)
            for i in range(WARM_TURNS):
                subject.turn(10_000_000 + i)
        gc.collect()
        times: dict[str, list[float]] = {subject.name: [] for subject in subjects}
        for i in range(turns):
            for subject in subjects:
                if subject.fsyncs:
                    # what the other subjects left in the page cache: an fsync would flush
                    # it too (ext4 commits its journal whole); running alone it would not
                    os.sync()
                start = time.perf_counter()
                subject.turn(i)
                times[subject.name].append(time.perf_counter() - start)
        return times
    finally:
        for k, subject in enumerate(opened):
            subject.close()
            remove_database(folder / f"work-{k}.db")


def count_turns(subject: TurnSubject, snapshot: Path, events: int, work: Path) -> dict[str, float]:
    """What one turn sends and parses, averaged over ``COUNTED_TURNS`` turns."""
    copy_database(snapshot, work)
    subject.open(work, events)
    try:
        for i in range(WARM_TURNS):
            subject.turn(10_000_000 + i)
        wal = WalFrames(work) if work.exists() else None
        with counting() as counts:
            for i in range(COUNTED_TURNS):
                subject.turn(i)
        per_turn = {name: value / COUNTED_TURNS for name, value in counts.items()}
        written = wal.written() if wal is not None else None
        if written is not None:
            per_turn["WAL pages"] = written / COUNTED_TURNS
        return per_turn
    finally:
        subject.close()
        remove_database(work)


class WalFrames:
    """The pages a SQLite database's commits write to its WAL from now on: the WAL is
    checkpointed and truncated here (every connection of the subject idle), then
    :meth:`written` counts its frames. A commit writes every page it changed whatever was
    checkpointed before, so the count is the subject's own."""

    #: SQLite's default ``wal_autocheckpoint``: past it a checkpoint may restart the WAL and
    #: overwrite frames (the file never shrinks but by a truncation), so no count is given.
    AUTOCHECKPOINT = 1000

    def __init__(self, path: Path) -> None:
        self.wal = Path(f"{path}-wal")
        with sqlite3.connect(path) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def written(self) -> int | None:
        """Frames written since the truncation (None past :attr:`AUTOCHECKPOINT`)."""
        if not self.wal.exists() or self.wal.stat().st_size < 32:
            return 0
        with self.wal.open("rb") as wal:
            page_size = int.from_bytes(wal.read(12)[8:12], "big")
        frames = (self.wal.stat().st_size - 32) // (page_size + 24)
        return frames if frames < self.AUTOCHECKPOINT else None


def remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def bytes_probe(events: int) -> dict[str, float]:
    """Bytes each event holds in memory://, measured in this (fresh) process: RSS growth over
    ``events`` events first, then, in a second conversation, the Python allocations still
    held (tracemalloc) after the same fill; and the mean JSON envelope of a window event.
    Both conversations must hold all ``events`` events: checked."""
    import tracemalloc

    from chat_memory import ChatMemory, MemoryConfig, open_store

    # every event stays (the default keeps the newest 1,000 archived events of a conversation)
    store = open_store("memory://?max_archived_events=none")
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=10))
    for i in range(30):  # imports, the tokenizer, first-use caches: not the events' cost
        agent_turn(memory, "warm-up", i)

    def fill(cid: str) -> None:
        for i in range(events // 4):
            agent_turn(memory, cid, i)
        gc.collect()

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096

    gc.collect()
    before = rss()
    fill("rss")
    rss_per_event = (rss() - before) / events
    tracemalloc.start()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    fill("traced")
    traced_per_event = (tracemalloc.get_traced_memory()[0] - before) / events
    tracemalloc.stop()
    for cid in ("rss", "traced"):
        held = len(memory.history(cid))
        if held != events:
            raise RuntimeError(f"memory:// holds {held} events of {cid!r}, not {events}")
    window = memory.window("traced")
    envelope = statistics.mean(len(event.to_json().encode()) for event in window)
    return {"traced": traced_per_event, "rss": rss_per_event, "envelope": envelope}


def measure_bytes(events: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--bytes-probe", str(events)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--quick", action="store_true", help="200 and 2,000 events, 3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds per subject and size (default 9)")
    parser.add_argument("--turns", type=int, default=30, help="turns per round (default 30)")
    parser.add_argument("--redis", action="store_true", help="add chat-memory on Redis")
    parser.add_argument("--readme", action="store_true", help="then rewrite README.md's table")
    parser.add_argument(
        "--readme-only", action="store_true", help="only copy turn.md's table into README.md"
    )
    parser.add_argument("--dir", help="folder for the databases (default: the temp folder)")
    parser.add_argument("--bytes-events", type=int, help="events for bytes/event (largest size)")
    parser.add_argument("--bytes-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bytes_probe:
        print(json.dumps(bytes_probe(args.bytes_probe)))
        return 0
    if args.readme_only:
        update_readme(RESULTS / "turn.md")
        return 0
    sizes = args.sizes or ([200, 2_000] if args.quick else [200, 2_000, 20_000])
    for module in STORE_MODULES:  # now, with the tree state the report names
        with suppress(ImportError):
            importlib.import_module(module)
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        run = TurnRun(
            sizes=sizes,
            rounds=args.rounds or (3 if args.quick else 9),
            turns=args.turns,
            warm_turns=WARM_TURNS,
            counted_turns=COUNTED_TURNS,
            folder=str(folder.parent),
            held_events=args.bytes_events or sizes[-1],
        )
        subjects = build_subjects(stack.enter_context(redis_url()) if args.redis else None)
        measure(run, subjects, folder)
    run.held = measure_bytes(run.held_events)
    text = report(run)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "turn.md").write_text(text)
    if args.readme:
        update_readme(RESULTS / "turn.md")
    return 0


def measure(run: TurnRun, subjects: list[TurnSubject], folder: Path) -> None:
    """Build every history, time the rounds, then count. A subject that fails (the library
    is changed while this runs) is reported as failed and left out of what follows."""
    snapshot = {
        (s.name, n): folder / f"{k}-{n}.db" for k, s in enumerate(subjects) for n in run.sizes
    }
    steps, done = len(run.sizes) * (len(subjects) + run.rounds), 0

    def attempt(subject: TurnSubject, step: Callable[[], object]) -> None:
        if subject.name in run.failed:
            return
        try:
            step()
        except Exception as exc:
            run.failed[subject.name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            run.times.pop(subject.name, None)
            run.counts.pop(subject.name, None)
            print(f"\n{subject.name} failed: {run.failed[subject.name]}", file=sys.stderr)

    for n in run.sizes:
        for subject in subjects:
            progress(done, steps, f"building {subject.name} at {n:,} events")
            attempt(subject, lambda: subject.build(snapshot[subject.name, n], n))
            done += 1
    for r in range(run.rounds):
        for n in run.sizes:
            live = [s for s in subjects if s.name not in run.failed]
            if not live:
                return
            order = live[r % len(live) :] + live[: r % len(live)]
            progress(done, steps, f"round {r + 1} at {n:,} events")
            try:
                turns = run_round(
                    order, {s.name: snapshot[s.name, n] for s in order}, n, folder, run.turns
                )
            except Exception as exc:  # find which subject fails, alone, and leave it out
                print(
                    f"\nround {r + 1} failed ({exc!r}); trying each subject alone", file=sys.stderr
                )
                for subject in order:
                    attempt(
                        subject,
                        lambda: run_round(
                            [subject], {subject.name: snapshot[subject.name, n]}, n, folder, 1
                        ),
                    )
                continue
            for subject in order:
                point = (
                    statistics.median(turns[subject.name]),
                    statistics.mean(turns[subject.name]),
                )
                run.times.setdefault(subject.name, {}).setdefault(n, []).append(point)
                run.durability.setdefault(subject.name, subject.durability)
            done += 1
    progress(done, steps, "counting statements, parses and commands")
    for subject in subjects:
        ours = isinstance(subject, OursSubject)
        for n in run.sizes:

            def count() -> None:
                per_turn = count_turns(subject, snapshot[subject.name, n], n, folder / "work.db")
                if ours:  # a counter never bumped counted none
                    per_turn = {m: 0.0 for m in METRICS if m != "WAL pages"} | per_turn
                else:  # the peers' statements go round SQLAlchemy: only pages count
                    per_turn = {k: v for k, v in per_turn.items() if k == "WAL pages"}
                run.counts.setdefault(subject.name, {})[n] = per_turn

            attempt(subject, count)


if __name__ == "__main__":
    raise SystemExit(main())
