"""What events cost: parsing, serialising, copying and holding them. Run from the root:

    .venv/bin/python bench/bench_events.py [--events 10000] [--turns 200]

Prints microseconds per ``Event.from_json`` (a new and a repeated envelope), per
``to_json`` and per store copy (``archived_copy``); then, for an agent-loop turn (the user
message, the window read, a tool call, its result and the reply; 2,000 events, turn window
10) on memory:// and on SQLite (a file), the milliseconds a turn takes and how many times
it parses (``Event.from_json`` calls and real parses), serialises and copies events, and
the share of ``from_json`` calls served without parsing; last, the bytes memory:// holds
per event at ``--events`` events (tracemalloc), in the window and archived (held packed:
chat_memory/backends/packed.py), and what reading the archived ones back costs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import timeit
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_append_cost import history
from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends import bookkeeping, in_memory
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.packed import pack, unpack
from chat_memory.backends.sql import SQLStore


def micro_us(fn: Callable[[], object], number: int = 20_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def micro() -> None:
    call = Event.tool_call("lookup", {"k": 1, "q": "hello"}, call_id="c1").stored(seq=5, tokens=3)
    user = Event.user("What is the capital of France? Please answer briefly.")
    user = user.stored(seq=6, tokens=12)
    text = user.to_json()
    packed = pack(user)
    counter = iter(range(10**9))
    fresh = [user.model_copy(update={"id": f"{i:032x}"}).to_json() for i in range(100_000)]
    print(f"envelope: {len(text)} characters")
    rows = [
        ("from_json, a new envelope", lambda: Event.from_json(fresh[next(counter) % 100_000])),
        ("from_json, the same envelope", lambda: Event.from_json(text)),
        ("from_json, an equal copy", lambda: Event.from_json(text.encode().decode())),
        ("model_validate_json", lambda: Event.model_validate_json(text)),
        ("to_json, a new copy", lambda: user.model_copy().to_json()),
        ("  (that model_copy alone)", lambda: user.model_copy()),
        ("to_json", lambda: user.to_json()),
        ("to_json, a tool call", lambda: call.to_json()),
        ("archived_copy (a store copy)", lambda: bookkeeping.archived_copy(user)),
        ("pack (memory://'s archive)", lambda: pack(user)),
        ("unpack (a read of it)", lambda: unpack(packed)),
        ("Event.user(...)", lambda: Event.user("hi")),
    ]
    for name, fn in rows:
        print(f"  {name:32} {micro_us(fn):6.2f} µs")


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Counts from_json calls, real parses (model_validate_json), serialisations
    (model_dump_json) and copies (model_copy) while active."""
    counts: Counter[str] = Counter()
    patched = {
        "from_json": "from_json",
        "model_validate_json": "parsed",
    }
    saved: dict[str, Any] = {}
    saved_modules: list[tuple[Any, Any]] = []
    for name, key in patched.items():
        original = getattr(Event, name).__func__
        saved[name] = Event.__dict__.get(name)

        def wrapped(cls: type, /, *a: Any, _o: Any = original, _k: str = key, **k: Any) -> Any:
            counts[_k] += 1
            return _o(cls, *a, **k)

        setattr(Event, name, classmethod(wrapped))
    for module in (bookkeeping, in_memory):  # the store-assigned copies
        original_replaced = getattr(module, "replaced", None)
        if original_replaced is None:  # the code before bookkeeping.replaced
            continue
        saved_modules.append((module, original_replaced))

        def counted(event: Event, changes: dict[str, Any], _o: Any = original_replaced) -> Event:
            copy: Event = _o(event, changes)
            counts["copied" if copy is not event else "shared"] += 1
            return copy

        module.replaced = counted  # type: ignore[attr-defined]  # restored below
    for name, key in {"model_dump_json": "serialised", "model_copy": "copied"}.items():
        original = getattr(Event, name)
        saved[name] = Event.__dict__.get(name)

        def method(self: Any, *a: Any, _o: Any = original, _k: str = key, **k: Any) -> Any:
            counts[_k] += 1
            return _o(self, *a, **k)

        setattr(Event, name, method)
    try:
        yield counts
    finally:
        for module, original_replaced in saved_modules:
            module.replaced = original_replaced
        for name, value in saved.items():
            if value is None:
                delattr(Event, name)
            else:
                setattr(Event, name, value)


def turn(memory: ChatMemory, k: int) -> None:
    memory.add("c", Event.user(f"new question {k}", tokens=2))
    memory.window("c")
    call = Event.tool_call("lookup", {"k": k}, call_id=f"t-{k}", tokens=3)
    memory.add("c", call)
    memory.add("c", Event.tool_result(call.tool_call_id or "", f"found {k}", tokens=2))
    memory.add("c", Event.assistant(f"answer {k}", tokens=2))


def per_turn(url_name: str, memory: ChatMemory, turns: int) -> None:
    memory.store.append("c", history(2_000))
    for k in range(10):  # warm up
        turn(memory, -k - 1)
    with counting() as counts:
        for k in range(turns):
            turn(memory, k)
    started = time.perf_counter()  # timed again without the counting wrappers
    for k in range(turns, 2 * turns):
        turn(memory, k)
    ms = (time.perf_counter() - started) * 1000 / turns
    keys = ("from_json", "parsed", "serialised", "copied", "shared")
    per = {key: counts[key] / turns for key in keys}
    line = ", ".join(f"{key} {value:.1f}" for key, value in per.items())
    served = 1 - counts["parsed"] / max(counts["from_json"], 1)
    line += f"; from_json calls served without parsing {served:.0%}"
    print(f"  {url_name:10} {ms:.2f} ms a turn; per turn: {line}")


def bytes_per_event(n: int) -> None:
    """What memory:// holds per event of ``n``, in the window then archived, and what a
    ``history`` read of the archived ones costs per event."""
    store = InMemoryStore(max_archived_events=None)
    events = history(n)
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    snapshot = store.append("c", events)
    del events
    gc.collect()
    in_window = tracemalloc.get_traced_memory()[0] - start
    store.apply("c", CompactionPlan(snapshot.version, archive_through_seq=n))
    del snapshot
    gc.collect()
    archived = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    envelope = sum(len(e.to_json()) for e in store.history("c")) / n
    read_us = min(timeit.repeat(lambda: store.history("c"), number=1, repeat=5)) / n * 1e6
    print(
        f"  memory:// holds {in_window / n:.0f} bytes per event in the window and "
        f"{archived / n:.0f} archived, at {n:,} events (a JSON envelope: {envelope:.0f} "
        f"characters); a history read of the archive costs {read_us:.2f} µs per event"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    print("micro-benchmarks:")
    micro()
    print("an agent-loop turn at 2,000 events, turn window 10:")
    config = MemoryConfig(compaction_strategy="turn_window", max_turns=10)
    per_turn("memory://", ChatMemory(InMemoryStore(), config), args.turns)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLStore(f"sqlite:///{tmp}/bench.db")
        try:
            per_turn("sqlite", ChatMemory(store, config), args.turns)
        finally:
            store.close()
    print("memory held:")
    bytes_per_event(args.events)


if __name__ == "__main__":
    main()
