"""S3 reads that compactions keep racing: a read whose segment a concurrent compaction removed
tries again from a fresh head, at least READ_ATTEMPTS times and for at least READ_PATIENCE
seconds, then ends in a ConcurrencyError (bounded, never a partial archive)."""

from __future__ import annotations

import time

import pytest

from chat_memory import Event
from chat_memory.backends.s3 import S3Store
from chat_memory.backends.s3 import objects as s3_objects
from chat_memory.backends.s3.objects import READ_ATTEMPTS, SegmentGone
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError


def _store(client: object, attempts: int = 2) -> S3Store:
    return S3Store(
        client, "racing-reads", "p", backoff=Backoff(attempts=attempts, base=0.001, cap=0.002)
    )


def test_a_read_keeps_trying_for_its_patience_after_its_attempts(s3_mock_client, monkeypatch):
    monkeypatch.setattr(s3_objects, "READ_PATIENCE", 0.2)
    store = _store(s3_mock_client)  # the backoff alone would give two attempts
    started = time.monotonic()
    delays = list(store.racing_reads())
    assert len(delays) > READ_ATTEMPTS
    assert time.monotonic() - started >= 0.2
    assert all(0 <= d <= 0.002 for d in delays)


def test_a_read_that_always_races_ends_in_a_concurrency_error(s3_mock_client, monkeypatch):
    monkeypatch.setattr(s3_objects, "READ_PATIENCE", 0.05)
    store = _store(s3_mock_client)
    store.append("c", [Event.user("hello")])
    tries: list[int] = []

    def always_gone(head: object) -> None:
        tries.append(1)
        raise SegmentGone("a segment")

    with pytest.raises(ConcurrencyError, match="kept racing with compactions"):
        store._consistently("c", always_gone)
    assert len(tries) >= READ_ATTEMPTS


def test_a_read_that_wins_once_returns_what_it_read(s3_mock_client):
    store = _store(s3_mock_client)
    store.append("c", [Event.user("hello")])
    outcomes = iter([SegmentGone("x"), SegmentGone("y"), None])

    def gone_twice(head: object) -> str:
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return "read"

    assert store._consistently("c", gone_twice) == "read"
