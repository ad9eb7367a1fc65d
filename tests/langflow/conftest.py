"""The Langflow extension's tests: they import the installed chat-memory (the worktree comes
last on sys.path, only for tests/services)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO))

FULL = os.environ.get("CHAT_MEMORY_LANGFLOW_FULL") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL:
        return
    skip = pytest.mark.skip(reason="slow Langflow check: set CHAT_MEMORY_LANGFLOW_FULL=1")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    from tests.services.redis import start_redis

    server = start_redis(root=tmp_path_factory.mktemp("redis"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def exported() -> dict[str, dict[str, Any]]:
    """Each template as the command line exports it (exported once per test run)."""
    from flows import cli_export

    return {name: cli_export(name) for name in ("compacting-chat", "remembering-chat")}
