"""Shared fixtures. Each backend contributes a plugin module in ``tests/fixtures/`` that
defines its store fixtures and lists them in ``STORE_PARAMS`` (stores for the in-process
conformance suite) and ``STORE_URL_PARAMS`` (URL fixtures another process can open, for the
multi-process tests). A backend with a native async twin lists its async store fixtures in
``ASYNC_STORE_PARAMS`` too (the async store conformance suite and the engine suite's
``native`` kind). Adding a backend's tests means adding one module there."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pkgutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest
from hypothesis import HealthCheck, settings

# CI explores the same examples on every run (a red CI blocks a landing, so it must be
# reproducible); local runs keep drawing new ones and find what CI would not. Neither judges
# by the clock: Hypothesis' per-example deadline and its too-slow health check fail a
# correct test on a loaded machine, so both are off everywhere.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("local", **_UNTIMED)
settings.register_profile("ci", derandomize=True, print_blob=True, **_UNTIMED)
settings.load_profile("ci" if os.environ.get("CI") else "local")

pytest.register_assert_rewrite(
    "tests.fixtures",
    "tests.support.helpers",
    "tests.support.validators",
    "chat_memory.testing.store_conformance",
)

from tests import fixtures  # noqa: E402
from tests.fixtures.memory_kinds import MemoryKit, memory_kind_params, open_kit  # noqa: E402

_PLUGIN_MODULES = sorted(
    f"{fixtures.__name__}.{m.name}" for m in pkgutil.iter_modules(fixtures.__path__)
)
pytest_plugins = _PLUGIN_MODULES

STORE_PARAMS: list = []
STORE_URL_PARAMS: list = []
ASYNC_STORE_PARAMS: list = []
for _name in _PLUGIN_MODULES:
    _module = importlib.import_module(_name)
    STORE_PARAMS += getattr(_module, "STORE_PARAMS", [])
    STORE_URL_PARAMS += getattr(_module, "STORE_URL_PARAMS", [])
    ASYNC_STORE_PARAMS += getattr(_module, "ASYNC_STORE_PARAMS", [])
MEMORY_KIND_PARAMS = memory_kind_params(STORE_PARAMS, ASYNC_STORE_PARAMS)


@pytest.fixture(autouse=True)
def _validate_scripted_requests(monkeypatch):
    """Every request the scripted stand-in model receives (demo, CLI, runtime, templates) must
    be one the Messages API accepts: it sits where Claude would."""
    from chat_memory.testing.scripted_model import ScriptedModel
    from tests.support.validators import validate_anthropic_body

    answer = ScriptedModel.answer

    def validated(self, body):
        validate_anthropic_body(body)
        return answer(self, body)

    monkeypatch.setattr(ScriptedModel, "answer", validated)


@pytest.fixture(params=STORE_PARAMS)
def store(request):
    """Every backend's store, empty, one after another."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=MEMORY_KIND_PARAMS)
def memory(request) -> Iterator[MemoryKit]:
    """The engine suite's memory kinds (tests/fixtures/memory_kinds.py), one after another:
    ChatMemory on every store, AsyncChatMemory over ThreadedStore and over each native async
    store. Call it for a memory (``memory(max_turns=2)``); ``memory.store`` is its store."""
    kind, fixture = request.param
    yield from open_kit(kind, request.getfixturevalue(fixture))


#: Processes of the multi-process tests: more than the 2 cores CI has, so writers interleave.
WRITER_PROCESSES = 8


@pytest.fixture(scope="session")
def writer_processes(aws_env):
    """Spawned worker processes shared by the multi-process tests. Spawning one and importing
    the drivers costs about 1.5 s of CPU; once a run instead of once a test (15 tests) keeps
    CI inside its budget. Each task opens and closes its own store, so nothing carries over.
    Started after ``aws_env`` so the workers inherit the dummy S3 credentials."""
    pool = ProcessPoolExecutor(WRITER_PROCESSES, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        # Every test waited for its tasks, so the workers are idle and hold nothing open: ended
        # at once rather than shut down one interpreter after another (3.2-3.6 s measured, and
        # more on a loaded machine). The pool has no public handle on its processes;
        # ``_processes`` has been there since Python 3.2.
        workers = list(pool._processes.values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        pool.shutdown(wait=True)


@pytest.fixture(
    params=STORE_URL_PARAMS
    or [pytest.param(None, marks=pytest.mark.skip(reason="no shared store"))]
)
def store_url(request):
    """A URL of every backend that several processes can share, fresh for each test."""
    return request.getfixturevalue(request.param)


# tests/langflow runs in its own venv with lfx (scripts/test-langflow), never in the main run
collect_ignore = ["langflow"]
