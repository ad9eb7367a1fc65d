"""Faults while writers run: Redis killed and restarted, S3 answering 412 storms, 5xx and
lost replies, PostgreSQL connections terminated, the summarizer failing or timing out.
Each fault must end in success or a ChatMemoryError with a clear message, within a bounded
time, and never lose, duplicate or split an add."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from chat_memory import (
    ChatMemory,
    ChatMemoryError,
    Event,
    StorageError,
    SummarizerError,
    open_store,
)
from chat_memory.backends.s3 import S3Store
from tests.services.redis import start_redis
from tests.support.reliability_workers import (
    SHARED,
    AddRecord,
    check_history,
    check_writer_order,
    continue_and_compact,
    memory_config,
    open_memory,
    quick_summary,
    whole_turn,
    word_count,
)

WRITERS = 3
#: a call that takes longer than this has hung (the stores' own timeouts are seconds)
HANG_BOUND = 60.0


class ThreadWriter(threading.Thread):
    """Adds whole turns to the shared conversation until stopped, recording which adds
    returned, which raised (and what), and the longest call."""

    def __init__(
        self, memory: ChatMemory, name: str, record: AddRecord, limit: int | None = None
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.memory = memory
        self.record = record
        self.limit = limit
        self.stopping = threading.Event()
        self.done = 0
        self.failures: list[tuple[str, BaseException]] = []
        self.longest = 0.0

    def run(self) -> None:
        turn = 0
        while not self.stopping.is_set() and (self.limit is None or turn < self.limit):
            add_id = f"{self.name}.g0.{turn}"
            self.record.begun.add(add_id)
            started = time.monotonic()
            try:
                self.memory.add(SHARED, whole_turn(add_id))
            except Exception as exc:
                self.failures.append((add_id, exc))
                time.sleep(0.01)
            else:
                self.record.done.add(add_id)
                self.done += 1
            finally:
                self.longest = max(self.longest, time.monotonic() - started)
            turn += 1


def wait_until(condition: Callable[[], bool], what: str, writers: list[ThreadWriter]) -> None:
    deadline = time.monotonic() + HANG_BOUND
    while not condition():
        assert all(w.is_alive() for w in writers), f"a writer thread died while waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {HANG_BOUND} s"
        time.sleep(0.005)


def stop(writers: list[ThreadWriter]) -> None:
    for writer in writers:
        writer.stopping.set()
    for writer in writers:
        writer.join(HANG_BOUND)
    assert not any(w.is_alive() for w in writers), "a writer hung"


def check_failures(
    writers: list[ThreadWriter], expected: type[ChatMemoryError], *, mentions: str = ""
) -> int:
    """Every failed add raised ``expected`` (a ChatMemoryError) with a message naming the
    cause, and no call hung. Returns how many failed."""
    failures = [exc for w in writers for _, exc in w.failures]
    for exc in failures:
        assert isinstance(exc, expected), f"{type(exc).__name__}: {exc}"
        assert mentions in str(exc), str(exc)
    assert max(w.longest for w in writers) < HANG_BOUND
    return len(failures)


def report(what: str, writers: list[ThreadWriter], **figures: Any) -> None:
    done = sum(w.done for w in writers)
    failed = sum(len(w.failures) for w in writers)
    extra = ", ".join(f"{name} {value}" for name, value in figures.items())
    print(
        f"\nreliability fault [{what}]: {done} adds done, {failed} failed, longest call {max(w.longest for w in writers):.2f} s, {extra}"
    )


def verify(memory: ChatMemory, record: AddRecord) -> int:
    """Nothing lost, duplicated, split or reordered; a fresh writer continues. Returns how
    many of the failed adds had nevertheless been stored (whole)."""
    groups = check_history(memory.history(SHARED), record)
    check_writer_order(groups, record)
    stored_anyway = len(record.in_flight & groups.keys())
    continue_and_compact(memory, SHARED, record)
    return stored_anyway


# -- Redis --------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_killed_and_restarted_under_writers(tmp_path, reliability_size):
    durable = ("--appendonly", "yes", "--appendfsync", "always")
    server = start_redis(*durable, root=tmp_path / "redis")
    record = AddRecord()
    stores = [open_store(server.url) for _ in range(WRITERS)]
    writers = [
        ThreadWriter(open_memory(s, "turn_window"), f"t{i}", record) for i, s in enumerate(stores)
    ]
    try:
        for writer in writers:
            writer.start()
        wait_until(
            lambda: all(w.done >= reliability_size.fault_adds for w in writers), "progress", writers
        )
        server.process.kill()  # a crash, not a clean shutdown
        server.process.wait()
        wait_until(
            lambda: all(w.failures for w in writers), "failures while Redis is down", writers
        )
        server = start_redis(*durable, root=tmp_path / "redis", port=server.port)
        assert_serves(server)
        before = [w.done for w in writers]
        wait_until(
            lambda: all(w.done >= b + reliability_size.fault_adds for w, b in zip(writers, before)),
            "progress after the restart",
            writers,
        )
        stop(writers)
        failed = check_failures(writers, StorageError, mentions="Connection")
        stored_anyway = verify(open_memory(stores[0], "turn_window"), record)
        report("redis restart", writers, failed_but_stored=stored_anyway)
        assert failed >= WRITERS
    finally:
        stop(writers)
        for store in stores:
            store.close()
        server.stop()


def assert_serves(server: Any) -> None:
    """The server answering on the port is the one we started: another process (a test run
    next to this one) may have taken the port while it was free."""
    import redis

    client = redis.Redis(port=server.port)
    try:
        assert client.info("server")["process_id"] == server.process.pid, (
            f"port {server.port} was taken meanwhile"
        )
    finally:
        client.close()


# -- S3 -------------------------------------------------------------------------------------


class S3Faults:
    """A botocore before-send hook on one client of the moto server: the first ``storm`` head
    writes get 412; after that, at the given rates, requests get 500/503 or 412 (head writes)
    without being sent, or a lost reply: a head write's first attempt is sent and stored,
    then answered with 500, so botocore retries it."""

    def __init__(
        self,
        store: S3Store,
        rng: random.Random,
        *,
        storm: int = 0,
        conflict: float = 0.0,
        server_error: float = 0.0,
        lost_reply: float = 0.0,
    ) -> None:
        self.store = store
        self.rng = rng
        self.storm = storm
        self.rates = (conflict, server_error, lost_reply)
        self.lock = threading.Lock()
        self.injected = {"412": 0, "5xx": 0, "lost reply": 0}
        self.enabled = True
        store.client.meta.events.register_first("before-send.s3", self)

    @staticmethod
    def answer(request: Any, status: int, code: str) -> Any:
        from botocore.awsrequest import AWSResponse

        from tests.stores.test_s3 import _Raw

        body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
        return AWSResponse(request.url, status, {}, _Raw(body))

    def __call__(self, request: Any, **_: Any) -> Any:
        if not self.enabled:
            return None
        head_write = request.method == "PUT" and "/heads/" in request.url
        # "attempt=1; max=6", or "attempt=1" alone (older botocore, e.g. 1.35)
        first_attempt = b"attempt=1" in (request.headers.get("amz-sdk-request") or b"").split(b"; ")
        conflict, server_error, lost_reply = self.rates
        with self.lock:
            roll, status = (
                self.rng.random(),
                self.rng.choice([(500, "InternalError"), (503, "SlowDown")]),
            )
            if head_write and self.storm > 0:
                self.storm -= 1
                roll = -1.0
        if head_write and roll < conflict:
            self.injected["412"] += 1
            return self.answer(request, 412, "PreconditionFailed")
        roll -= conflict
        if roll < server_error:
            self.injected["5xx"] += 1
            return self.answer(request, *status)
        roll -= server_error
        if head_write and first_attempt and roll < lost_reply:
            self.injected["lost reply"] += 1
            self.store.client._endpoint.http_session.send(request)
            return self.answer(request, 500, "InternalError")
        return None


@pytest.mark.s3
def test_s3_412_storms_5xx_and_lost_replies_under_writers(
    s3_server_url, monkeypatch, reliability_size
):
    import botocore.retries.standard

    monkeypatch.setattr(
        botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0
    )
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    record = AddRecord()
    stores = [S3Store.from_url(s3_server_url) for _ in range(WRITERS)]
    faults = [
        S3Faults(s, rng, storm=12, conflict=0.25, server_error=0.15, lost_reply=0.15)
        for s in stores
    ]
    writers = [
        ThreadWriter(
            open_memory(s, "turn_window"), f"t{i}", record, limit=3 * reliability_size.fault_adds
        )
        for i, s in enumerate(stores)
    ]
    try:
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(HANG_BOUND * 5)
        stop(writers)
        for fault in faults:
            fault.enabled = False
        check_failures(writers, ChatMemoryError)
        stored_anyway = verify(open_memory(stores[0], "turn_window"), record)
        injected = {k: sum(f.injected[k] for f in faults) for k in faults[0].injected}
        report("s3 storms", writers, seed=seed, injected=injected, failed_but_stored=stored_anyway)
        assert injected["lost reply"] > 0 and injected["5xx"] > 0
    finally:
        for store in stores:
            store.close()


@pytest.mark.s3
def test_s3_a_lost_reply_neither_duplicates_an_append_nor_deletes_live_segments(
    s3_server_store, monkeypatch
):
    """Regression: the head PUT is stored but its reply is lost; botocore's retry gets 412.
    The store used to read that as a lost race: it appended the events again, and after a
    compaction it deleted the segments the stored head referenced."""
    import botocore.retries.standard

    monkeypatch.setattr(
        botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0
    )
    store = s3_server_store
    memory = open_memory(store, "turn_window")
    record = AddRecord()
    fault = S3Faults(store, random.Random(0), lost_reply=1.0)
    for turn in range(5):  # max_turns=2: every add from the third on also compacts
        add_id = f"t0.g0.{turn}"
        record.begun.add(add_id)
        memory.add(SHARED, whole_turn(add_id))
        record.done.add(add_id)
    fault.enabled = False
    assert fault.injected["lost reply"] >= 5
    assert memory.stats(SHARED).archived_events == 12
    check_history(memory.history(SHARED), record)


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_connections_terminated_under_writers(
    postgres_url, postgres_server, reliability_size
):
    import psycopg

    application = f"reliability-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}&application_name={application}"
    record = AddRecord()
    stores = [open_store(url) for _ in range(WRITERS)]
    writers = [
        ThreadWriter(open_memory(s, "turn_window"), f"t{i}", record) for i, s in enumerate(stores)
    ]
    terminated = 0
    admin = psycopg.connect(
        f"host=127.0.0.1 port={postgres_server.port} user=postgres dbname=postgres", autocommit=True
    )
    try:
        for writer in writers:
            writer.start()
        for _ in range(reliability_size.fault_adds):
            before = [w.done + len(w.failures) for w in writers]
            wait_until(
                lambda: all(w.done + len(w.failures) > b for w, b in zip(writers, before)),
                "progress",
                writers,
            )
            time.sleep(random.uniform(0, 0.005))
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                (application,),
            ).fetchone()
            terminated += row[0] if row else 0
        before = [w.done for w in writers]
        wait_until(
            lambda: all(w.done > b for w, b in zip(writers, before)),
            "progress after the drops",
            writers,
        )
        stop(writers)
        check_failures(writers, StorageError)
        stored_anyway = verify(open_memory(stores[0], "turn_window"), record)
        report(
            "postgres drops",
            writers,
            backends_terminated=terminated,
            failed_but_stored=stored_anyway,
        )
        assert terminated > 0
    finally:
        stop(writers)
        admin.close()
        for store in stores:
            store.close()


# -- the summarizer -------------------------------------------------------------------------


def raising(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    raise ConnectionError("summarizer endpoint refused the connection (injected)")


def sleeping_then_raising(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    time.sleep(0.1)
    raise TimeoutError("summarizer did not answer in time (injected)")


class Switchable:
    """A summarizer that is down until ``healed``."""

    def __init__(self, down: Callable[..., str]) -> None:
        self.down = down
        self.healed = False
        self.failures = 0

    def summarize(self, previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
        if self.healed:
            return quick_summary(previous, events, upcoming)
        self.failures += 1
        return self.down(previous, events, upcoming)


def outage_then_recovery(store: Any, summarizer: Switchable, mentions: str) -> None:
    """While the summarizer is down every add is stored and nothing is archived; compact()
    raises SummarizerError naming the cause; after it heals the next add compacts. (The
    fallback that archives without a summary after a few failures is put off here, to see
    the outage itself; tests/engine/test_safety_nets.py covers the fallback.)"""
    config = memory_config("recursive_summarization").model_copy(
        update={"summarizer_failures_before_fallback": 10}
    )
    memory = ChatMemory(store, config, summarizer=summarizer, token_counter=word_count)
    record = AddRecord()
    for turn in range(4):
        add_id = f"t0.g0.{turn}"
        record.begun.add(add_id)
        memory.add(SHARED, whole_turn(add_id))
        record.done.add(add_id)
    stats = memory.stats(SHARED)
    assert stats.archived_events == 0 and stats.active_events == 16
    assert stats.last_compaction_error and mentions in stats.last_compaction_error
    with pytest.raises(SummarizerError, match=mentions):
        memory.compact(SHARED)
    summarizer.healed = True
    continue_and_compact(memory, SHARED, record)
    assert memory.window(SHARED)[0].type.value == "summary"


@pytest.mark.parametrize(
    "down", [raising, sleeping_then_raising], ids=["raises", "sleeps-then-raises"]
)
def test_a_failing_summarizer_loses_nothing_and_the_next_trigger_recovers(sqlite_store, down):
    outage_then_recovery(sqlite_store, Switchable(down), mentions="injected")


def test_anthropic_timeouts_are_retried_a_bounded_number_of_times(sqlite_store, monkeypatch):
    import anthropic
    import httpx2

    from chat_memory import AnthropicSummarizer

    calls = []

    def handler(request: Any) -> Any:
        calls.append(request)
        raise httpx2.ReadTimeout("timed out (injected)", request=request)

    monkeypatch.setattr(
        anthropic._base_client.BaseClient, "_calculate_retry_timeout", lambda *a, **k: 0.0
    )
    client = anthropic.Anthropic(
        api_key="test",
        max_retries=2,
        timeout=1.0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    summarizer = Switchable(AnthropicSummarizer(model="claude-haiku-5-5", client=client).summarize)
    outage_then_recovery(sqlite_store, summarizer, mentions="APITimeoutError")
    # each failed summary: the first try and max_retries=2, then a clear SummarizerError
    assert summarizer.failures >= 2 and len(calls) == 3 * summarizer.failures
