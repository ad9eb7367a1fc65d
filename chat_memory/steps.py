"""The engine's decisions as steps that do no I/O themselves (sans-I/O), so that one copy of
them drives a sync store (:func:`run`) and an async one (:func:`arun`).

A step function is a generator: it yields what it needs done (a :data:`Step`: a
:class:`StoreCall`, :class:`Summarize` or :class:`Sleep`), receives the answer (or has the
error thrown into it at the ``yield``, so its ``try``/``except`` work as in plain code) and
returns its value. ``Steps[T]`` is such a generator returning ``T``.

The store operations are typed step functions mirroring the :class:`~chat_memory.Store`
protocol and its abilities (``snapshot = yield from steps.load(cid)`` is a ``Snapshot``), each
built by :func:`store_call` from the protocol's own method (``Store.load``), so a wrong
argument, a wrong result type or a renamed method is a type error, not a failing test. An
async store has the same methods as coroutines (``tests/test_architecture.py`` checks it);
:func:`arun` awaits them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from .backends.base import (
    AppendsWithoutWindow,
    ChecksToolPairs,
    CompactionPlan,
    CompactsWhileAppending,
    Dumps,
    Forks,
    KeepsLifecycle,
    Retracts,
    Snapshot,
    Store,
    ToolPairCheck,
)
from .backends.timeline import ConversationDump
from .events import Event
from .lifecycle.records import ConversationRecord, ErasureCounts
from .search import SearchQuery, SearchResult
from .summarizer import Summarizer, arun_summarizer, run_summarizer

if TYPE_CHECKING:
    from .backends.aio import AsyncStore

T = TypeVar("T")
#: a request of some step set (the engine's, the Redis store's, the adapters')
Q = TypeVar("Q")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True)
class StoreCall:
    """Call the store's method of the same name as ``method``, a method of the store protocol
    itself (``Store.load``, ``Retracts.retract``; a store's own I/O method for its internals),
    never a free string. Built by :func:`store_call`, which checks the arguments against it."""

    method: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The method's name, looked up on the store (sync or async)."""
        return self.method.__name__


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


#: Everything a step may ask for (a closed set: the drivers handle each).
Step = StoreCall | Summarize | Sleep
Steps = Generator[Step, Any, T]


def store_call(
    method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs
) -> Steps[R]:
    """``result = yield from store_call(Store.load, cid)``: one call of the store's ``method``
    as a step, its arguments and its result typed after ``method``."""
    result: R = yield StoreCall(method, args, kwargs)
    return result


# -- the store operations the engine uses, as typed steps -----------------------------------


def load(conversation_id: str) -> Steps[Snapshot]:
    """:meth:`Store.load <chat_memory.Store.load>` as a step."""
    return store_call(Store.load, conversation_id)


def append(
    conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
) -> Steps[Snapshot]:
    """:meth:`Store.append <chat_memory.Store.append>` as a step; with ``check``,
    :meth:`ChecksToolPairs.append <chat_memory.backends.base.ChecksToolPairs.append>` (only
    for a store with that ability)."""
    if check is not None:
        return store_call(ChecksToolPairs.append, conversation_id, events, check)
    return store_call(Store.append, conversation_id, events)


def append_compacting(
    conversation_id: str,
    events: Sequence[Event],
    planner: Callable[[Snapshot], CompactionPlan | None],
    check: ToolPairCheck | None = None,
) -> Steps[tuple[Snapshot, bool]]:
    """:meth:`CompactsWhileAppending.append_compacting
    <chat_memory.backends.base.CompactsWhileAppending.append_compacting>` as a step; with
    ``check``, :meth:`ChecksToolPairs.append_compacting
    <chat_memory.backends.base.ChecksToolPairs.append_compacting>`."""
    if check is not None:
        return store_call(
            ChecksToolPairs.append_compacting, conversation_id, events, planner, check
        )
    return store_call(CompactsWhileAppending.append_compacting, conversation_id, events, planner)


def append_without_window(
    conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
) -> Steps[list[Event]]:
    """:meth:`AppendsWithoutWindow.append_without_window
    <chat_memory.backends.base.AppendsWithoutWindow.append_without_window>` as a step; with
    ``check``, :meth:`ChecksToolPairs.append_without_window
    <chat_memory.backends.base.ChecksToolPairs.append_without_window>`."""
    if check is not None:
        return store_call(ChecksToolPairs.append_without_window, conversation_id, events, check)
    return store_call(AppendsWithoutWindow.append_without_window, conversation_id, events)


def find_events(
    conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
) -> Steps[list[Event]]:
    """:meth:`AppendsWithoutWindow.find_events
    <chat_memory.backends.base.AppendsWithoutWindow.find_events>` as a step."""
    return store_call(AppendsWithoutWindow.find_events, conversation_id, event_ids, tool_call_ids)


def apply(conversation_id: str, plan: CompactionPlan) -> Steps[bool]:
    """:meth:`Store.apply <chat_memory.Store.apply>` as a step."""
    return store_call(Store.apply, conversation_id, plan)


def history(conversation_id: str) -> Steps[list[Event]]:
    """:meth:`Store.history <chat_memory.Store.history>` as a step."""
    return store_call(Store.history, conversation_id)


def find_tool_events(conversation_id: str, tool_call_ids: Collection[str]) -> Steps[list[Event]]:
    """:meth:`Store.find_tool_events <chat_memory.Store.find_tool_events>` as a step."""
    return store_call(Store.find_tool_events, conversation_id, tool_call_ids)


def search(conversation_id: str, query: SearchQuery) -> Steps[SearchResult]:
    """:meth:`Store.search <chat_memory.Store.search>` as a step."""
    return store_call(Store.search, conversation_id, query)


def record_compaction_error(conversation_id: str, message: str | None) -> Steps[None]:
    """:meth:`Store.record_compaction_error <chat_memory.Store.record_compaction_error>` as a step."""
    return store_call(Store.record_compaction_error, conversation_id, message)


def compactions(conversation_id: str) -> Steps[list[dict[str, Any]]]:
    """:meth:`Store.compactions <chat_memory.Store.compactions>` as a step."""
    return store_call(Store.compactions, conversation_id)


def retract(conversation_id: str, event_ids: Collection[str]) -> Steps[list[Event]]:
    """:meth:`Retracts.retract <chat_memory.backends.base.Retracts.retract>` as a step."""
    return store_call(Retracts.retract, conversation_id, event_ids)


def retracted(conversation_id: str) -> Steps[list[Event]]:
    """:meth:`Retracts.retracted <chat_memory.backends.base.Retracts.retracted>` as a step."""
    return store_call(Retracts.retracted, conversation_id)


def fork(conversation_id: str, new_conversation_id: str, at: int | None) -> Steps[Snapshot]:
    """:meth:`Forks.fork <chat_memory.backends.base.Forks.fork>` as a step."""
    return store_call(Forks.fork, conversation_id, new_conversation_id, at)


def dump(conversation_id: str) -> Steps[ConversationDump | None]:
    """:meth:`Dumps.dump <chat_memory.backends.base.Dumps.dump>` as a step."""
    return store_call(Dumps.dump, conversation_id)


def restore(conversation: ConversationDump) -> Steps[None]:
    """:meth:`Dumps.restore <chat_memory.backends.base.Dumps.restore>` as a step."""
    return store_call(Dumps.restore, conversation)


# the lifecycle steps (docs/lifecycle.md): KeepsLifecycle's methods


def conversation_record(conversation_id: str) -> Steps[ConversationRecord | None]:
    """:meth:`KeepsLifecycle.conversation_record
    <chat_memory.backends.base.KeepsLifecycle.conversation_record>` as a step."""
    return store_call(KeepsLifecycle.conversation_record, conversation_id)


def set_metadata(
    conversation_id: str,
    title: str | None,
    tags: Sequence[str] | None,
    values: Mapping[str, Any],
) -> Steps[ConversationRecord]:
    """:meth:`KeepsLifecycle.set_metadata <chat_memory.backends.base.KeepsLifecycle.set_metadata>`
    as a step."""
    return store_call(KeepsLifecycle.set_metadata, conversation_id, title, tags, values)


def list_conversations(
    scope: str, tag: str | None, offset: int, limit: int
) -> Steps[list[ConversationRecord]]:
    """:meth:`KeepsLifecycle.list_conversations
    <chat_memory.backends.base.KeepsLifecycle.list_conversations>` as a step."""
    return store_call(KeepsLifecycle.list_conversations, scope, tag, offset, limit)


def idle_conversations(scope: str | None, cutoff: datetime, limit: int) -> Steps[list[str]]:
    """:meth:`KeepsLifecycle.idle_conversations
    <chat_memory.backends.base.KeepsLifecycle.idle_conversations>` as a step."""
    return store_call(KeepsLifecycle.idle_conversations, scope, cutoff, limit)


def delete_idle(conversation_id: str, cutoff: datetime) -> Steps[ErasureCounts | None]:
    """:meth:`KeepsLifecycle.delete_idle <chat_memory.backends.base.KeepsLifecycle.delete_idle>`
    as a step."""
    return store_call(KeepsLifecycle.delete_idle, conversation_id, cutoff)


def erase(conversation_id: str, guard_seconds: float) -> Steps[ErasureCounts]:
    """:meth:`KeepsLifecycle.erase <chat_memory.backends.base.KeepsLifecycle.erase>` as a step."""
    return store_call(KeepsLifecycle.erase, conversation_id, guard_seconds)


def erase_scope(scope: str, limit: int, guard_seconds: float) -> Steps[ErasureCounts]:
    """:meth:`KeepsLifecycle.erase_scope <chat_memory.backends.base.KeepsLifecycle.erase_scope>`
    as a step."""
    return store_call(KeepsLifecycle.erase_scope, scope, limit, guard_seconds)


def erase_namespaces(scope: str, guard_seconds: float) -> Steps[ErasureCounts]:
    """:meth:`KeepsLifecycle.erase_namespaces
    <chat_memory.backends.base.KeepsLifecycle.erase_namespaces>` as a step."""
    return store_call(KeepsLifecycle.erase_namespaces, scope, guard_seconds)


def sweep_namespaces(scope: str | None, now: datetime) -> Steps[tuple[int, ErasureCounts]]:
    """:meth:`KeepsLifecycle.sweep_namespaces
    <chat_memory.backends.base.KeepsLifecycle.sweep_namespaces>` as a step."""
    return store_call(KeepsLifecycle.sweep_namespaces, scope, now)


def summarize(
    summarizer: Summarizer,
    previous: str | None,
    events: list[Event],
    upcoming: list[Event],
    gap: tuple[int, int] | None = None,
) -> Steps[str]:
    """``text = yield from summarize(...)``: a :class:`Summarize` step, its answer typed."""
    text: str = yield Summarize(summarizer, previous, events, upcoming, gap)
    return text


#: The typed store steps above, by the protocol method each one calls.
STORE_STEPS = (
    load,
    append,
    append_compacting,
    append_without_window,
    find_events,
    apply,
    history,
    find_tool_events,
    search,
    record_compaction_error,
    compactions,
    retract,
    retracted,
    fork,
    dump,
    restore,
    conversation_record,
    set_metadata,
    list_conversations,
    idle_conversations,
    delete_idle,
    erase,
    erase_scope,
    erase_namespaces,
    sweep_namespaces,
)


# -- the drivers --------------------------------------------------------------------------


def drive(requests: Generator[Q, Any, T], perform: Callable[[Q], Any]) -> T:
    """Run a generator of requests to its return value: each request it yields is performed
    and the answer sent back, or the error thrown in at its ``yield``. The one loop behind
    every driver: the engine's (:func:`run`), the Redis store's and the adapters'."""
    try:
        request = next(requests)
        while True:
            try:
                answer = perform(request)
            except Exception as exc:
                request = requests.throw(exc)
            else:
                request = requests.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(requests: Generator[Q, Any, T], perform: Callable[[Q], Awaitable[Any]]) -> T:
    """:func:`drive` with each request awaited."""
    try:
        request = next(requests)
        while True:
            try:
                answer = await perform(request)
            except Exception as exc:
                request = requests.throw(exc)
            else:
                request = requests.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


def run(steps: Steps[T], store: Store) -> T:
    """Drive ``steps`` against a sync store, in this thread."""
    return drive(steps, functools.partial(_do_on, store))


def _do_on(store: Store, step: Step) -> Any:
    # every store call of the engine passes here: no property, no isinstance on the common path
    if type(step) is StoreCall:
        return getattr(store, step.method.__name__)(*step.args, **step.kwargs)
    return _do(step, store)


def _do(step: Step, store: Store) -> Any:
    if isinstance(step, StoreCall):
        return getattr(store, step.name)(*step.args, **step.kwargs)
    if isinstance(step, Summarize):
        return run_summarizer(
            step.summarizer, step.previous, step.events, step.upcoming, gap=step.gap
        )
    time.sleep(step.seconds)
    return None


async def arun(steps: Steps[T], store: AsyncStore) -> T:
    """Drive ``steps`` against an async store (:class:`~chat_memory.backends.aio.AsyncStore`):
    store calls and the summarizer are awaited, pauses are ``asyncio.sleep``; nothing blocks
    the event loop (a sync summarizer runs in a worker thread)."""
    return await adrive(steps, lambda step: _ado(step, store))


async def _ado(step: Step, store: AsyncStore) -> Any:
    if isinstance(step, StoreCall):
        return await getattr(store, step.name)(*step.args, **step.kwargs)
    if isinstance(step, Summarize):
        return await arun_summarizer(
            step.summarizer, step.previous, step.events, step.upcoming, gap=step.gap
        )
    await asyncio.sleep(step.seconds)
    return None


__all__ = [
    "STORE_STEPS",
    "Sleep",
    "Step",
    "Steps",
    "StoreCall",
    "Summarize",
    "append",
    "append_compacting",
    "append_without_window",
    "apply",
    "adrive",
    "arun",
    "drive",
    "compactions",
    "dump",
    "fork",
    "find_events",
    "find_tool_events",
    "history",
    "load",
    "record_compaction_error",
    "restore",
    "retract",
    "retracted",
    "run",
    "search",
    "store_call",
    "summarize",
    "conversation_record",
    "set_metadata",
    "list_conversations",
    "idle_conversations",
    "delete_idle",
    "erase",
    "erase_scope",
    "erase_namespaces",
    "sweep_namespaces",
]
