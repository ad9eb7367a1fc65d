"""The fork property test (tests/engine/test_fork.py, parts in tests/support/forks.py) on the real redis-server and the real Redis
Cluster, sync and with the native async store: random traffic and strategies, the model window
and history recorded at every seq, a fork at each seq shows exactly them, and later writes to
either side never show in the other. Fewer examples than on memory:// (each is a few hundred
scripts against a real server); the timeline logic they exercise is the same as there."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, MemoryConfig
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from tests.fixtures.redis import unique_prefix
from tests.support.forks import (
    OPERATIONS,
    STRATEGIES,
    check_forks,
    check_forks_async,
    check_independent,
    summarize,
    traffic,
)
from tests.support.helpers import fixed_tokens

BACKENDS = [
    pytest.param("redis_server", marks=pytest.mark.redis, id="server"),
    pytest.param("redis_cluster", marks=pytest.mark.redis_cluster, id="cluster"),
]
EXAMPLES = 6


@pytest.fixture(params=BACKENDS)
def server_url(request: pytest.FixtureRequest) -> str:
    """The real server's URL, then the real cluster's; every example takes a fresh prefix."""
    return str(request.getfixturevalue(request.param).url)


def _memory(url: str, config: dict[str, Any]) -> ChatMemory:
    store = RedisStore.from_url(url)
    return ChatMemory(store, MemoryConfig(**config), summarize, token_counter=fixed_tokens)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=st.sampled_from(STRATEGIES), operations=OPERATIONS)
def test_a_fork_at_any_seq_shows_exactly_the_window_and_history_then(
    server_url: str, config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    memory = _memory(f"{server_url}?prefix={unique_prefix()}", config)
    try:
        seen = traffic(memory, operations)
        check_forks(memory, seen)
        check_independent(memory, max(seen))
    finally:
        memory.store.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=st.sampled_from(STRATEGIES[1:]), operations=OPERATIONS)
def test_a_native_async_fork_at_any_seq_shows_exactly_the_window_then(
    server_url: str, config: dict[str, Any], operations: list[tuple[str, Any, int]]
) -> None:
    url = f"{server_url}?prefix={unique_prefix()}"
    writer = _memory(url, config)
    try:
        seen = traffic(writer, operations)
    finally:
        writer.store.close()

    async def check() -> None:
        store = AsyncRedisStore.from_url(url)
        memory = AsyncChatMemory(store, MemoryConfig(**config), summarize, fixed_tokens)
        try:
            await check_forks_async(memory, seen)
        finally:
            await memory.aclose()

    asyncio.run(check())
