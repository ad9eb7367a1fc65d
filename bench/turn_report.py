"""The markdown ``bench/bench_turn.py`` prints, writes to bench/results/turn.md and puts in
README.md (the headline table)."""

from __future__ import annotations

import hashlib
import platform
import random
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS, OURS_1, MEMORY, REDIS = (
    "chat-memory · SQLite",
    "chat-memory · SQLite · ratio 1.0",
    "chat-memory · memory://",
    "chat-memory · Redis",
)
SDK, SDK_EQUAL, FLOOR = (
    "Agents SDK SQLiteSession · default",
    "Agents SDK SQLiteSession · WAL + NORMAL",
    "raw sqlite3 + json · WAL + NORMAL",
)
FLOOR_FULL = "raw sqlite3 + json · WAL + FULL"
METRICS = ["WAL pages", "SQL statements", "BEGIN", "COMMITs", "transactions", "ROLLBACKs"]
METRICS += ["Event.from_json", "Event JSON parses", "Redis commands", "Redis round trips"]


def tree_state() -> str:
    """The commit, and a digest of any uncommitted change to chat_memory/: taken when the run
    starts (and imports the library), since the tree may change while it runs."""

    def git(*command: str) -> str:
        try:
            return subprocess.run(
                ["git", *command], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    state = f"commit {git('log', '-1', '--format=%h') or 'unknown'}"
    changed = git("diff", "--stat", "--", "chat_memory").splitlines()
    if changed:
        diff = hashlib.sha1(git("diff", "--", "chat_memory").encode()).hexdigest()[:10]
        state += f" + uncommitted changes to chat_memory/ ({changed[-1].strip()}; diff sha1 {diff})"
    return state


@dataclass
class TurnRun:
    """What one run measured. ``times[subject][size]`` holds one (median, mean) seconds per
    turn for each round; ``counts[subject][size]`` the per-turn counts."""

    sizes: list[int]
    rounds: int
    turns: int
    warm_turns: int
    counted_turns: int
    folder: str
    times: dict[str, dict[int, list[tuple[float, float]]]] = field(default_factory=dict)
    counts: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    durability: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=dict)
    held_events: int = 0
    started: str = field(
        default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    )
    state: str = field(default_factory=tree_state)

    @property
    def middle(self) -> int:
        return self.sizes[len(self.sizes) // 2]

    def median_ms(self, name: str, size: int, which: int = 0) -> float:
        return statistics.median(point[which] for point in self.times[name][size]) * 1000

    def ratios(self, a: str, b: str, size: int) -> list[float] | None:
        if a not in self.times or b not in self.times:
            return None
        return [x[0] / y[0] for x, y in zip(self.times[a][size], self.times[b][size])]

    def growth(self, name: str) -> list[float]:
        first, last = self.times[name][self.sizes[0]], self.times[name][self.sizes[-1]]
        return [x[0] / y[0] for x, y in zip(last, first)]


def spread(values: list[float] | None) -> str:
    """The median of the per-round values, their range, and ± the half-width of a 95%
    bootstrap interval of that median, in per cent of it."""
    if not values:
        return "failed"
    mid = statistics.median(values)
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(2000))
    half = (medians[1949] - medians[50]) / 2 / mid * 100
    return f"{mid:.2f}× ({min(values):.2f}–{max(values):.2f}, ±{half:.0f}%)"


def headline(run: TurnRun) -> str:
    """The table README.md shows: the turn at the middle size, against the targets."""
    size = run.middle
    ours_d, sdk_d = run.durability.get(OURS, "?"), run.durability.get(SDK, "?")
    rows = [
        (f"each at its default (ours {ours_d}; SDK {sdk_d})", OURS, SDK, "≤ 0.7×"),
        ("both WAL + NORMAL (equal durability)", OURS, SDK_EQUAL, "≤ 3×"),
        ("ours at ratio 1.0 (compacting every turn), equal durability", OURS_1, SDK_EQUAL, ""),
        ("raw sqlite3 + json, same work, WAL + NORMAL (the floor)", OURS, FLOOR, ""),
    ]
    lines = [
        f"| turn at {size:,} events | ours ms | theirs ms | ours ÷ theirs | target |",
        "|---|---:|---:|---|---|",
    ]
    for label, ours, theirs, target in rows:
        cells = [
            f"{run.median_ms(name, size):.2f}" if name in run.times else "failed"
            for name in (ours, theirs)
        ]
        ratio = spread(run.ratios(ours, theirs, size))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {target} |")
    span = f"{run.sizes[0]:,} → {run.sizes[-1]:,}"
    growth = spread(run.growth(OURS)) if OURS in run.times else "failed"
    lines.append(f"| ours, growth {span} events | | | {growth} | ≤ 1.2× |")
    lines.append(f"| memory://, bytes held per event | | | {run.held['traced']:,.0f} B | ≤ 700 B |")
    redis = run.counts.get(REDIS, {}).get(size, {})
    if redis:
        lines.append(
            f"| Redis, commands per turn | | | {redis.get('Redis commands', 0):.1f} | ≤ 3 |"
        )
    return "\n".join(lines)


