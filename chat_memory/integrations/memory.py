"""The memory an adapter is given: a :class:`~chat_memory.ChatMemory` or an
:class:`~chat_memory.AsyncChatMemory`.

An adapter writes what it does with the memory once, as steps of memory calls
(:mod:`chat_memory.steps`: ``window = yield from call("model_window", cid)``), and runs them
with :func:`run_sync` on its sync paths and :func:`~chat_memory.steps.arun_memory` on its
async ones: an ``AsyncChatMemory`` is awaited, a ``ChatMemory`` runs in a worker thread. A
sync path given an ``AsyncChatMemory`` is refused (it would have to block the loop or start
a loop inside one)."""

from __future__ import annotations

from typing import TypeVar

from ..aio import AsyncChatMemory
from ..engine import ChatMemory
from ..errors import ConfigurationError
from ..steps import Steps, arun_memory, run

T = TypeVar("T")
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


def run_sync(memory: AnyMemory, steps: Steps[T], where: str, instead: str) -> T:
    """Run ``steps`` against a ChatMemory in this thread; an AsyncChatMemory is refused
    (:func:`sync_refused`) before anything runs."""
    if isinstance(memory, AsyncChatMemory):
        raise sync_refused(where, instead)
    return run(steps, memory)


__all__ = ["AnyMemory", "arun_memory", "check_memory", "run_sync", "sync_refused"]
