"""Token counting cost: the offline cl100k counter against the 4-characters estimate, per
event, and what the engine pays per turn for it (counts are computed once, at add()).

    .venv/bin/python bench/bench_tokens.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.tokens import count_event_tokens, default_token_counter, estimate_tokens

TEXTS = {
    "short message (40 chars)": "Where is order 4512 and is it shipped?",
    "reply (400 chars)": "The order shipped yesterday with DHL. " * 10,
    "tool result (4 KB JSON)": '{"items": ['
    + ", ".join(f'{{"sku": "A-{i}", "qty": {i}}}' for i in range(200))
    + "]}",
    "document (100 KB)": "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 1800,
}


def median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> int:
    start = time.perf_counter()
    counter = default_token_counter()
    load_ms = (time.perf_counter() - start) * 1000
    print(f"loading the offline cl100k vocabulary: {load_ms:.0f} ms once per process\n")
    print(
        "| text | cl100k tokens | cl100k µs | estimate tokens | estimate µs | estimate / cl100k tokens |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, text in TEXTS.items():
        event = Event.user(text)
        repeat = 20 if len(text) > 10_000 else 500
        exact = count_event_tokens(event, counter)
        rough = count_event_tokens(event, estimate_tokens)
        t_exact = median_us(lambda: count_event_tokens(event, counter), repeat)
        t_rough = median_us(lambda: count_event_tokens(event, estimate_tokens), repeat)
        print(
            f"| {name} | {exact} | {t_exact:.1f} | {rough} | {t_rough:.1f} | {rough / exact:.2f} |"
        )

    # the per-turn share: add() with the real counter against add() with a free counter
    def per_turn(token_counter) -> float:
        memory = ChatMemory(
            open_store("memory://"),
            MemoryConfig(compaction_strategy="turn_window", max_turns=10),
            token_counter=token_counter,
        )
        turn = [
            Event.user(TEXTS["short message (40 chars)"]),
            Event.assistant(TEXTS["reply (400 chars)"]),
        ]
        for _ in range(50):
            memory.add("c", turn)
        return median_us(
            lambda: (
                memory.add(
                    "c",
                    [
                        e.model_copy(update={"id": f"{time.perf_counter_ns()}{i}"})
                        for i, e in enumerate(turn)
                    ],
                ),
                memory.window("c"),
            ),
            300,
        )

    real, free = per_turn(counter), per_turn(lambda text: 0)
    print(
        f"\nper turn on the memory store (add 2 events + window): {real:.0f} µs with cl100k, {free:.0f} µs with a free counter"
    )
    print(
        f"counting's share of a turn: {(real - free) / real:.0%}; window() never recounts (tokens are stored with each event)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
