"""The overflow safety net (docs/safety-nets.md): when the model answers that the prompt is
too long, compact the conversation by force and send the request once more.

:func:`with_overflow_retry` wraps a sync call with a :class:`~chat_memory.ChatMemory`;
:func:`awith_overflow_retry` a coroutine, with an :class:`~chat_memory.AsyncChatMemory`
(awaited) or a ``ChatMemory`` (its calls run in a worker thread, so the loop never waits)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .aio import AsyncChatMemory
from .engine import ChatMemory
from .errors import ContextOverflowError, is_context_overflow

#: the logger this net used while it lived in chat_memory.compaction (log settings name it)
log = logging.getLogger("chat_memory.compaction")

T = TypeVar("T")


def with_overflow_retry(memory: ChatMemory, conversation_id: str, send: Callable[[], T]) -> T:
    """The overflow safety net: call ``send`` (which renders the window and calls the model);
    when the model answers that the prompt is too long (:func:`is_context_overflow`), compact
    the conversation by force (``memory.compact(conversation_id, force=True)``) and call it
    once more. A second overflow is a :class:`ContextOverflowError` naming the conversation
    and the window sizes before and after."""
    try:
        return send()
    except Exception as first:
        if not is_context_overflow(first):
            raise
        before = _compact_after_overflow(memory, conversation_id, first)
    try:
        return send()
    except Exception as second:
        if not is_context_overflow(second):
            raise
        after = memory.stats(conversation_id).window_tokens
        raise _overflowed_twice(conversation_id, before, after, second) from second


async def awith_overflow_retry(
    memory: ChatMemory | AsyncChatMemory, conversation_id: str, send: Callable[[], Awaitable[T]]
) -> T:
    """:func:`with_overflow_retry` for a coroutine ``send``. ``memory`` is an
    :class:`~chat_memory.AsyncChatMemory` (awaited) or a :class:`~chat_memory.ChatMemory`
    (its calls run in a worker thread)."""
    try:
        return await send()
    except Exception as first:
        if not is_context_overflow(first):
            raise
        if isinstance(memory, AsyncChatMemory):
            before = (await memory.stats(conversation_id)).window_tokens
            result = await memory.compact(conversation_id, force=True)
            _log_forced(conversation_id, first, result.archived_events)
        else:
            before = await asyncio.to_thread(
                _compact_after_overflow, memory, conversation_id, first
            )
    try:
        return await send()
    except Exception as second:
        if not is_context_overflow(second):
            raise
        if isinstance(memory, AsyncChatMemory):
            after = (await memory.stats(conversation_id)).window_tokens
        else:
            after = (await asyncio.to_thread(memory.stats, conversation_id)).window_tokens
        raise _overflowed_twice(conversation_id, before, after, second) from second


def _compact_after_overflow(memory: ChatMemory, conversation_id: str, error: Exception) -> int:
    """Force a compaction after the model refused the request; the window tokens before it."""
    before = memory.stats(conversation_id).window_tokens
    result = memory.compact(conversation_id, force=True)
    _log_forced(conversation_id, error, result.archived_events)
    return before


def _log_forced(conversation_id: str, error: Exception, archived: int) -> None:
    log.warning(
        "chat-memory: the model refused %r as too long (%s); a forced compaction archived %d events",
        conversation_id,
        error,
        archived,
    )


def _overflowed_twice(
    conversation_id: str, before: int, after: int, error: Exception
) -> ContextOverflowError:
    return ContextOverflowError(
        f"the model refused conversation {conversation_id!r} as longer than its context window twice: "
        f"first with {before} window tokens, then, after a forced compaction, with {after} "
        f"(the newest turn alone is too long, or the system prompt and tools are): {error}"
    )


__all__ = ["awith_overflow_retry", "with_overflow_retry"]
