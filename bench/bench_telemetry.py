"""What OpenTelemetry costs a turn (chat_memory.telemetry, docs/telemetry.md).

    .venv/bin/python bench/bench_telemetry.py            # 15 blocks of 100 turns
    .venv/bin/python bench/bench_telemetry.py --quick    # 5 blocks of 40 turns

The turn is bench/turn_subjects.py's agent turn (add the user message, read the window, add
a tool call, its result and the reply) on memory:// with ``turn_window`` (``max_turns=10``:
a compaction, inside the store's append, at every turn), the engine at its leanest, where a
hook's cost shows most. Subjects, each against the same memory with the telemetry hooks taken
out (``__wrapped__``), measured in interleaved blocks of turns so a ratio compares turns
measured moments apart:

- *opentelemetry not imported*: the default of an application that does not use it (the
  hooks find nothing in ``sys.modules``);
- *api imported, no provider*: an application (or the anthropic SDK) imported the api but
  configured nothing;
- *on, SDK, spans dropped*: :func:`chat_memory.telemetry.instrument` with an SDK tracer
  provider without a span processor and a meter provider without a reader;
- *on, SDK, in-memory export*: every span handed to a ``SimpleSpanProcessor`` and an
  in-memory exporter, metrics to an in-memory reader.

Prints a markdown table: the median per-turn time and its ratio to the memory without hooks
(the median of the per-block ratios, and their spread), then what one hook costs while
telemetry is off, timed alone (on a shared machine the table's ratios near 1 are within its
noise; the hook's own time is the steadier number). Compare ratios, not absolute times."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.turn_subjects import agent_turn
from chat_memory import ChatMemory, open_store, telemetry

SETTINGS = {"compaction_strategy": "turn_window", "max_turns": 10}
BASELINE = "no hooks"


class WithoutHooks(ChatMemory):
    """ChatMemory with the telemetry decorators taken off its methods."""

    add = ChatMemory.add.__wrapped__
    window = ChatMemory.window.__wrapped__
    run_search = ChatMemory.run_search.__wrapped__


#: A subject: how to switch telemetry to its setting, and the memory it turns.
Subject = tuple[Callable[[], None], ChatMemory]


def measure(subjects: dict[str, Subject], blocks: int, turns: int) -> dict[str, list[float]]:
    """Per-turn times (µs) of each subject, block by block: each subject turns its own
    conversation ``turns`` times per block, the subjects one after another in an order that
    rotates each block, so the k-th blocks of two subjects ran moments apart."""
    names = list(subjects)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name, (activate, memory) in subjects.items():
        activate()
        for i in range(12):  # past max_turns: every measured turn compacts
            agent_turn(memory, name, i)
    for b in range(blocks):
        order = names[b % len(names) :] + names[: b % len(names)]
        for name in order:
            activate, memory = subjects[name]
            activate()
            first = 12 + b * turns
            started = time.perf_counter()
            for i in range(first, first + turns):
                agent_turn(memory, name, i)
            times[name].append((time.perf_counter() - started) / turns * 1e6)
    return times


def rows(times: dict[str, list[float]]) -> list[tuple[str, float, float, float, float]]:
    """(subject, median µs, median ratio, lowest ratio, highest ratio) against the baseline."""
    base = times[BASELINE]
    result = []
    for name, values in times.items():
        ratios = [v / b for v, b in zip(values, base)]
        result.append(
            (name, statistics.median(values), statistics.median(ratios), min(ratios), max(ratios))
        )
    return result


#: add ×2, window, and the compaction's two (the planner watch and the applied report)
HOOKS_PER_TURN = 5


def hook_ns() -> float:
    """What deciding that telemetry is off costs one hook (the best of 5 runs of 200,000)."""
    return min(timeit.repeat(telemetry.current, number=200_000, repeat=5)) / 200_000 * 1e9


def memory(hooks: bool = True) -> ChatMemory:
    return (ChatMemory if hooks else WithoutHooks)(open_store("memory://"), SETTINGS)


def sdk(export: bool) -> Callable[[], None]:
    """Switch telemetry on with SDK providers (exporting to memory or dropping every span)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    readers: list[Any] = []
    exporter = InMemorySpanExporter()
    if export:
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        readers.append(InMemoryMetricReader())
    meter_provider = MeterProvider(metric_readers=readers)

    def activate() -> None:
        exporter.clear()
        telemetry.instrument(tracer_provider, meter_provider)

    return activate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 blocks of 40 turns")
    options = parser.parse_args()
    blocks, turns = (5, 40) if options.quick else (15, 100)

    off = telemetry.uninstrument
    # first while opentelemetry is not imported at all (it cannot be unimported after)
    assert "opentelemetry" not in sys.modules, "nothing may import opentelemetry before this"
    hook_absent = hook_ns()
    absent = measure(
        {BASELINE: (off, memory(hooks=False)), "opentelemetry not imported": (off, memory())},
        blocks,
        turns,
    )
    import opentelemetry.trace  # noqa: F401  # the api present, no provider configured

    hook_present = hook_ns()
    present = measure(
        {
            BASELINE: (off, memory(hooks=False)),
            "api imported, no provider": (off, memory()),
            "on, SDK, spans dropped": (sdk(export=False), memory()),
            "on, SDK, in-memory export": (sdk(export=True), memory()),
        },
        blocks,
        turns,
    )
    telemetry.uninstrument()
    print(f"Per-turn cost of telemetry: {blocks} blocks of {turns} turns, memory://, turn_window\n")
    print("| subject | µs per turn | × no hooks (median) | lowest–highest |")
    print("|---|---:|---:|---:|")
    for table in (absent, present):
        for name, us, ratio, low, high in rows(table):
            print(f"| {name} | {us:.1f} | {ratio:.3f} | {low:.3f}–{high:.3f} |")
    print(
        f"\nOne hook while off (a turn runs {HOOKS_PER_TURN}): {hook_absent:.0f} ns with "
        f"opentelemetry not imported, {hook_present:.0f} ns with the api imported and no provider."
    )


if __name__ == "__main__":
    main()