def report(run: TurnRun) -> str:
    """The whole of bench/results/turn.md."""
    sizes = run.sizes
    at_sizes = " | ".join(f"{n:,} events" for n in sizes)
    out = [
        "# The agent-loop turn against the leanest peer",
        "",
        "`scripts/bench turn` (bench/bench_turn.py): add the user message, read the window, "
        "add a tool call, its result and the reply; ours `turn_window`, `max_turns=10`, the "
        "rest at its defaults; the OpenAI Agents SDK's `SQLiteSession` `add_items` + "
        "`get_items(limit=40)`.",
        "",
        machine_note(run),
        "",
        headline(run),
        "",
        "## Median ms per turn (the mean in brackets: the amortised cost, compactions included)",
        "",
        f"| subject | durability | {at_sizes} | growth {sizes[0]:,} → {sizes[-1]:,} |",
        "|---|---|" + "---:|" * len(sizes) + "---|",
    ]
    for name in run.times:
        cells = [f"{run.median_ms(name, n):.2f} ({run.median_ms(name, n, 1):.2f})" for n in sizes]
        durability = run.durability.get(name, "-")
        growth = spread(run.growth(name))
        out.append(f"| {name} | {durability} | " + " | ".join(cells) + f" | {growth} |")
    for name, error in run.failed.items():
        out.append(f"| {name} | | failed: {error} |")
    out += [
        "",
        "## Ratios: the median of the per-round ratios (their range; ± a 95% interval of the "
        "median)",
        "",
        f"| ratio | {at_sizes} |",
        "|---|" + "---|" * len(sizes),
    ]
    pairs = [(OURS, SDK), (OURS, SDK_EQUAL), (OURS_1, SDK_EQUAL), (OURS, FLOOR), (MEMORY, FLOOR)]
    pairs += [(OURS, FLOOR_FULL), (SDK, FLOOR_FULL)]
    if REDIS in run.times:
        pairs.append((REDIS, SDK_EQUAL))
    for a, b in pairs:
        cells = [spread(run.ratios(a, b, n)) for n in sizes]
        out.append(f"| {a} ÷ {b} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"## Per turn, the mean of {run.counted_turns} turns",
        "",
        "WAL pages: 4 KiB pages the turn's commits write to SQLite's write-ahead log (counted "
        "from the WAL file, checkpointed before). "
        "SQL statements: `before_cursor_execute`, BEGIN counted apart; COMMITs and "
        "transactions: the engine's `commit` and `begin` events. `Event.from_json`: calls; "
        "Event JSON parses: by any path (pydantic's `validate_json`). Redis: commands and "
        "round trips of the sync client (a pipeline is one round trip).",
        "",
        "| subject | events | " + " | ".join(METRICS) + " |",
        "|---|---:|" + "---:|" * len(METRICS),
    ]
    for name, by_size in run.counts.items():
        for n, per_turn in by_size.items():
            # "-": not counted for that subject (no SQLite file, or not through SQLAlchemy)
            cells = [f"{per_turn[m]:.1f}" if m in per_turn else "-" for m in METRICS]
            out.append(f"| {name} | {n:,} | " + " | ".join(cells) + " |")
    for name, by_size in run.counts.items():
        redis = {
            key[6:]: value
            for key, value in by_size.get(sizes[-1], {}).items()
            if key.startswith("Redis ") and key not in ("Redis commands", "Redis round trips")
        }
        if redis:
            listed = ", ".join(f"{key} {value:.1f}" for key, value in sorted(redis.items()))
            out += ["", f"{name} at {sizes[-1]:,} events, commands per turn: {listed}."]
    held = run.held
    out += [
        "",
        f"memory://, {run.held_events:,} events held: {held['traced']:,.0f} bytes per event "
        f"of Python allocations still held (tracemalloc), {held['rss']:,.0f} bytes per event "
        f"of RSS; a window event's JSON envelope is {held['envelope']:,.0f} bytes.",
    ]
    return "\n".join(out) + "\n"


def machine_note(run: TurnRun) -> str:
    """When, on what and at which state of the tree: the numbers move with all three."""
    versions = []
    from importlib.metadata import PackageNotFoundError, version

    for package in ("openai-agents", "SQLAlchemy", "redis"):
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    import os
    import sqlite3

    return (
        f"{run.started}, {run.state}. {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, {', '.join(versions)}; "
        f"databases in {run.folder}. {run.rounds} rounds × {run.turns} turns per subject and "
        f"size, after {run.warm_turns} warm-up turns, the subjects in a rotating order. "
        "Compare ratios, not absolute times: these machines are noisy."
    )


README_BEGIN = "<!-- generated by bench/bench_turn.py --readme: begin -->"
README_END = "<!-- generated by bench/bench_turn.py --readme: end -->"


def update_readme(results: Path, readme: Path = ROOT / "README.md") -> None:
    """Put the headline table of ``results`` (a bench/results/turn.md), under the line saying
    when and on which commit it was measured, between the README's markers."""
    lines = results.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("| turn at "))
    end = next((k for k in range(start, len(lines)) if not lines[k].startswith("|")), len(lines))
    when = next(line for line in lines if " UTC, commit " in line).split(". ")[0]
    block = "\n".join(
        [f"Measured {when}; 2 cores, shared: read the ratios.", "", *lines[start:end]]
    )
    text = readme.read_text()
    pattern = re.compile(re.escape(README_BEGIN) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{readme} has no {README_BEGIN!r} … {README_END!r} block to replace")
    readme.write_text(pattern.sub(lambda _: f"{README_BEGIN}\n{block}\n{README_END}", text))
