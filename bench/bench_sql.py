"""Per-turn cost of the SQL store against history length, on SQLite and PostgreSQL.

For each history length (100, 1k, 10k, 100k stored events, all archived) one conversation is
bulk-loaded through the store, then ChatMemory runs turns (a user message, a tool call, its
result and a reply; turn window of 10 turns, so every turn also compacts) and reads the window.
The baseline is the plainest possible window read: ``SELECT … ORDER BY seq DESC LIMIT 40`` on a
bare (conversation, seq) table of the same length. Last, the first page of a search over the
100k archive. Prints medians and ratios; the goal is per-turn cost flat in history length
(ratio to the 100-event history within 1.2x).

    .venv/bin/python bench/bench_sql.py            # SQLite and PostgreSQL (started here)
    .venv/bin/python bench/bench_sql.py --sqlite   # SQLite only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.sql import SQLStore
from chat_memory.search import SearchQuery
from tests.services.postgres import start_postgres

HISTORY_LENGTHS = (100, 1_000, 10_000, 100_000)
BATCH = 5_000
WARMUP_TURNS = 15
MEASURED_TURNS = 60
BASELINE_READS = 200


def words(text: str) -> int:
    return len(text.split())


def median_ms(action: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def history_event(i: int) -> Event:
    text = (
        f"needle {i} in the haystack"
        if i % 1000 == 7
        else f"message {i} about order {i * 7 % 9973} and shipping"
    )
    return Event.user(text, tokens=6) if i % 2 == 0 else Event.assistant(text, tokens=6)


def bulk_load(store: SQLStore, cid: str, count: int) -> None:
    """Append the history in big batches, archiving after each so the window stays small."""
    for start in range(0, count, BATCH):
        snapshot = store.append(
            cid, [history_event(i) for i in range(start, min(count, start + BATCH))]
        )
        store.apply(cid, CompactionPlan(snapshot.version, archive_through_seq=snapshot.last_seq))


def per_turn_ms(store: SQLStore, cid: str) -> float:
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=10), token_counter=words
    )
    counter = iter(range(10**9))

    def turn() -> None:
        n = next(counter)
        call = Event.tool_call("get_order", {"id": n})
        result = Event.tool_result(call.tool_call_id, '{"status": "shipped"}')
        memory.add(
            cid, [Event.user(f"where is order {n}?"), call, result, Event.assistant("It shipped.")]
        )
        memory.window(cid)

    for _ in range(WARMUP_TURNS):
        turn()
    return median_ms(turn, MEASURED_TURNS)


def baseline_ms(engine: sa.Engine, count: int) -> float:
    """A bare table of ``count`` rows and the plainest newest-first read of 40 of them."""
    metadata = sa.MetaData()
    plain = sa.Table(
        f"bench_plain_{count}",
        metadata,
        sa.Column("conversation", sa.Integer, primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    with engine.begin() as connection:
        for start in range(0, count, BATCH):
            rows = [
                {"conversation": 1, "seq": i, "body": history_event(i).to_json()}
                for i in range(start, min(count, start + BATCH))
            ]
            connection.execute(plain.insert(), rows)
    query = (
        sa.select(plain.c.body)
        .where(plain.c.conversation == 1)
        .order_by(plain.c.seq.desc())
        .limit(40)
    )

    def read() -> None:
        with engine.connect() as connection:
            connection.execute(query).all()

    return median_ms(read, BASELINE_READS)


def settle(store: SQLStore) -> None:
    """What autovacuum does soon after a bulk load: drop the dead index entries the bulk
    archiving left (PostgreSQL keeps them until VACUUM) and refresh planner statistics."""
    names = (store.tables.events.name, store.tables.conversations.name)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        for name in names:
            connection.exec_driver_sql(
                f"VACUUM ANALYZE {name}"
                if store.engine.dialect.name == "postgresql"
                else f"ANALYZE {name}"
            )


def run_backend(name: str, url: str) -> list[str]:
    lines = []
    turn_costs: dict[int, float] = {}
    base_costs: dict[int, float] = {}
    for count in HISTORY_LENGTHS:
        with SQLStore.from_url(url, table_prefix=f"bench{count}_") as store:
            loading = time.perf_counter()
            bulk_load(store, "bench", count)
            loaded_s = time.perf_counter() - loading
            cold = per_turn_ms(store, "bench")
            settle(store)
            turn_costs[count] = per_turn_ms(store, "bench")
            base_costs[count] = baseline_ms(store.engine, count)
            lines.append(
                f"{name:<10} {count:>8} {turn_costs[count]:>10.2f} {turn_costs[count] / turn_costs[HISTORY_LENGTHS[0]]:>8.2f}x"
                f" {base_costs[count]:>11.3f} {base_costs[count] / base_costs[HISTORY_LENGTHS[0]]:>8.2f}x"
                f" {turn_costs[count] / base_costs[count]:>10.1f}x {loaded_s:>8.1f} {cold:>9.2f}"
            )
            if count == HISTORY_LENGTHS[-1]:
                lines.extend(search_lines(name, store, turn_costs[count]))
    return lines


def search_lines(name: str, store: SQLStore, turn_ms: float) -> list[str]:
    lines = []
    for label, keyword in (
        ("rare (100 hits)", "needle"),
        ("common (all)", "shipping"),
        ("absent", "zebra"),
    ):
        query = SearchQuery.build(keyword, "phrase", 0, 10)
        total = store.search("bench", query).total
        cost = median_ms(lambda: store.search("bench", query), 15)
        lines.append(
            f"  search {name:<10} {label:<16} total={total:<7} first page {cost:8.2f} ms = {cost / turn_ms:5.1f}x a turn"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sqlite", action="store_true", help="SQLite only (do not start PostgreSQL)"
    )
    args = parser.parse_args()
    header = (
        f"{'backend':<10} {'history':>8} {'turn ms':>10} {'vs 100':>9} {'baseline ms':>11} {'vs 100':>9}"
        f" {'turn/base':>11} {'load s':>8} {'cold ms':>9}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as folder:
        for line in run_backend("sqlite", f"sqlite:///{folder}/bench.db"):
            print(line, flush=True)
    if not args.sqlite:
        server = start_postgres()
        try:
            for line in run_backend("postgresql", server.url):
                print(line, flush=True)
        finally:
            server.stop()
    print(
        "turn = add([user, tool_call, tool_result, assistant]) + window(), with turn-window compaction;"
    )
    print(
        "baseline = SELECT body … ORDER BY seq DESC LIMIT 40 on a bare table of the same length. Medians."
    )
    print(
        "cold = per-turn cost right after the bulk load, before VACUUM ANALYZE (what autovacuum does soon after)."
    )


if __name__ == "__main__":
    main()
