"""Which summarizers each memory class takes: ChatMemory refuses an async one when it is built
(it could only call it without awaiting, and every compaction would fall back as if the
summarizer were down), naming AsyncChatMemory; AsyncChatMemory takes both kinds (a sync one
runs in a worker thread); a summarizer that yields its answer is refused by both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anthropic
import pytest

from chat_memory import (
    AsyncAnthropicSummarizer,
    AsyncChatMemory,
    ChatMemory,
    ConfigurationError,
    Event,
    MemoryConfig,
    open_store,
)
from tests.support.helpers import fixed_tokens

CONFIG = MemoryConfig(
    compaction_strategy="recursive_summarization",
    max_events=4,
    max_events_to_keep=2,
    overlap_size=1,
)


class AsyncMethodSummarizer:
    async def summarize(
        self, previous: str | None, events: list[Event], upcoming: list[Event]
    ) -> str:
        return "the async summary"


async def async_function(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return "the async summary"


class AsyncCallable:
    async def __call__(
        self, previous: str | None, events: list[Event], upcoming: list[Event]
    ) -> str:
        return "the async summary"


def sync_function(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return "the sync summary"


def generator_function(
    previous: str | None, events: list[Event], upcoming: list[Event]
) -> Iterator[str]:
    yield "a summary, yielded"


ASYNC_SUMMARIZERS = {
    "async-summarize-method": AsyncMethodSummarizer(),
    "async-function": async_function,
    "async-callable-object": AsyncCallable(),
    "AsyncAnthropicSummarizer": AsyncAnthropicSummarizer(
        client=anthropic.AsyncAnthropic(api_key="test")
    ),
}


@pytest.mark.parametrize("summarizer", ASYNC_SUMMARIZERS.values(), ids=ASYNC_SUMMARIZERS.keys())
def test_chat_memory_refuses_an_async_summarizer_naming_async_chat_memory(summarizer):
    with pytest.raises(ConfigurationError) as refused:
        ChatMemory(open_store("memory://"), CONFIG, summarizer=summarizer)
    message = str(refused.value)
    assert "AsyncChatMemory" in message and "summarizer" in message, message


def test_the_refusal_comes_whatever_the_strategy():
    """A summarizer given to a memory that does not summarise yet is still a mistake in the code
    that builds it: caught before the strategy is switched on."""
    with pytest.raises(ConfigurationError, match="AsyncChatMemory"):
        ChatMemory(open_store("memory://"), MemoryConfig(), summarizer=async_function)


@pytest.mark.parametrize("memory_class", [ChatMemory, AsyncChatMemory])
def test_a_summarizer_that_yields_its_answer_is_refused_by_both_memories(memory_class):
    with pytest.raises(ConfigurationError, match="generator"):
        memory_class(open_store("memory://"), CONFIG, summarizer=generator_function)


@pytest.mark.parametrize(
    "summarizer, text",
    [
        (AsyncMethodSummarizer(), "the async summary"),
        (AsyncCallable(), "the async summary"),  # awaited too, not run in a thread
        (sync_function, "the sync summary"),
    ],
    ids=["async", "async-callable-object", "sync-in-a-thread"],
)
def test_async_chat_memory_summarises_with_either_kind(summarizer, text):
    async def scenario() -> list[Event]:
        memory = AsyncChatMemory(
            open_store("memory://"), CONFIG, summarizer=summarizer, token_counter=fixed_tokens
        )
        await memory.add("c", [Event.user(f"u{i}") for i in range(5)])
        return await memory.window("c")

    window = asyncio.run(scenario())
    assert window[0].content == text


def test_chat_memory_summarises_with_a_sync_function():
    memory = ChatMemory(
        open_store("memory://"), CONFIG, summarizer=sync_function, token_counter=fixed_tokens
    )
    memory.add("c", [Event.user(f"u{i}") for i in range(5)])
    assert memory.window("c")[0].content == "the sync summary"
