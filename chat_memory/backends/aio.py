"""Stores for :class:`~chat_memory.AsyncChatMemory`: the :class:`AsyncStore` protocol (the
:class:`~chat_memory.backends.base.Store` methods as coroutines), :class:`ThreadedStore`
(any sync store in a bounded thread pool) and :func:`open_async_store`.

Native async stores (Redis over ``redis.asyncio``, SQL over SQLAlchemy's asyncio extension)
subclass :class:`AsyncStore`; :func:`open_async_store` finds one through the sync store the
registry has for the URL's scheme (its ``async_twin``), or by the async store's own ``schemes``
(registered like a sync store's, from this package or the ``chat_memory.stores`` entry-point
group). Every other URL gets its sync store in a :class:`ThreadedStore` — documented in
docs/async.md, never hidden: ``open_async_store(url).native`` says which it is.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, ClassVar, ParamSpec, TypeVar
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from ..events import Event
from ..search import SearchQuery, SearchResult
from .base import (
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
from .declarations import declared_class
from .failures import DriverErrors, wrap_driver_errors
from .registry import async_store_class_for, register_async, store_class_for

#: Worker threads of a :class:`ThreadedStore` unless told otherwise: enough to keep a
#: connection pool busy, few enough that 1,000 waiting conversations queue instead of
#: starting 1,000 threads.
DEFAULT_MAX_WORKERS = 16

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

#: The admission gates the running task holds (see :func:`admit`): an operation run inside
#: another (an ``AsyncChatMemory.add`` admitted as a whole, then its store calls; a layout
#: migration calling the store) must not wait for a second turn of a gate it already holds.
_HELD_GATES: ContextVar[frozenset[asyncio.Semaphore]] = ContextVar(
    "chat_memory_held_gates", default=frozenset()
)


@asynccontextmanager
async def admit(gate: asyncio.Semaphore | None) -> AsyncIterator[None]:
    """Hold one turn of ``gate`` for the running task (None: no gate, nothing to wait for).
    Re-entrant: a task that holds the gate already goes straight in. Tasks started inside
    inherit the held gate with their context, so they go straight in too (the gate bounds
    the work a task admits, not the tasks it starts)."""
    held = _HELD_GATES.get()
    if gate is None or gate in held:
        yield
        return
    async with gate:
        token = _HELD_GATES.set(held | {gate})
        try:
            yield
        finally:
            _HELD_GATES.reset(token)


class AsyncStore(ABC):
    """The store protocol as coroutines (same names, arguments and guarantees as
    :class:`~chat_memory.backends.base.Store`). ``compacts_while_appending`` says whether
    :meth:`append_compacting` may be used (one write per turn for non-summarising strategies);
    ``checks_tool_pairs`` whether the append methods take ``check`` and run it inside their
    write (:class:`~chat_memory.backends.base.ChecksToolPairs`, as coroutines)."""

    #: URL schemes :func:`open_async_store` serves with this class (natively async). A class
    #: that sets it registers itself, as a sync store does; a twin named by its sync store's
    #: ``async_twin`` need not (it then serves every scheme of that store).
    schemes: ClassVar[tuple[str, ...]] = ()
    #: True for a natively async store, False for a sync one in threads.
    native: ClassVar[bool] = True
    #: The modules a native store's driver needs; when one is missing, :func:`open_async_store`
    #: falls back to threads (or, with ``threads=False``, names ``extra`` to install).
    driver_modules: ClassVar[tuple[str, ...]] = ()
    #: The ``chat-memory[extra]`` that installs ``driver_modules``.
    extra: ClassVar[str | None] = None
    #: The driver's exceptions that become :class:`~chat_memory.errors.StorageError` (as
    #: :attr:`Store.driver_errors <chat_memory.backends.base.Store.driver_errors>`).
    driver_errors: ClassVar[DriverErrors] = ()
    compacts_while_appending: bool = False
    checks_tool_pairs: bool = False

    _WRAPPED: ClassVar[tuple[str, ...]] = Store._WRAPPED

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # as for sync stores: a driver exception escaping a coroutine becomes a StorageError, here
        for name in cls._WRAPPED:
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "_wraps_driver_errors", False):
                setattr(cls, name, wrap_driver_errors(method))
        if cls.__dict__.get("schemes"):
            register_async(cls)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncStore:
        """Build the store from a URL with one of the schemes it serves (a native store
        overrides this; :class:`ThreadedStore` wraps a store that is already open)."""
        raise ConfigurationError(f"{cls.__name__} cannot be opened from a URL")

    @classmethod
    def driver_modules_for(cls, scheme: str) -> tuple[str, ...]:
        """The modules a URL with this scheme needs (``driver_modules`` unless a store's
        schemes need different drivers)."""
        return cls.driver_modules

    @classmethod
    def extra_for(cls, scheme: str) -> str | None:
        """The ``chat-memory[extra]`` (or extras, comma-separated) a URL with this scheme needs."""
        return cls.extra

    @classmethod
    def preferred_for(cls, scheme: str) -> bool:
        """Whether :func:`open_async_store` picks this store for ``scheme`` by default, over
        the sync store in threads (a store whose driver is slower than threads for some
        schemes says False for those; ``threads=False`` still opens it)."""
        return True

    @classmethod
    def driver_available(cls, scheme: str = "") -> bool:
        """Whether every module a URL with ``scheme`` needs is installed (only parent packages
        of a dotted name are imported, as :func:`importlib.util.find_spec` must)."""
        return all(_installed(module) for module in cls.driver_modules_for(scheme))

    @abstractmethod
    async def load(self, conversation_id: str) -> Snapshot: ...

    @abstractmethod
    async def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot: ...

    async def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> tuple[Snapshot, bool]:
        """Append, then apply the planner's plan, if any, as a compare-and-swap. A store with
        ``compacts_while_appending`` does both in one atomic write; this default takes two,
        and the plan is simply not applied when another write came between them."""
        snapshot = await self.append(conversation_id, events)
        plan = planner(snapshot)
        return snapshot, plan is not None and await self.apply(conversation_id, plan)

    @abstractmethod
    async def apply(self, conversation_id: str, plan: CompactionPlan) -> bool: ...

    @abstractmethod
    async def history(self, conversation_id: str) -> list[Event]: ...

    @abstractmethod
    async def find_tool_events(
        self, conversation_id: str, tool_call_ids: Collection[str]
    ) -> list[Event]: ...

    @abstractmethod
    async def search(self, conversation_id: str, query: SearchQuery) -> SearchResult: ...

    @abstractmethod
    async def record_compaction_error(self, conversation_id: str, message: str | None) -> None: ...

    @abstractmethod
    async def compactions(self, conversation_id: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def clear(self, conversation_id: str) -> None: ...

    @abstractmethod
    async def conversations(self) -> list[str]: ...

    def admitted(self) -> AbstractAsyncContextManager[None]:
        """A turn at the store, held by the running task around a whole engine operation
        (:class:`~chat_memory.AsyncChatMemory` takes it around ``add``, ``window`` and
        ``search``, and gives it back while a summarizer runs): a store whose operations
        queue for a bounded pool returns its admission gate here, re-entrant (:func:`admit`),
        so that a burst of a thousand adds prepares only as many batches at once as the pool
        serves, the rest waiting as one future each. The default admits at once."""
        return nullcontext()

    async def aclose(self) -> None:
        """Release what this store owns (clients passed in by the caller are left open)."""

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ThreadedStore(AsyncStore):
    """Any sync :class:`~chat_memory.backends.base.Store` for the async API: each call runs in
    a bounded :class:`~concurrent.futures.ThreadPoolExecutor` of ``max_workers`` threads, so
    the event loop never waits on the driver. Used for S3 (boto3 has no async driver worth
    it), for SQL, and for any store without a native async twin. More callers than workers
    queue for a thread (keep ``max_workers`` at or below the store's connection pool)."""

    native = False

    def __init__(self, store: Store, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"store ({store!r}) must be a chat_memory Store")
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigurationError(
                f"max_workers ({max_workers!r}) must be a whole number, 1 or more"
            )
        self.store = store
        self.max_workers = max_workers
        self.compacts_while_appending = isinstance(store, CompactsWhileAppending)
        self.checks_tool_pairs = isinstance(store, ChecksToolPairs)
        if isinstance(store, AppendsWithoutWindow):
            # only then: the engine takes the lean path when it finds these methods
            appends = store
            self.append_without_window = self._threaded(lambda: appends.append_without_window)
            self.find_events = self._threaded(lambda: appends.find_events)
        if isinstance(store, Retracts):
            retracts = store
            self.retract = self._threaded(lambda: retracts.retract)
            self.retracted = self._threaded(lambda: retracts.retracted)
        if isinstance(store, Forks):
            forks = store
            self.fork = self._threaded(lambda: forks.fork)
        if isinstance(store, Dumps):
            dumps = store
            self.dump = self._threaded(lambda: dumps.dump)
            self.restore = self._threaded(lambda: dumps.restore)
        if isinstance(store, KeepsLifecycle):
            # metadata, listing, sweeps and erasure (docs/lifecycle.md), by name as the rest
            for name in sorted(KeepsLifecycle.__abstractmethods__):
                setattr(self, name, self._threaded(functools.partial(getattr, store, name)))
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="chat-memory"
        )
        self._closed = False

    async def _run(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``call(*args)`` in a worker thread of this store's pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(call, *args, **kwargs))

    def _threaded(self, method: Callable[[], Callable[P, T]]) -> Callable[P, Awaitable[T]]:
        """The store method ``method()`` returns, as a coroutine function that runs it in a
        worker thread; looked up at each call, like the protocol's methods below."""

        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await self._run(method(), *args, **kwargs)

        return call

    # the store's method is looked up at each call: a store patched after it was wrapped (a
    # test holding a write, an instrumented store) is still the one called
    async def load(self, conversation_id: str) -> Snapshot:
        return await self._run(self.store.load, conversation_id)

    async def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        if check is None:
            return await self._run(self.store.append, conversation_id, events)
        return await self._run(self._checking().append, conversation_id, events, check)

    async def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        store = self.store
        if not (self.compacts_while_appending and isinstance(store, CompactsWhileAppending)):
            if check is None:
                return await super().append_compacting(conversation_id, events, planner)
            snapshot = await self.append(conversation_id, events, check)
            plan = planner(snapshot)
            return snapshot, plan is not None and await self.apply(conversation_id, plan)
        if check is None:
            return await self._run(store.append_compacting, conversation_id, events, planner)
        return await self._run(
            self._checking().append_compacting, conversation_id, events, planner, check
        )

    def _checking(self) -> ChecksToolPairs:
        """The store, which must have the ability the engine passes ``check`` for."""
        if not isinstance(self.store, ChecksToolPairs):
            raise ConfigurationError(
                f"store ({type(self.store).__name__}) cannot run a tool-pair check inside its "
                "append (it lacks the ChecksToolPairs ability)"
            )
        return self.store

    async def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        return await self._run(self.store.apply, conversation_id, plan)

    async def history(self, conversation_id: str) -> list[Event]:
        return await self._run(self.store.history, conversation_id)

    async def find_tool_events(
        self, conversation_id: str, tool_call_ids: Collection[str]
    ) -> list[Event]:
        return await self._run(self.store.find_tool_events, conversation_id, tool_call_ids)

    async def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return await self._run(self.store.search, conversation_id, query)

    async def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        await self._run(self.store.record_compaction_error, conversation_id, message)

    async def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return await self._run(self.store.compactions, conversation_id)

    async def clear(self, conversation_id: str) -> None:
        await self._run(self.store.clear, conversation_id)

    async def conversations(self) -> list[str]:
        return await self._run(self.store.conversations)

    async def aclose(self) -> None:
        """Close the sync store (in a worker) and stop the pool; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"ThreadedStore({type(self.store).__name__}, max_workers={self.max_workers})"


def open_async_store(
    url: str | None = None,
    *,
    max_workers: int = DEFAULT_MAX_WORKERS,
    threads: bool | None = None,
    **options: Any,
) -> AsyncStore:
    """:func:`~chat_memory.open_store` for the async API. Options are the store's own.

    ``threads`` picks the driver: ``None`` (the default) opens the native async store of the
    URL's scheme when there is one, it is the faster choice for the scheme (not for SQLite:
    aiosqlite runs every statement in a thread of its own; see docs/async.md) and its driver
    is installed, else the sync store in a :class:`ThreadedStore` of ``max_workers`` threads;
    ``True`` always uses threads;
    ``False`` insists on the native store and raises :class:`ConfigurationError` naming the
    extra to install (or saying the scheme has none). ``store.native`` says which you got."""
    from . import default_url, open_store, opening

    if threads is not None and not isinstance(threads, bool):
        raise ConfigurationError(f"threads ({threads!r}) must be True, False or None")
    if threads is not True and (url is None or isinstance(url, str)):
        target = url or default_url()
        scheme = urlsplit(target).scheme.lower()
        try:
            native = native_store_class(scheme)
        except ModuleNotFoundError as exc:  # the twin's module imports a driver that is missing
            if threads is False:
                extra = store_class_for(scheme).extra_for(scheme)
                hint = f"pip install 'chat-memory[{extra}]'" if extra else f"install {exc.name}"
                raise ConfigurationError(
                    f"threads (False): the async driver for {scheme}:// is missing "
                    f"({exc.name}); {hint}"
                ) from exc
            log.warning("chat-memory: %s:// runs in threads: %s", scheme, exc)
            native = None
        if (
            native is not None
            and (threads is False or native.preferred_for(scheme))
            and native.driver_available(scheme)
        ):
            chosen = native
            return opening(
                scheme, chosen.extra_for(scheme), lambda: chosen.from_url(target, **options), target
            )
        if threads is False:
            if native is None:
                raise ConfigurationError(
                    f"threads (False): {scheme}:// has no native async store; leave threads unset"
                )
            missing = ", ".join(m for m in native.driver_modules_for(scheme) if not _installed(m))
            extra = native.extra_for(scheme)
            hint = f"pip install 'chat-memory[{extra}]'" if extra else f"install {missing}"
            raise ConfigurationError(
                f"threads (False): the async driver for {scheme}:// is missing ({missing}); {hint}"
            )
    return ThreadedStore(open_store(url, **options), max_workers=max_workers)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return False


def native_store_class(scheme: str) -> type[AsyncStore] | None:
    """The native async store class serving a URL scheme (``sqlite+pysqlite`` falls back to
    ``sqlite``), or None: the one registered by its own ``schemes`` (built-in, or installed
    through the ``chat_memory.stores`` entry-point group), else the ``async_twin`` of the sync
    store registered for the scheme, when the twin serves it. Imports the twin's module (not
    its driver); a module that cannot be imported raises its ``ModuleNotFoundError``."""
    registered = async_store_class_for(scheme)
    if registered is not None:
        return registered
    try:
        sync_class = store_class_for(scheme)
    except ConfigurationError:  # an unknown scheme: open_store says so, listing the known ones
        return None
    twin = declared_class(sync_class, "async_twin")
    if twin is None:
        return None
    if not issubclass(twin, AsyncStore):
        raise ConfigurationError(
            f"{sync_class.__name__}.async_twin ({twin.__module__}:{twin.__qualname__}) "
            "must be an AsyncStore subclass"
        )
    served = {s.lower() for s in twin.schemes}
    scheme = scheme.lower()
    if served and scheme not in served and scheme.split("+", 1)[0] not in served:
        return None
    return twin


__all__ = [
    "DEFAULT_MAX_WORKERS",
    "AsyncStore",
    "ThreadedStore",
    "admit",
    "native_store_class",
    "open_async_store",
]
