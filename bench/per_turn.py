"""Per-turn cost against history length: chat-memory's backends and its peers, side by side.

    .venv-bench/bin/python bench/per_turn.py                  # 100, 1k, 10k events; SQLite, memory, peers
    .venv-bench/bin/python bench/per_turn.py --full           # adds 100k events
    .venv-bench/bin/python bench/per_turn.py --backends all   # adds PostgreSQL, Redis, S3 (starts them)

(`scripts/bench` sets up .venv-bench with the peers.) Prints a table of the median per-turn
time (append user + tool call + tool result + assistant, then read the last 10 turns), its
growth from the smallest to the largest history, and each subject's cost relative to
chat-memory on SQLite; writes the table to bench/results/per_turn.md and a log-log plot to
bench/results/per_turn.png. Compare ratios, not absolute times: these machines are noisy."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers import (
    AgentsSubject,
    ChatMemorySubject,
    LangChainSubject,
    LlamaIndexSubject,
    Subject,
)

RESULTS = Path(__file__).resolve().parent / "results"
BASELINE = "chat-memory · SQLite"


def progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:60]:<60}")
    sys.stderr.flush()
    if done == total:
        sys.stderr.write("\n")


@contextlib.contextmanager
def services(which: set[str]) -> Iterator[dict[str, Callable[[], str]]]:
    """URL factories for each backend, starting the servers a backend needs."""
    urls: dict[str, Callable[[], str]] = {"memory": lambda: "memory://"}
    tmp = tempfile.TemporaryDirectory()
    urls["SQLite"] = lambda: f"sqlite:///{tmp.name}/{uuid.uuid4().hex}.db"
    stack = contextlib.ExitStack()
    try:
        if "postgres" in which:
            from tests.services.postgres import start_postgres

            pg = start_postgres()
            stack.callback(pg.stop)
            urls["PostgreSQL"] = lambda: pg.url + f"?table_prefix=b{uuid.uuid4().hex[:8]}_"
        if "redis" in which:
            from tests.services.redis import start_redis

            rs = start_redis()
            stack.callback(rs.stop)
            urls["Redis"] = lambda: f"redis://127.0.0.1:{rs.port}/0?prefix=b{uuid.uuid4().hex[:8]}:"
        if "s3" in which:
            import os

            from tests.services.s3 import DUMMY_AWS_ENV, start_moto_server

            for name, value in DUMMY_AWS_ENV.items():
                os.environ.setdefault(name, value)
            moto, endpoint = start_moto_server()
            stack.callback(moto.stop)
            urls["S3 (moto)"] = lambda: (
                f"s3://bench-bucket/{uuid.uuid4().hex[:8]}?endpoint_url={endpoint}&region=us-east-1"
            )
        yield urls
    finally:
        stack.close()
        tmp.cleanup()


def subjects(urls: dict[str, Callable[[], str]], peers: bool) -> list[Subject]:
    chosen: list[Subject] = [
        ChatMemorySubject(f"chat-memory · {name}", factory) for name, factory in urls.items()
    ]
    chosen.sort(key=lambda s: s.name != BASELINE)
    if peers:
        for peer in (LangChainSubject, LlamaIndexSubject, AgentsSubject):
            try:
                chosen.append(peer())
            except ImportError as exc:  # pragma: no cover - reported in the table
                print(f"skipping {peer.name}: {exc}", file=sys.stderr)
    return chosen


def measure(subject: Subject, events: int, turns: int) -> float:
    """Median seconds per turn over ``turns`` turns after ``events`` events of history."""
    subject.fill(events)
    try:
        for i in range(3):  # warm caches and connections
            subject.turn(10_000_000 + i)
        times = []
        for i in range(turns):
            start = time.perf_counter()
            subject.turn(i)
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        subject.close()


def table(results: dict[str, dict[int, float]], sizes: list[int]) -> str:
    base = results.get(BASELINE, {})
    head = [
        "subject",
        *[f"{n:,} events (ms)" for n in sizes],
        f"growth {sizes[0]:,}→{sizes[-1]:,}",
        f"× {BASELINE} at {sizes[-1]:,}",
    ]
    rows = [head, ["---"] * len(head)]
    for name, by_size in results.items():
        growth = by_size[sizes[-1]] / by_size[sizes[0]]
        relative = by_size[sizes[-1]] / base[sizes[-1]] if base else float("nan")
        rows.append(
            [
                name,
                *[f"{by_size[n] * 1000:.2f}" for n in sizes],
                f"{growth:.2f}×",
                f"{relative:.2f}×",
            ]
        )
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def plot(results: dict[str, dict[int, float]], sizes: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, by_size in results.items():
        style = "-o" if name.startswith("chat-memory") else "--s"
        ax.plot(sizes, [by_size[n] * 1000 for n in sizes], style, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events already in the conversation")
    ax.set_ylabel("median ms per turn (append 4 events + read window)")
    ax.set_title("Per-turn cost against history length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="also measure at 100,000 events")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        help="comma-separated history lengths",
    )
    parser.add_argument(
        "--turns", type=int, default=30, help="measured turns per point (default 30)"
    )
    parser.add_argument(
        "--backends",
        default="local",
        help="local (memory, SQLite) or all (adds PostgreSQL, Redis, S3)",
    )
    parser.add_argument(
        "--no-peers", action="store_true", help="leave LangChain, LlamaIndex and OpenAI Agents out"
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or ([100, 1_000, 10_000, 100_000] if args.full else [100, 1_000, 10_000])
    which = {"postgres", "redis", "s3"} if args.backends == "all" else set()

    results: dict[str, dict[int, float]] = {}
    with services(which) as urls:
        chosen = subjects(urls, peers=not args.no_peers)
        total, done = len(chosen) * len(sizes), 0
        for subject in chosen:
            for n in sizes:
                progress(done, total, f"{subject.name} at {n:,} events")
                results.setdefault(subject.name, {})[n] = measure(subject, n, args.turns)
                done += 1
        progress(done, total, "done")

    text = table(results, sizes)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "per_turn.md").write_text(text + "\n")
    try:
        plot(results, sizes, RESULTS / "per_turn.png")
        print(f"\nplot: {RESULTS / 'per_turn.png'}")
    except ImportError:
        print("\n(matplotlib missing: no plot)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
