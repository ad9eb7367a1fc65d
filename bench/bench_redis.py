"""Redis store benchmark on a real redis-server it starts itself (loopback, no persistence).

Prints round trips and time per ``add()`` and ``window()``, the per-turn cost with 1k and
100k events stored (it should stay flat: append, compaction and the window read never touch
the archive), and search latency over a full archive, Lua-side matching against fetching
everything and matching in Python. Compare the ratios; absolute times are noisy.

    .venv/bin/python bench/bench_redis.py [--big 100000] [--turns 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.redis import RedisStore
from chat_memory.search import SearchQuery, search_events
from tests.services.redis import start_redis

KEEP_TURNS = 10


def tokens(text: str) -> int:
    """A cheap stand-in counter: the benchmark measures the store, not tokenization."""
    return len(text) // 4 + 1


def turn(i: int) -> list[Event]:
    return [
        Event.user(
            f"Turn {i}: what is the status of order #{i}? It was placed by customer {i % 97}."
        ),
        Event.assistant(
            f"Order #{i} shipped on day {i % 28 + 1}; tracking code TRK-{i:06d}. Anything else?"
        ),
    ]


def counted(events: list[Event]) -> list[Event]:
    return [e.model_copy(update={"tokens": tokens(e.text())}) for e in events]


def fill(store: RedisStore, cid: str, events: int) -> None:
    """Store ``events`` events quickly: big appends, each followed by a compaction that leaves
    the newest turns active (what months of add() calls would have left behind)."""
    batch_turns = 250
    done = 0
    while done < events:
        n = min(batch_turns, (events - done) // 2)
        snapshot = store.append(
            cid, counted([e for i in range(done // 2, done // 2 + n) for e in turn(i)])
        )
        done += 2 * n
        keep_from = snapshot.window.active[-2 * KEEP_TURNS].seq or 0
        store.apply(cid, CompactionPlan(snapshot.version, keep_from - 1))


def median_ms(operation: Callable[[int], Any], repeat: int) -> float:
    samples = []
    for i in range(repeat):
        start = time.perf_counter()
        operation(i)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def round_trips(client: Any, operation: Callable[[], Any]) -> int:
    sent: list[str] = []
    original = client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return original(*args, **kwargs)

    client.execute_command = counting
    try:
        operation()
    finally:
        del client.execute_command
    return len(sent)


def appends_ms(store: RedisStore, memory: ChatMemory, cid: str, start: int, turns: int) -> float:
    """Time add() when no compaction is due; between samples (untimed) the window is cut back
    to its usual size, so every sample sees the same window."""
    samples = []
    for i in range(turns):
        begin = time.perf_counter()
        memory.add(cid, turn(start + i))
        samples.append((time.perf_counter() - begin) * 1000)
        snapshot = store.load(cid)
        store.apply(
            cid,
            CompactionPlan(
                snapshot.version, (snapshot.window.active[-2 * KEEP_TURNS].seq or 0) - 1
            ),
        )
    return statistics.median(samples)


def per_turn(store: RedisStore, cid: str, turns: int, start: int) -> dict[str, float]:
    memory = ChatMemory(
        store,
        MemoryConfig(compaction_strategy="turn_window", max_turns=KEEP_TURNS),
        token_counter=tokens,
    )
    no_compaction = ChatMemory(
        store, MemoryConfig(compaction_strategy="none"), token_counter=tokens
    )
    memory.add(cid, turn(start))  # scripts loaded, conversation registered
    memory.window(cid)
    return {
        "append_rt": round_trips(store.client, lambda: no_compaction.add(cid, turn(start + 1))),
        "add_rt": round_trips(store.client, lambda: memory.add(cid, turn(start + 2))),
        "window_rt": round_trips(store.client, lambda: memory.window(cid)),
        "append_ms": appends_ms(store, no_compaction, cid, start + 3, turns),
        "add_ms": median_ms(lambda i: memory.add(cid, turn(start + 3 + turns + i)), turns),
        "window_ms": median_ms(lambda i: memory.window(cid), turns),
        "archived": store.load(cid).archived_count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()

    server = start_redis()
    try:
        store = RedisStore.from_url(f"{server.url}?prefix=bench:", max_archived_events=None)
        fill(store, "small", args.small)
        fill(store, "big", args.big)
        small = per_turn(store, "small", args.turns, args.small)
        big = per_turn(store, "big", args.turns, args.big)

        # a conversation with a full (default-capped) archive of 1000 events plus a window
        capped = RedisStore.from_url(f"{server.url}?prefix=bench-capped:")
        fill(capped, "full", 1_000 + 2 * KEEP_TURNS)
        archived = capped.load("full").archived_count
        rare = SearchQuery.build("TRK-000500", "phrase", 0, 10)  # one hit
        common = SearchQuery.build("shipped", "phrase", 0, 10)  # every assistant event
        last_page = SearchQuery.build("shipped", "phrase", (archived // 2 + KEEP_TURNS) // 10, 10)
        lua = {
            name: median_ms(lambda i, q=q: capped.search("full", q), 50)
            for name, q in [("rare", rare), ("common", common), ("last", last_page)]
        }
        python = {
            name: median_ms(lambda i, q=q: search_events(capped.history("full"), q), 20)
            for name, q in [("rare", rare), ("common", common), ("last", last_page)]
        }
        assert (
            capped.search("full", common).total
            == search_events(capped.history("full"), common).total
        )
        search_rt = round_trips(capped.client, lambda: capped.search("full", common))
    finally:
        server.stop()

    print(
        f"Redis store on a real redis-server (loopback), turn_window max_turns={KEEP_TURNS}, median of {args.turns}"
    )
    print()
    print(
        f"{'per turn':<34}{f'{args.small} events':>14}{f'{args.big} events':>16}{'big/small':>11}"
    )
    rows = [
        ("add(), no compaction due: trips", "append_rt"),
        ("add() + compaction: round trips", "add_rt"),
        ("window() round trips", "window_rt"),
    ]
    for label, key in rows:
        print(f"{label:<34}{small[key]:>14}{big[key]:>16}{big[key] / small[key]:>11.2f}")
    for label, key in [
        ("add(), no compaction due, ms", "append_ms"),
        ("add() + compaction, ms", "add_ms"),
        ("window(), ms", "window_ms"),
    ]:
        print(f"{label:<34}{small[key]:>14.3f}{big[key]:>16.3f}{big[key] / small[key]:>11.2f}")
    print(f"{'archived events':<34}{small['archived']:>14}{big['archived']:>16}")
    print()
    print(
        f"search over {archived} archived + {2 * KEEP_TURNS} active events ({search_rt} round trip in Lua)"
    )
    print(f"{'query':<34}{'Lua, ms':>14}{'Python, ms':>16}{'Py/Lua':>11}")
    for name, label in [
        ("rare", "rare word, page 0"),
        ("common", "common word, page 0"),
        ("last", "common word, last page"),
    ]:
        print(
            f"{label:<34}{lua[name]:>14.3f}{python[name]:>16.3f}{python[name] / lua[name]:>11.2f}"
        )


if __name__ == "__main__":
    main()
