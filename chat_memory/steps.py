"""The engine's decisions as steps that do no I/O themselves (sans-I/O), so that one copy of
them drives a sync store (:func:`run`) and an async one (:func:`arun`).

A step function is a generator: it yields what it needs done (:class:`StoreCall`,
:class:`Summarize`, :class:`Sleep`), receives the answer (or has the error thrown into it
at the ``yield``, so its ``try``/``except`` work as in plain code) and returns its value.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from .events import Event
from .summarizer import Summarizer, arun_summarizer, run_summarizer

T = TypeVar("T")


@dataclass(frozen=True)
class StoreCall:
    """Call ``store.<method>(*args)`` (the same method names on a sync and an async store; a
    ``ChatMemory`` and an ``AsyncChatMemory`` serve as the target too, see :func:`arun_memory`)."""

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Summarize:
    """Ask the summarizer for a summary (see :func:`~chat_memory.summarizer.run_summarizer`)."""

    summarizer: Summarizer
    previous: str | None
    events: list[Event]
    upcoming: list[Event]
    #: the seqs (first, last) of ``events`` archived earlier without a summary, if any
    gap: tuple[int, int] | None = None


@dataclass(frozen=True)
class Sleep:
    """Pause (a compare-and-swap retry's backoff): ``time.sleep`` or ``asyncio.sleep``."""

    seconds: float


Step = StoreCall | Summarize | Sleep
Steps = Generator[Step, Any, T]


def call(method: str, *args: Any) -> Generator[Step, Any, Any]:
    """``result = yield from call("load", cid)``: one store call as a step."""
    return (yield StoreCall(method, args))


def run(steps: Steps[T], store: Any) -> T:
    """Drive ``steps`` against a sync store, in this thread."""
    return _drive(steps, lambda step: _do(step, store))


def _do(step: Step, store: Any) -> Any:
    if isinstance(step, StoreCall):
        return getattr(store, step.method)(*step.args)
    if isinstance(step, Summarize):
        return run_summarizer(
            step.summarizer, step.previous, step.events, step.upcoming, gap=step.gap
        )
    time.sleep(step.seconds)
    return None


def _drive(steps: Steps[T], do: Any) -> T:
    try:
        step = next(steps)
        while True:
            try:
                answer = do(step)
            except Exception as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun(steps: Steps[T], store: Any) -> T:
    """Drive ``steps`` against an async store (:class:`~chat_memory.backends.aio.AsyncStore`):
    store calls and the summarizer are awaited, pauses are ``asyncio.sleep``; nothing blocks
    the event loop (a sync summarizer runs in a worker thread)."""
    try:
        step = next(steps)
        while True:
            try:
                answer = await _ado(step, store)
            except Exception as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _ado(step: Step, store: Any) -> Any:
    if isinstance(step, StoreCall):
        return await getattr(store, step.method)(*step.args)
    if isinstance(step, Summarize):
        return await arun_summarizer(
            step.summarizer, step.previous, step.events, step.upcoming, gap=step.gap
        )
    await asyncio.sleep(step.seconds)
    return None


async def arun_memory(steps: Steps[T], memory: Any) -> T:
    """Drive ``steps`` of memory calls (``yield from call("window", cid)``) from a coroutine:
    an :class:`~chat_memory.AsyncChatMemory` is awaited on this loop, no thread involved; a
    sync :class:`~chat_memory.ChatMemory` runs them all in one worker thread
    (``asyncio.to_thread``), so the loop never waits on it."""
    from .aio import AsyncChatMemory  # aio imports this module

    if isinstance(memory, AsyncChatMemory):
        return await arun(steps, memory)
    return await asyncio.to_thread(run, steps, memory)


def is_async_summarizer(summarizer: Any) -> bool:
    """True when ``summarizer.summarize`` is a coroutine function (``async def``)."""
    return inspect.iscoroutinefunction(getattr(summarizer, "summarize", None))


__all__ = [
    "Sleep",
    "Step",
    "Steps",
    "StoreCall",
    "Summarize",
    "arun",
    "arun_memory",
    "call",
    "is_async_summarizer",
    "run",
]
