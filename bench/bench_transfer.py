"""Moving stores: ``copy_store`` (what ``chat-memory copy`` runs) between real stores, and a
JSON Lines export/import, over N conversations (10,000 by default, 12 events each: six turns
under a turn window of 3, so each has archived events and compaction records), reporting
conversations/s and events/s. Pairs: memory:// -> memory:// (the reference: no I/O),
SQLite -> PostgreSQL and SQLite -> Redis (the servers started here, on loopback, as the tests
start them), SQLite -> SQLite. Per pair: a verified copy, the same copy again (a resume that
finds everything there and skips it), an export of the source and an import into a fresh
target. Prints a table and writes it to bench/results/transfer.md.

    .venv/bin/python bench/bench_transfer.py                       # 10,000 conversations
    .venv/bin/python bench/bench_transfer.py --conversations 1000  # a quick run (~1 min)
    .venv/bin/python bench/bench_transfer.py --pairs memory,sqlite-postgresql
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends.base import Store
from chat_memory.transfer import TransferReport, copy_store, export_store, import_store

RESULTS = Path(__file__).resolve().parent / "results" / "transfer.md"
PAIRS = {
    "memory": ("memory", "memory"),
    "sqlite-postgresql": ("sqlite", "postgresql"),
    "sqlite-redis": ("sqlite", "redis"),
    "sqlite-sqlite": ("sqlite", "sqlite"),
}
EVENTS_PER_CONVERSATION = 12


def seed(conversations: int) -> Store:
    """The source data on memory:// (copied from there to each source kind, untimed)."""
    store = open_store("memory://")
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=3), token_counter=len
    )
    for c in range(conversations):
        for t in range(EVENTS_PER_CONVERSATION // 2):
            memory.add(f"conv-{c}", [Event.user(f"question {t} of {c}"), Event.assistant("ok")])
    return store


@contextmanager
def url_factories(kinds: set[str], folder: Path) -> Iterator[dict[str, Callable[[], str]]]:
    """A fresh, empty store URL of each kind per call; servers started only when needed."""
    with ExitStack() as servers:
        urls: dict[str, Callable[[], str]] = {
            "memory": lambda: "memory://",
            "sqlite": lambda: f"sqlite:///{folder / uuid.uuid4().hex}.db",
        }
        if "postgresql" in kinds:
            from tests.services.postgres import start_postgres

            postgres = start_postgres()
            servers.callback(postgres.stop)
            urls["postgresql"] = lambda: f"{postgres.url}?table_prefix=b{uuid.uuid4().hex[:10]}_"
        if "redis" in kinds:
            from tests.services.redis import start_redis

            redis = start_redis()
            servers.callback(redis.stop)
            urls["redis"] = lambda: f"{redis.url}?prefix=bench-{uuid.uuid4().hex[:10]}:"
        yield urls


Row = tuple[str, str, float, int, int]


def run_pair(
    name: str, seeded: Store, source_url: str, target_url: Callable[[], str], events: int
) -> list[Row]:
    """Copy, copy again, export and import for one pair of store kinds."""
    rows: list[Row] = []

    def timed(operation: str, action: Callable[[], TransferReport], moved: int = 0) -> None:
        start = time.perf_counter()
        report = action()
        seconds = time.perf_counter() - start
        conversations = report.conversations or report.skipped
        rows.append((name, operation, seconds, conversations, report.events or moved))
        print(
            f"{name:<18} {operation:<28} {seconds:8.2f} s {conversations / seconds:9.0f} conv/s "
            f"{(report.events or moved) / seconds:10.0f} events/s",
            flush=True,
        )

    with ExitStack() as stores:
        source = seeded
        if source_url != "memory://":
            source = stores.enter_context(open_store(source_url))
            copy_store(seeded, source)
        target = stores.enter_context(open_store(target_url()))
        timed("copy (verified)", lambda: copy_store(source, target))
        timed("copy again (resume)", lambda: copy_store(source, target), moved=events)
        out = io.StringIO()
        timed("export (of the source)", lambda: export_store(source, out))
        text = out.getvalue()
        fresh = stores.enter_context(open_store(target_url()))
        timed("import (into a fresh target)", lambda: import_store(fresh, io.StringIO(text)))
    size = len(text.encode())
    print(f"{name:<18} {'export size':<28} {size / 1e6:8.1f} MB  {size // events} bytes/event")
    return rows


def report(rows: list[Row], conversations: int, events: int, note: str) -> str:
    lines = [
        "# Moving stores: copy, export and import",
        "",
        f"`bench/bench_transfer.py --conversations {conversations}`: {conversations:,} "
        f"conversations, {events:,} events ({EVENTS_PER_CONVERSATION} each: six turns under a "
        "turn window of 3, so each has archived events and compaction records). "
        f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"Python {platform.python_version()}. {note}".rstrip(),
        "",
        "A copy reads each conversation from the source, checks the target for it, writes it "
        "and reads it back to verify its event count and checksum; a resumed copy finds each "
        "there with the same checksum and skips it. Servers run on loopback on the same machine.",
        "",
        "| stores | operation | seconds | conversations/s | events/s |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, operation, seconds, moved, moved_events in rows:
        lines.append(
            f"| {name.replace('-', ' -> ')} | {operation} | {seconds:.2f} | "
            f"{moved / seconds:,.0f} | {moved_events / seconds:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument(
        "--pairs",
        default=",".join(PAIRS),
        help=f"comma-separated, among: {', '.join(PAIRS)} (default: all)",
    )
    parser.add_argument("--note", default="", help="a sentence for the results file")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args()
    names = [n.strip() for n in args.pairs.split(",") if n.strip()]
    unknown = [n for n in names if n not in PAIRS]
    if unknown:
        parser.error(f"--pairs: unknown pair(s) {', '.join(unknown)}; known: {', '.join(PAIRS)}")
    events = args.conversations * EVENTS_PER_CONVERSATION
    print(f"seeding {args.conversations} conversations ({events} events) ...", flush=True)
    seeded = seed(args.conversations)
    rows: list[Row] = []
    kinds = {kind for n in names for kind in PAIRS[n]}
    with tempfile.TemporaryDirectory() as folder, url_factories(kinds, Path(folder)) as urls:
        for name in names:
            source_kind, target_kind = PAIRS[name]
            rows += run_pair(name, seeded, urls[source_kind](), urls[target_kind], events)
    text = report(rows, args.conversations, events, args.note)
    print()
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)
        print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
