"""Writers for the reliability suite, run in child processes (importable, so the forkserver
can preload it), and the checks the parent runs on what they left behind.

Every add a writer makes carries an id in each event's metadata (``add``, ``part``, ``of``),
and the writer logs ``begin <id>`` before ``add()`` and ``done <id>`` after it returned, each
line fsync'd. So after any crash the parent knows which adds were surely committed (done),
which may have been in flight (begun, not done), and which never started.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat_memory import ChatMemory, Event, EventType, MemoryConfig, open_store
from chat_memory.events import split_turns

SHARED = "shared"
#: big enough that no test ever trims the archive: every committed add must stay findable
NO_CAP = 10_000_000
#: what the forkserver imports once, so that a writer started after a kill begins at once
PRELOAD = [
    "tests.support.reliability_workers",
    "sqlalchemy",
    "psycopg",
    "redis",
    "boto3",
    "botocore.client",
]


def word_count(text: str) -> int:
    """A cheap token counter (the tests do not need real token counts)."""
    return len(text.split())


def quick_summary(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    """A fast local summarizer: the range it covers, folded into the previous summary."""
    covered = f"events #{events[0].seq}-#{events[-1].seq}"
    return f"{previous} + {covered}" if previous else covered


def flaky_summary(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    """Like :func:`quick_summary`, but down for some cuts, so failed compactions get retried."""
    if (events[-1].seq or 0) % 5 == 0:
        raise RuntimeError("summarizer unavailable (injected)")
    return quick_summary(previous, events, upcoming)


def memory_config(strategy: str) -> MemoryConfig:
    """Strategies that compact at almost every add."""
    if strategy == "turn_window":
        return MemoryConfig(
            compaction_strategy="turn_window",
            max_turns=2,
            compact_to_ratio=1.0,
            max_archived_events=NO_CAP,
        )
    if strategy == "recursive_summarization":
        return MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=8,
            max_events_to_keep=4,
            overlap_size=1,
            max_archived_events=NO_CAP,
        )
    raise ValueError(f"unknown strategy {strategy!r}")


def open_memory(store: Any, strategy: str, summarizer: Any = quick_summary) -> ChatMemory:
    """A ChatMemory over ``store`` with the test configuration of ``strategy``."""
    return ChatMemory(
        store, memory_config(strategy), summarizer=summarizer, token_counter=word_count
    )


def tagged(add_id: str, events: list[Event]) -> list[Event]:
    """The events with the add's id and their position stored in their metadata."""
    return [
        e.model_copy(update={"metadata": {"add": add_id, "part": i, "of": len(events)}})
        for i, e in enumerate(events)
    ]


def whole_turn(add_id: str) -> list[Event]:
    """One add: a user message, a tool call, its result and the answer."""
    call = f"call-{add_id}"
    return tagged(
        add_id,
        [
            Event.user(f"{add_id} question"),
            Event.tool_call("lookup", {"add": add_id}, call_id=call),
            Event.tool_result(call, f"{add_id} result", name="lookup"),
            Event.assistant(f"{add_id} answer"),
        ],
    )


def split_turn(add_id: str) -> list[list[Event]]:
    """One turn as three adds (user + tool call, the result, the answer), so a kill can fall
    between a tool call and its result."""
    call = f"call-{add_id}"
    return [
        tagged(
            f"{add_id}a",
            [
                Event.user(f"{add_id}a question"),
                Event.tool_call("lookup", {"add": add_id}, call_id=call),
            ],
        ),
        tagged(f"{add_id}b", [Event.tool_result(call, f"{add_id}b result", name="lookup")]),
        tagged(f"{add_id}c", [Event.assistant(f"{add_id}c answer")]),
    ]


class AddLog:
    """The per-process record of adds begun and done; each line is on disk before we go on."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")

    def write(self, word: str, add_id: str) -> None:
        self._file.write(f"{word} {add_id}\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def add(
        self, memory: ChatMemory, conversation_id: str, add_id: str, events: list[Event]
    ) -> None:
        self.write("begin", add_id)
        memory.add(conversation_id, events)
        self.write("done", add_id)


@dataclass(frozen=True)
class WriterJob:
    """What one writer process does: ``turns`` whole turns into the shared conversation (None:
    until killed) and, with ``solo``, a split turn into its own conversation after each."""

    url: str
    writer: int
    generation: int
    log_path: str
    strategy: str
    turns: int | None = None
    solo: str | None = None
    flaky_summarizer: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def add_id(self, turn: int) -> str:
        return f"w{self.writer}.g{self.generation}.{turn}"


def run_writer(job: WriterJob) -> int:
    """The child's entry point; returns the number of turns written. A failure is logged as
    ``error <description>`` so the parent can report it."""
    os.environ.update(job.env)
    logging.getLogger("chat_memory").setLevel(
        logging.ERROR
    )  # injected summarizer failures are expected
    log = AddLog(job.log_path)
    try:
        store = open_store(job.url)
        try:
            memory = open_memory(
                store, job.strategy, flaky_summary if job.flaky_summarizer else quick_summary
            )
            turn = 0
            while job.turns is None or turn < job.turns:
                add_id = job.add_id(turn)
                log.add(memory, SHARED, add_id, whole_turn(add_id))
                if job.solo is not None:
                    for events in split_turn(add_id):
                        log.add(memory, job.solo, events[0].metadata["add"], events)
                turn += 1
            return turn
        finally:
            store.close()
    except BaseException as exc:
        log.write(
            "error", f"{type(exc).__name__}: {exc} | " + " ".join(traceback.format_exc().split())
        )
        raise


def forkserver_context() -> multiprocessing.context.BaseContext:
    """Children forked from a server that has already imported the drivers: a clean process
    (no pytest threads, no moto server) that starts in milliseconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


