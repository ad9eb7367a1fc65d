"""Reliability under load and crashes, on every backend several processes can share
(SQLite, PostgreSQL, Redis, Redis Cluster, S3 over HTTP): writer processes at full speed,
and writer processes killed with SIGKILL at random points of appends and compactions.
Sizes come from the ``reliability_size`` fixture (CI-sized unless ``--full-reliability``)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chat_memory import open_store
from tests.support.reliability_workers import (
    SHARED,
    WriterJob,
    check_history,
    check_window,
    check_writer_order,
    continue_and_compact,
    forkserver_context,
    open_memory,
    read_logs,
    run_writer,
)

STRATEGIES = ["turn_window", "recursive_summarization"]
#: a writer that makes no progress for this long is stuck (a bug), not slow
PROGRESS_DEADLINE = 300.0


def child_env() -> dict[str, str]:
    """What the children need from this process's environment (the S3 fixtures' dummy AWS
    credentials; the forkserver may have started before they were set)."""
    return {name: value for name, value in os.environ.items() if name.startswith("AWS_")}


class Writers:
    """Writer processes on one store, started, SIGKILLed and restarted by the test."""

    def __init__(self, url: str, strategy: str, folder: Path, count: int) -> None:
        self.context = forkserver_context()
        self.url = url
        self.strategy = strategy
        self.folder = folder
        self.count = count
        self.generations = [0] * count
        self.processes: dict[int, Any] = {}
        self.kills = 0

    def log(self, writer: int, generation: int | None = None) -> Path:
        generation = self.generations[writer] if generation is None else generation
        return self.folder / f"w{writer}.g{generation}.log"

    def start(self, writer: int) -> None:
        job = WriterJob(
            url=self.url,
            writer=writer,
            generation=self.generations[writer],
            log_path=str(self.log(writer)),
            strategy=self.strategy,
            solo=f"solo-{writer}",
            flaky_summarizer=True,
            env=child_env(),
        )
        process = self.context.Process(target=run_writer, args=(job,), daemon=True)
        process.start()
        self.processes[writer] = process

    def done(self, writer: int) -> int:
        path = self.log(writer)
        return path.read_text().count("\ndone ") if path.exists() else 0

    def wait_for_progress(self, writer: int, adds: int) -> None:
        """Until the writer's current process has finished ``adds`` adds."""
        deadline = time.monotonic() + PROGRESS_DEADLINE
        process = self.processes[writer]
        while self.done(writer) < adds:
            if process.exitcode is not None:
                errors = read_logs([self.log(writer)]).errors
                pytest.fail(f"writer {writer} exited with {process.exitcode}: {errors}")
            assert time.monotonic() < deadline, (
                f"writer {writer} made no progress in {PROGRESS_DEADLINE} s"
            )
            time.sleep(0.002)

    def kill(self, writer: int) -> None:
        process = self.processes.pop(writer)
        if process.exitcode is None:
            os.kill(process.pid, signal.SIGKILL)
            self.kills += 1
        process.join()
        self.generations[writer] += 1

    def kill_all(self) -> None:
        for writer in list(self.processes):
            self.kill(writer)

    def logs(self) -> list[Path]:
        return sorted(self.folder.glob("w*.log"))


def is_shared_add(add_id: str) -> bool:
    return add_id[-1].isdigit()


def is_solo_add_of(writer: int) -> Callable[[str], bool]:
    return lambda add_id: add_id.startswith(f"w{writer}.") and not add_id[-1].isdigit()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_writers_at_full_speed_lose_nothing(store_url, strategy, reliability_size, tmp_path):
    size = reliability_size
    context = forkserver_context()
    jobs = [
        WriterJob(
            store_url,
            w,
            0,
            str(tmp_path / f"w{w}.g0.log"),
            strategy,
            turns=size.stress_turns,
            env=child_env(),
        )
        for w in range(size.stress_writers)
    ]
    processes = [context.Process(target=run_writer, args=(job,), daemon=True) for job in jobs]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(PROGRESS_DEADLINE)
    finally:
        for process in processes:
            if process.exitcode is None:
                process.kill()
                process.join()
    record = read_logs(sorted(tmp_path.glob("w*.log")))
    assert [p.exitcode for p in processes] == [0] * len(processes), record.errors
    assert len(record.done) == size.stress_writers * size.stress_turns and not record.in_flight

    store = open_store(store_url)
    try:
        memory = open_memory(store, strategy)
        history = memory.history(SHARED)
        groups = check_history(history, record)
        assert groups.keys() == record.done
        check_writer_order(groups, record)
        continue_and_compact(memory, SHARED, record)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sigkilled_writers_leave_a_consistent_store(
    store_url, strategy, reliability_size, tmp_path
):
    size = reliability_size
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    store = open_store(store_url)
    store.load(SHARED)  # creates the schema before any writer can die halfway through it
    writers = Writers(store_url, strategy, tmp_path, size.crash_writers)
    try:
        for writer in range(size.crash_writers):
            writers.start(writer)
        for _ in range(size.crash_kills):
            victim = rng.randrange(size.crash_writers)
            writers.wait_for_progress(victim, rng.randint(1, 4))
            time.sleep(rng.uniform(0, 0.02))  # land anywhere in the next add or compaction
            writers.kill(victim)
            writers.start(victim)
        for writer in range(size.crash_writers):
            writers.wait_for_progress(writer, 1)
    finally:
        writers.kill_all()

    record = read_logs(writers.logs())
    assert not record.errors, f"seed {seed}: {record.errors}"
    try:
        memory = open_memory(store, strategy)
        shared = record.only(is_shared_add)
        history = memory.history(SHARED)
        groups = check_history(history, shared)
        check_writer_order(groups, shared)
        check_window(memory, SHARED, history, compacted=False)
        in_flight = len(record.in_flight)
        present = len(record.in_flight & groups.keys())
        continue_and_compact(memory, SHARED, shared)
        for writer in range(size.crash_writers):
            solo = record.only(is_solo_add_of(writer))
            history = memory.history(f"solo-{writer}")
            solo_groups = check_history(history, solo)
            check_writer_order(solo_groups, solo)
            check_window(memory, f"solo-{writer}", history, compacted=False)
            present += len(solo.in_flight & solo_groups.keys())
            continue_and_compact(memory, f"solo-{writer}", solo)
    finally:
        store.close()
    print(
        f"\nreliability crash [{strategy}]: seed {seed}, {len(record.done)} adds done, {writers.kills} SIGKILLs, "
        f"{in_flight} adds in flight at a kill, {present} of them stored whole, none partial"
    )
