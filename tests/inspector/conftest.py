"""The inspector's fixtures: a seeded store on SQLite and on a real redis-server, and a running
inspector over it on a free loopback port. Read-only tests share one seeded store per module
and store (``seeded``); tests that write get their own (``fresh_seeded``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from chat_memory import open_store
from chat_memory.inspector import InspectorServer, serve
from tests.inspector.seed import CONFIG, Seeded, seed

STORES = ["sqlite", pytest.param("redis", marks=pytest.mark.redis)]


def opened(request: pytest.FixtureRequest, kind: str, folder: object) -> object:
    """A new empty store of ``kind`` (a SQLite file in ``folder``, or a key prefix of its own
    on the suite's redis-server)."""
    if kind == "sqlite":
        return open_store(f"sqlite:///{folder}/chat-{uuid.uuid4().hex[:8]}.db")
    server = request.getfixturevalue("redis_server")
    return open_store(f"{server.url}?prefix=inspector-{uuid.uuid4().hex[:8]}")


def seeded_on(
    request: pytest.FixtureRequest, folder: object, turns: int, batch: int
) -> Iterator[Seeded]:
    store = opened(request, request.param, folder)
    try:
        yield seed(store, turns=turns, batch=batch)
    finally:
        store.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=STORES)
def seeded(request, tmp_path_factory) -> Iterator[Seeded]:
    """A small seeded store (24 turns) on SQLite, then on Redis, shared by a module's readers."""
    yield from seeded_on(request, tmp_path_factory.mktemp("inspector"), 24, 12)


@pytest.fixture(params=STORES)
def fresh_seeded(request, tmp_path) -> Iterator[Seeded]:
    """The same, seeded for one test (it writes)."""
    yield from seeded_on(request, tmp_path, 24, 12)


def running(seeded: Seeded, **options: object) -> Iterator[InspectorServer]:
    server = serve(seeded.store, CONFIG, port=0, **options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def reader(seeded: Seeded) -> Iterator[InspectorServer]:
    """A read-only inspector over the shared seeded store."""
    yield from running(seeded)


@pytest.fixture
def writer(fresh_seeded: Seeded) -> Iterator[InspectorServer]:
    """An inspector in write mode over a store seeded for the test."""
    yield from running(fresh_seeded, writable=True)