# -- what the parent checks -------------------------------------------------------------


@dataclass
class AddRecord:
    """What the logs say: adds begun, adds done, and errors the writers reported."""

    begun: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    @property
    def in_flight(self) -> set[str]:
        return self.begun - self.done

    def only(self, belongs: Callable[[str], bool]) -> AddRecord:
        """The adds of one conversation."""
        return AddRecord(
            {a for a in self.begun if belongs(a)}, {a for a in self.done if belongs(a)}, self.errors
        )


def read_logs(paths: Iterable[Path]) -> AddRecord:
    """Merge the logs of every writer process; each may have at most one add in flight."""
    record = AddRecord()
    for path in paths:
        begun_here, done_here = [], set()
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, rest = line.partition(" ")
            if word == "begin":
                begun_here.append(rest)
            elif word == "done":
                done_here.add(rest)
            elif word == "error":
                record.errors.append(f"{path.name}: {rest}")
        unfinished = [a for a in begun_here if a not in done_here]
        assert unfinished in ([], begun_here[-1:]), (
            f"{path.name}: adds begun but not done: {unfinished}"
        )
        record.begun.update(begun_here)
        record.done.update(done_here)
    return record


def add_groups(history: list[Event]) -> dict[str, list[Event]]:
    """History events by the add that wrote them (summaries belong to none)."""
    groups: dict[str, list[Event]] = defaultdict(list)
    for event in history:
        add_id = event.metadata.get("add")
        if add_id is None:
            assert event.type is EventType.SUMMARY, (
                f"event #{event.seq} ({event.type.value}) has no add id"
            )
            continue
        groups[add_id].append(event)
    return groups


def check_history(history: list[Event], record: AddRecord) -> dict[str, list[Event]]:
    """Nothing lost, duplicated, partial or interleaved: seq is gap-free, every add is whole
    and contiguous and present once, every add logged done is there, every add there was
    begun, and an add in flight at a kill is all there or not at all. Returns the groups."""
    assert [e.seq for e in history] == list(range(1, len(history) + 1)), "seq is not gap-free"
    groups = add_groups(history)
    for add_id, events in groups.items():
        assert add_id in record.begun, f"add {add_id} is stored but no writer began it"
        parts = [e.metadata["part"] for e in events]
        assert parts == list(range(events[0].metadata["of"])), (
            f"add {add_id} is partial or duplicated: parts {parts}"
        )
        seqs = [e.seq or 0 for e in events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (
            f"add {add_id} is interleaved: seqs {seqs}"
        )
        assert all(
            e.content is None or e.content.startswith(add_id)
            for e in events
            if e.type is not EventType.TOOL_CALL
        )
    missing = record.done - groups.keys()
    assert not missing, f"adds logged as done are missing: {sorted(missing)[:10]}"
    check_tool_pairing(history)
    return groups


def check_tool_pairing(events: list[Event]) -> None:
    """Every tool result follows its own tool call."""
    calls: set[str | None] = set()
    for event in events:
        if event.type is EventType.TOOL_CALL:
            calls.add(event.tool_call_id)
        elif event.type is EventType.TOOL_RESULT:
            assert event.tool_call_id in calls, (
                f"tool result #{event.seq} answers no earlier tool call"
            )


def check_writer_order(groups: dict[str, list[Event]], record: AddRecord) -> None:
    """The adds of one writer process are stored in the order it made them."""
    by_process: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for add_id, events in groups.items():
        process, _, position = add_id.rpartition(".")
        by_process[process].append((position, events[0].seq or 0))
    for process, adds in by_process.items():
        by_seq = [position for position, _ in sorted(adds, key=lambda a: a[1])]
        assert by_seq == sorted(by_seq, key=_position_key), f"{process} adds out of order: {by_seq}"


def _position_key(position: str) -> tuple[int, str]:
    digits = position.rstrip("abc")
    return int(digits), position[len(digits) :]


def check_window(
    memory: ChatMemory, conversation_id: str, history: list[Event], *, compacted: bool = True
) -> None:
    """The window starts at a user event, holds no orphaned tool result, agrees with the
    history's archived flags, and the archive count matches; ``compacted``: right after a
    successful compaction, so the strategy's limit holds too."""
    window = memory.window(conversation_id)
    active = [e for e in window if e.is_real]
    assert active and active[0].type is EventType.USER, (
        f"window of {conversation_id!r} does not start at a user event"
    )
    check_tool_pairing(active)
    archived = [e for e in history if e.archived]
    assert {e.seq for e in active} == {e.seq for e in history if e.is_real and not e.archived}
    stats = memory.stats(conversation_id)
    summaries = sum(e.type is EventType.SUMMARY for e in archived)
    assert (stats.archived_events, stats.archived_summaries) == (
        len(archived) - summaries,
        summaries,
    )
    if compacted:
        limits(memory, active)


def continue_and_compact(memory: ChatMemory, conversation_id: str, record: AddRecord) -> None:
    """A fresh writer can add to the conversation and compact it; everything still checks."""
    add_id = "fresh.g0.0"
    record.begun.add(add_id)
    memory.add(conversation_id, whole_turn(add_id))
    record.done.add(add_id)
    memory.compact(conversation_id)
    assert memory.stats(conversation_id).last_compaction_error is None
    history = memory.history(conversation_id)
    check_history(history, record)
    check_window(memory, conversation_id, history)


def limits(memory: ChatMemory, active: list[Event]) -> None:
    """After a compaction that succeeded the strategy's limit holds."""
    config = memory.config
    if config.compaction_strategy == "turn_window":
        assert len(split_turns(active)) <= config.max_turns
    else:
        assert len(active) <= config.max_events
