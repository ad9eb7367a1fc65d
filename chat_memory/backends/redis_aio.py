"""The Redis store for the async API, over ``redis.asyncio`` (a single server or Redis
Cluster): the same keys, Lua scripts, layout check and guarantees as
:class:`~chat_memory.backends.redis.RedisStore` — both drive the steps of
:class:`~chat_memory.backends.redis_sansio.RedisSansIO` — with every request awaited
(:func:`chat_memory.backends.redis_io.arun`), so the event loop never waits on Redis.
The two stores read and write the same data: a sync and an async process may share a prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError
from ..events import Event
from ..lifecycle.records import ConversationRecord, ErasureCounts
from ..search import SearchQuery, SearchResult
from .aio import AsyncStore, admit
from .base import CompactionPlan, Snapshot, ToolPairCheck, check_conversation_id
from .failures import wrap_driver_errors
from .redis_io import RedisSteps, arun, driver, driver_target, retry
from .redis_lifecycle import RedisLifecycle
from .redis_sansio import RedisSansIO
from .redis_transfer import RedisTransfer
from .redis_writes import RedisWrites
from .timeline import ConversationDump

if TYPE_CHECKING:
    from .redis_io import AsyncClient

T = TypeVar("T")

#: Connections of a single-server store's pool unless the URL says ``?max_connections=N``;
#: more concurrent operations wait their turn, first come first served, instead of failing.
DEFAULT_MAX_CONNECTIONS = 32


def _driver() -> Any:
    return driver("redis.asyncio", "redis.asyncio.cluster")


class AsyncRedisStore(
    RedisLifecycle["AsyncClient"],
    RedisTransfer["AsyncClient"],
    RedisWrites["AsyncClient"],
    AsyncStore,
):
    """Conversations in Redis (``redis://``, ``rediss://``) or Redis Cluster
    (``redis+cluster://host:port``), for :class:`~chat_memory.AsyncChatMemory`.

    Pass a URL to :meth:`from_url` (or :func:`chat_memory.open_async_store`), or a ready
    ``redis.asyncio.Redis`` / ``redis.asyncio.cluster.RedisCluster`` client here; a client
    passed in is left open by :meth:`aclose`. ``prefix``, ``max_archived_events`` and
    ``ttl_seconds`` mean what they mean for :class:`~chat_memory.backends.redis.RedisStore`.
    """

    schemes = RedisSansIO.schemes
    driver_modules = ("redis.asyncio",)
    compacts_while_appending = True
    checks_tool_pairs = True
    #: Builds a new client like the first one (set by :meth:`from_url`; None for a client
    #: passed in): redis.asyncio's connections belong to the event loop that opened them.
    _reopen: Callable[[], AsyncClient] | None = None
    #: The event loop the client's connections were opened on (None before the first command).
    _loop: asyncio.AbstractEventLoop | None = None
    #: Admission to the client's blocking pool, one turn per connection (None when the client
    #: has no blocking pool: a cluster, or a client passed in with a pool of another kind).
    _gate: asyncio.Semaphore | None = None

    def _is_cluster(self, client: AsyncClient) -> bool:
        redis = _driver()
        if isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
            raise ConfigurationError(
                f"client ({type(client).__name__}) is a sync redis client; AsyncRedisStore takes a "
                "redis.asyncio.Redis or redis.asyncio.cluster.RedisCluster (RedisStore takes the sync ones)"
            )
        return isinstance(client, redis.asyncio.cluster.RedisCluster)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisStore:
        """Open a store from the same URLs and options as
        :meth:`RedisStore.from_url <chat_memory.backends.redis.RedisStore.from_url>`; nothing
        connects until the first command (a cluster learns its slot map then)."""
        redis = _driver()
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.cluster import RedisCluster
        from redis.asyncio.retry import Retry

        settings, driver_url, driver_options, cluster = driver_target(cls, url, options)
        errors = [redis.ConnectionError, redis.TimeoutError]
        driver_options = {"retry": retry(Retry, tuple(errors)), **driver_options}
        if not cluster:
            driver_options.setdefault("retry_on_error", errors)
            driver_options.setdefault("max_connections", DEFAULT_MAX_CONNECTIONS)

        def client() -> AsyncClient:
            if cluster:
                return RedisCluster.from_url(driver_url, **driver_options)
            # redis-py's default pool refuses a command when all its connections are busy
            # (MaxConnectionsError); a thousand conversations on one loop must queue instead
            pool = BlockingConnectionPool.from_url(driver_url, **driver_options)
            return Redis(connection_pool=pool)

        store = cls(client(), owns_client=True, **settings)
        store._reopen = client
        return store

    async def aclose(self) -> None:
        """Close the client if this store created it; a second call does nothing."""
        if self._owns_client and not self._closed:
            self._closed = True
            if self._loop is not None and self._loop.is_closed():
                return  # its connections were closed with their loop: nothing to await
            close = (
                getattr(self.client, "aclose", None) or self.client.close
            )  # aclose from redis 5.0.1
            await close()
            pool = getattr(self.client, "connection_pool", None)  # a cluster client has none
            if pool is not None:
                await pool.disconnect()

    # -- driving the shared steps -------------------------------------------------------------

    async def _do(self, steps: RedisSteps[T]) -> T:
        """Run ``steps`` once the gate admits it. Admission comes before the steps start, so
        a burst of operations (a thousand conversations' first turns ready at once) does the
        work of only as many as there are connections in one loop iteration; the rest wait
        their turn, first come first served (an ``asyncio.Semaphore`` queues fairly;
        redis-py's blocking pool does not: a waiter it wakes loses the connection to any
        command that asks first and goes back to the end of the queue, and under load some
        waited past its 20 s timeout while others went through)."""
        self._follow_the_running_loop()
        async with admit(self._gate):  # re-entrant: straight in inside admitted()
            return await arun(steps, self.client, self)

    def admitted(self) -> AbstractAsyncContextManager[None]:
        """:meth:`AsyncStore.admitted <chat_memory.backends.aio.AsyncStore.admitted>`: a turn
        of the gate :meth:`_do` takes, so an engine operation admitted as a whole prepares
        its batch only once a connection is its own."""
        self._follow_the_running_loop()
        return admit(self._gate)

    def _follow_the_running_loop(self) -> None:
        """A store used from one ``asyncio.run()`` and then another (a script, a test, a
        framework that runs each request in a fresh loop) finds its connections tied to a
        loop that is closed: a store that made its client opens a new one on the running
        loop (the old one's connections died with their loop); a client passed in cannot be
        remade, which is said plainly instead of redis-py's "Event loop is closed"."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None and self._loop.is_closed():
            if self._reopen is None:
                raise ConfigurationError(
                    "AsyncRedisStore: the redis.asyncio client passed in was used on an event loop that is now "
                    "closed, and its connections cannot move to another; pass a client made on the running loop, "
                    "or open the store with AsyncRedisStore.from_url / open_async_store (it reopens by itself)"
                )
            self.client = self._reopen()
        self._loop = loop
        self._gate = self._new_gate()

    def _new_gate(self) -> asyncio.Semaphore | None:
        """One turn per connection of the client's blocking pool (a store from a URL has
        one): the pool then never makes an operation wait, the gate does."""
        from redis.asyncio import BlockingConnectionPool

        pool = getattr(self.client, "connection_pool", None)  # a cluster client has none
        if not isinstance(pool, BlockingConnectionPool):
            return None
        return asyncio.Semaphore(pool.max_connections)

    # -- the store protocol ------------------------------------------------------------------

    async def load(self, conversation_id: str) -> Snapshot:
        return await self._do(self._load_steps(conversation_id))

    async def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        """:meth:`RedisStore.append <chat_memory.backends.redis.RedisStore.append>`."""
        if check is None:
            return await self._do(self._append_steps(conversation_id, events))
        return await self._do(self._checked_append_steps(conversation_id, events, check))

    @wrap_driver_errors
    async def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """:meth:`RedisStore.append_without_window <chat_memory.backends.redis.RedisStore.append_without_window>`."""
        if check is None:
            return await self._do(self._append_without_window_steps(conversation_id, events))
        return await self._do(
            self._checked_append_without_window_steps(conversation_id, events, check)
        )

    async def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        """:meth:`RedisStore.append_compacting <chat_memory.backends.redis.RedisStore.append_compacting>`."""
        return await self._do(
            self._append_compacting_steps(conversation_id, events, planner, check)
        )

    async def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        return await self._do(self._apply_steps(conversation_id, plan))

    async def history(self, conversation_id: str) -> list[Event]:
        return await self._do(self._history_steps(conversation_id))

    async def find_tool_events(
        self, conversation_id: str, tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the tool-call-id index (window and the capped archive), not the history."""
        return await self.find_events(conversation_id, (), tool_call_ids)

    async def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """:meth:`RedisStore.find_events <chat_memory.backends.redis.RedisStore.find_events>`."""
        return await self._do(self._find_events_steps(conversation_id, event_ids, tool_call_ids))

    async def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return await self._do(self._search_steps(conversation_id, query))

    async def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        await self._do(self._record_error_steps(conversation_id, message))

    async def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return await self._do(self._compactions_steps(conversation_id))

    async def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """:meth:`RedisStore.retract <chat_memory.backends.redis.RedisStore.retract>`: one script."""
        return await self._do(self._retract_steps(conversation_id, event_ids))

    async def retracted(self, conversation_id: str) -> list[Event]:
        return await self._do(self._retracted_steps(conversation_id))

    async def clear(self, conversation_id: str) -> None:
        await self._do(self._clear_steps(conversation_id))

    async def conversations(self) -> list[str]:
        return await self._do(self._conversations_steps())

    async def fork(
        self, conversation_id: str, new_conversation_id: str, at: int | None
    ) -> Snapshot:
        """:meth:`RedisStore.fork <chat_memory.backends.redis.RedisStore.fork>`."""
        return await self._do(self._fork_steps(conversation_id, new_conversation_id, at))

    async def dump(self, conversation_id: str) -> ConversationDump | None:
        """:meth:`RedisStore.dump <chat_memory.backends.redis.RedisStore.dump>`."""
        return await self._do(self._dump_steps(conversation_id))

    async def restore(self, dump: ConversationDump) -> None:
        """:meth:`RedisStore.restore <chat_memory.backends.redis.RedisStore.restore>`."""
        await self._do(self._restore_steps(dump))

    # -- the lifecycle (KeepsLifecycle's methods as coroutines; steps of redis_lifecycle) ---------

    async def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        cid = check_conversation_id(conversation_id)
        return await self._do(self._conversation_record_steps(cid))

    async def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        cid = check_conversation_id(conversation_id)
        return await self._do(self._set_metadata_steps(cid, title, tags, values))

    async def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        return await self._do(self._list_conversations_steps(scope, tag, offset, limit))

    async def idle_conversations(
        self, scope: str | None, cutoff: datetime, limit: int
    ) -> list[str]:
        return await self._do(self._idle_conversations_steps(scope, cutoff, limit))

    async def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        cid = check_conversation_id(conversation_id)
        return await self._do(self._delete_idle_steps(cid, cutoff))

    async def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        cid = check_conversation_id(conversation_id)
        return await self._do(self._erase_steps(cid, guard_seconds))

    async def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        return await self._do(self._erase_scope_steps(scope, limit, guard_seconds))

    async def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        return await self._do(self._erase_namespaces_steps(scope, guard_seconds))

    async def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        return await self._do(self._sweep_namespaces_steps(scope, now))


__all__ = ["DEFAULT_MAX_CONNECTIONS", "AsyncRedisStore"]
