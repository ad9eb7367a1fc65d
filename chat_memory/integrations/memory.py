"""The memory an adapter is given: a :class:`~chat_memory.ChatMemory` or an
:class:`~chat_memory.AsyncChatMemory`.

A short adapter body is plain code, twice: the sync path calls the ``ChatMemory``
(:func:`sync_memory` refuses an ``AsyncChatMemory``, which a sync path would have to block
the loop for), the async path awaits an ``AsyncChatMemory`` and runs a ``ChatMemory``'s sync
path in one worker thread (``asyncio.to_thread``).

A body long enough that two copies would drift (the LangChain adapters' merge by message id)
is written once as memory steps: a generator that yields typed memory calls
(``window = yield from window_of(cid)``, each built from the ``ChatMemory`` method itself, so
a wrong argument is a type error) and receives their results; :func:`run_sync` drives it on
a sync path and :func:`arun_memory` on an async one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..aio import AsyncChatMemory
from ..engine import ChatMemory
from ..errors import ConfigurationError
from ..steps import adrive, drive

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
#: What every adapter accepts as its memory.
AnyMemory = ChatMemory | AsyncChatMemory


def check_memory(memory: AnyMemory, where: str) -> AnyMemory:
    """``memory`` when it is a ChatMemory or an AsyncChatMemory; a ConfigurationError naming it otherwise."""
    if not isinstance(memory, (ChatMemory, AsyncChatMemory)):
        raise ConfigurationError(
            f"{where}: memory ({memory!r}) must be a ChatMemory or an AsyncChatMemory"
        )
    return memory


def sync_refused(where: str, instead: str) -> ConfigurationError:
    """The error of a sync path given an AsyncChatMemory (or its tool), saying what to use."""
    return ConfigurationError(
        f"{where} is synchronous and the memory is an AsyncChatMemory: use {instead} instead, "
        "or pass a ChatMemory"
    )


def sync_memory(memory: AnyMemory, where: str, instead: str) -> ChatMemory:
    """``memory`` for a sync path: a ChatMemory; an AsyncChatMemory is refused
    (:func:`sync_refused`) before anything runs."""
    if isinstance(memory, AsyncChatMemory):
        raise sync_refused(where, instead)
    return memory


# -- memory steps ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryCall:
    """Call the memory's method ``name``: the name of a :class:`ChatMemory` method, taken from
    the method itself when the step was defined (an :class:`AsyncChatMemory` has each as a
    coroutine, awaited)."""

    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


#: A body of memory calls returning ``T`` (the only thing it yields is a :class:`MemoryCall`).
MemorySteps = Generator[MemoryCall, Any, T]


def memory_step(
    method: Callable[Concatenate[ChatMemory, P], R],
) -> Callable[P, MemorySteps[R]]:
    """The step of one ChatMemory method: ``memory_step(ChatMemory.window)(cid)`` yields a
    :class:`MemoryCall` and returns the method's result, its arguments and result typed after
    ``method``. The name is read here, once, so a method patched later (a test wrapping
    ``ChatMemory.history``) is still the one called, by its name."""
    name = method.__name__

    def step(*args: P.args, **kwargs: P.kwargs) -> MemorySteps[R]:
        result: R = yield MemoryCall(name, args, kwargs)
        return result

    step.__name__ = step.__qualname__ = f"{name}_step"
    step.__doc__ = f":meth:`ChatMemory.{name}` as a step."
    return step


#: The memory calls the adapters' steps make.
window_of = memory_step(ChatMemory.window)
model_window_of = memory_step(ChatMemory.model_window)
history_of = memory_step(ChatMemory.history)
add_to = memory_step(ChatMemory.add)
retract_from = memory_step(ChatMemory.retract)
clear_conversation = memory_step(ChatMemory.clear)


def run_sync(memory: AnyMemory, steps: MemorySteps[T], where: str, instead: str) -> T:
    """Run ``steps`` against a ChatMemory in this thread; an AsyncChatMemory is refused
    (:func:`sync_refused`) before anything runs."""
    return _run(steps, sync_memory(memory, where, instead))


def _run(steps: MemorySteps[T], memory: ChatMemory) -> T:
    return drive(steps, lambda step: getattr(memory, step.name)(*step.args, **step.kwargs))


async def arun_memory(steps: MemorySteps[T], memory: AnyMemory) -> T:
    """Run ``steps`` from a coroutine: an AsyncChatMemory's calls are awaited on this loop, no
    thread involved; a ChatMemory runs them all in one worker thread (``asyncio.to_thread``),
    so the loop never waits on it."""
    if isinstance(memory, ChatMemory):
        return await asyncio.to_thread(_run, steps, memory)
    async_memory = memory
    return await adrive(
        steps, lambda step: getattr(async_memory, step.name)(*step.args, **step.kwargs)
    )


__all__ = [
    "AnyMemory",
    "MemoryCall",
    "MemorySteps",
    "add_to",
    "arun_memory",
    "check_memory",
    "clear_conversation",
    "history_of",
    "memory_step",
    "model_window_of",
    "retract_from",
    "run_sync",
    "sync_memory",
    "sync_refused",
    "window_of",
]
