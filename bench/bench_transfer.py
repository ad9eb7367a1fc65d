"""Moving stores: ``copy_store`` and a JSON Lines export/import of N conversations (10,000 by
default, 12 events each with compactions, summaries off), reporting conversations/s and
events/s, and the size of the export. Runs on the stores with the Dumps ability (memory://
this release; pass other URLs once they have it).

    .venv/bin/python bench/bench_transfer.py [--conversations 10000] [--from memory:// --to memory://]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.transfer import copy_store, export_store, import_store


def seed(memory: ChatMemory, conversations: int) -> int:
    for c in range(conversations):
        for t in range(6):
            memory.add(f"conv-{c}", [Event.user(f"question {t} of {c}"), Event.assistant("ok")])
    return conversations * 12


def rate(label: str, conversations: int, events: int, seconds: float) -> None:
    print(
        f"{label:<22} {seconds:7.2f} s  {conversations / seconds:9.0f} conversations/s  "
        f"{events / seconds:10.0f} events/s"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--from", dest="source", default="memory://")
    parser.add_argument("--to", dest="target", default="memory://")
    args = parser.parse_args()
    source, target = open_store(args.source), open_store(args.target)
    config = MemoryConfig(compaction_strategy="turn_window", max_turns=3)
    events = seed(ChatMemory(source, config, token_counter=len), args.conversations)
    n = args.conversations
    print(f"{n} conversations, {events} events, {args.source} -> {args.target}")

    start = time.perf_counter()
    report = copy_store(source, target)
    rate("copy (verified)", report.conversations, report.events, time.perf_counter() - start)
    start = time.perf_counter()
    again = copy_store(source, target)
    rate("copy again (resume)", again.skipped, events, time.perf_counter() - start)

    out = io.StringIO()
    start = time.perf_counter()
    exported = export_store(source, out)
    rate(
        "export (JSON Lines)", exported.conversations, exported.events, time.perf_counter() - start
    )
    text = out.getvalue()
    print(
        f"{'export size':<22} {len(text.encode()) / 1e6:7.1f} MB  {len(text.encode()) // events} bytes/event"
    )
    fresh = open_store(args.target)
    start = time.perf_counter()
    imported = import_store(fresh, io.StringIO(text))
    rate("import", imported.conversations, imported.events, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
