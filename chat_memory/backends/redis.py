"""The Redis store: one Lua script (one round trip) per append, window read and compaction,
on a single Redis server or on Redis Cluster.

Layout, per conversation, under a configurable prefix (default ``chat-memory:``)::

    <prefix>{<digest>}:meta      hash: cid, epoch, version, last_seq, error, summary
    <prefix>{<digest>}:pinned    list of system events
    <prefix>{<digest>}:active    list of active real events
    <prefix>{<digest>}:archive   sorted set of archived events, scored by seq
    <prefix>{<digest>}:texts     hash seq -> folded search text of each real event
    <prefix>{<digest>}:recent    sorted set of the last request tokens (retry de-duplication)
    <prefix>{<digest>}:compactions  list of the newest compaction records (JSON), oldest first
    <prefix>{<digest>}:timeline  list of fork timeline entries (JSON; redis_transfer.py)
    <prefix>conversations        set of conversation ids (the registry)
    <prefix>layout               the layout version of everything under the prefix
    <prefix>layout:migrations    hash N -> when and why the layout was migrated to N

``<digest>`` is a hash of the conversation id, so whatever the id contains (``{``, ``}``,
``*``, ``:``…) it can neither break the ``{…}`` hash tag nor collide with another id's keys;
every key of a conversation lands in one hash slot. The id itself is kept in ``meta`` (and
checked there, so a digest collision is refused rather than mixed up) and in the registry.
Stored elements are ``"<seq>:<event JSON>"``. ``epoch`` is set when a conversation is
created (a clear or an expiry deletes it), so (epoch, version) names one state of a window: a
store keeps its last window of each conversation it used, and a read or an append whose held
window is still current gets back the bookkeeping (and the batch's seqs), not the window.

The layout, the scripts' arguments and the replies are shared with the async store
(:class:`~chat_memory.backends.redis_sansio.RedisSansIO`, the I/O-free half), and so is the
driver of their requests (:func:`chat_memory.backends.redis_io.run`); this module owns only
the sync client.

A store reads ``<prefix>layout`` once, at its first command (one ``GET``; a prefix without
the key gets it), runs the pending migrations of
:data:`~chat_memory.backends.redis_sansio.REDIS_LAYOUT` under a lock key, and
refuses a newer layout with :class:`SchemaError`. Later commands never look at it again, so
a turn costs no extra round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from ..errors import StorageError
from ..events import Event
from ..lifecycle.records import ConversationRecord, ErasureCounts
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
    check_conversation_id,
)
from .declarations import ConnectionField, StoreNode
from .failures import wrap_driver_errors
from .redis_io import LuaScript, RedisSteps, ScriptSource, driver, driver_target, retry, run
from .redis_lifecycle import RedisLifecycle
from .redis_sansio import DEFAULT_PREFIX, RedisSansIO
from .redis_transfer import RedisTransfer
from .redis_writes import RedisWrites
from .timeline import ConversationDump

if TYPE_CHECKING:
    from .redis_io import SyncClient

T = TypeVar("T")

#: The canvas node of the Redis stores (sync and async take the same connection fields).
NODE = StoreNode(
    "redisChatMemory",
    "Redis Chat Memory",
    "Chat memory in Redis or Redis Cluster.",
    "redis",
    fields=(
        ConnectionField(
            "url",
            "Redis URL",
            "redis://, rediss:// or redis+cluster://host:port.",
            required=True,
            placeholder="redis://localhost:6379/0",
        ),
        ConnectionField(
            "keyPrefix",
            "Key prefix",
            "Prefix of every key chat-memory writes (no braces: they mark Redis Cluster hash tags).",
            default=DEFAULT_PREFIX,
            advanced=True,
        ),
        ConnectionField(
            "ttlSeconds",
            "Time to live (seconds)",
            "Expire a conversation this long after its last write; empty keeps it forever.",
            kind="integer",
            nullable=True,
            minimum=1,
            advanced=True,
        ),
    ),
    order=20,
)


class RedisStore(
    RedisLifecycle["SyncClient"],
    RedisTransfer["SyncClient"],
    RedisWrites["SyncClient"],
    ChecksToolPairs,
    AppendsWithoutWindow,
    CompactsWhileAppending,
    Retracts,
    Forks,
    Dumps,
    KeepsLifecycle,
    Store,
):
    """Conversations in Redis (``redis://``, ``rediss://``) or Redis Cluster
    (``redis+cluster://host:port``).

    Pass a URL to :meth:`from_url` (or :func:`chat_memory.open_store`), or a ready
    ``redis.Redis`` / ``redis.cluster.RedisCluster`` client here; a client passed in is not
    closed by :meth:`close`. ``prefix`` namespaces every key (it must not contain ``{`` or
    ``}``); ``max_archived_events`` caps the archive when a plan names no cap (None:
    unbounded); ``ttl_seconds`` expires a whole conversation that long after its last write.
    """

    schemes = RedisSansIO.schemes
    node = NODE
    async_twin = "chat_memory.backends.redis_aio:AsyncRedisStore"
    long_term = "chat_memory.longterm.redis:RedisFiles"

    def _is_cluster(self, client: SyncClient) -> bool:
        return isinstance(client, driver("redis.cluster").cluster.RedisCluster)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """Open a store from ``redis://[user:password@]host:port/db?prefix=…&max_archived_events=…&ttl_seconds=…``
        (``rediss://`` for TLS, ``redis+cluster://host:port`` for a cluster). Other query
        parameters, and keyword options that are not store options, go to the redis-py client."""
        redis = driver()
        from redis.retry import Retry

        settings, driver_url, driver_options, cluster = driver_target(cls, url, options)
        driver_options = {
            "retry": retry(Retry, (redis.ConnectionError, redis.TimeoutError)),
            **driver_options,
        }
        if cluster:
            try:  # a cluster client connects at once, to learn the slot map
                client = redis.cluster.RedisCluster.from_url(driver_url, **driver_options)
            except Exception as exc:
                where = urlsplit(driver_url)
                raise StorageError(
                    f"RedisStore could not reach the cluster at {where.hostname}:{where.port}: {exc}"
                ) from exc
        else:
            # redis-py before 6 retries a command only on the errors named here, whatever the Retry says
            driver_options.setdefault("retry_on_error", [redis.ConnectionError, redis.TimeoutError])
            client = redis.Redis.from_url(driver_url, **driver_options)
        return cls(client, owns_client=True, **settings)

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        options = {
            "prefix": connection.get("keyPrefix"),
            "ttl_seconds": connection.get("ttlSeconds"),
        }
        return connection["url"], {
            key: value for key, value in options.items() if value not in (None, "")
        }

    def close(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            self.client.close()

    # -- driving the shared steps -------------------------------------------------------------

    def _do(self, steps: RedisSteps[T]) -> T:
        return run(steps, self.client, self)

    def _call(self, script: ScriptSource, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run any script after the layout check (long-term memory runs its own with it)."""
        return self._do(self._script_steps(LuaScript.of(script), keys, args))

    # -- the store protocol ------------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        return self._do(self._load_steps(conversation_id))

    def history(self, conversation_id: str) -> list[Event]:
        return self._do(self._history_steps(conversation_id))

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return self._do(self._search_steps(conversation_id, query))

    def conversations(self) -> list[str]:
        return self._do(self._conversations_steps())

    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        """One script; with ``check``, conditional on the state the batch was checked on (see
        :mod:`~chat_memory.backends.redis_writes`)."""
        if check is None:
            return self._do(self._append_steps(conversation_id, events))
        return self._do(self._checked_append_steps(conversation_id, events, check))

    @wrap_driver_errors
    def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """Append like :meth:`append` (atomic, idempotent per event id) and return the stored
        copy of each of ``events``, in order, without reading the window: the id index finds
        retried events, so the cost depends on the batch, not on the conversation's length
        (``check`` runs on a look-up by index)."""
        if check is None:
            return self._do(self._append_without_window_steps(conversation_id, events))
        return self._do(self._checked_append_without_window_steps(conversation_id, events, check))

    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        """One script for the append and the plan, made on the held window plus the batch,
        when that window is current; else the plan made on the window the append returns,
        applied by a second script (see :mod:`~chat_memory.backends.redis_writes`)."""
        return self._do(self._append_compacting_steps(conversation_id, events, planner, check))

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the event-id and tool-call-id indexes: one script that reads the elements asked for."""
        return self._do(self._find_events_steps(conversation_id, event_ids, tool_call_ids))

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """By the tool-call-id index (window and the capped archive), not the history."""
        return self.find_events(conversation_id, (), tool_call_ids)

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        return self._do(self._apply_steps(conversation_id, plan))

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return self._do(self._compactions_steps(conversation_id))

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        self._do(self._record_error_steps(conversation_id, message))

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """One script (``retract.lua``): see :class:`~chat_memory.backends.base.Retracts`."""
        return self._do(self._retract_steps(conversation_id, event_ids))

    def retracted(self, conversation_id: str) -> list[Event]:
        return self._do(self._retracted_steps(conversation_id))

    def clear(self, conversation_id: str) -> None:
        self._do(self._clear_steps(conversation_id))

    def fork(self, conversation_id: str, new_conversation_id: str, at: int | None) -> Snapshot:
        """Two scripts (see :mod:`~chat_memory.backends.redis_transfer`): the source read in
        one consistent state, the fork written whole in its own hash slot."""
        return self._do(self._fork_steps(conversation_id, new_conversation_id, at))

    def dump(self, conversation_id: str) -> ConversationDump | None:
        """One script (``dump.lua``)."""
        return self._do(self._dump_steps(conversation_id))

    def restore(self, dump: ConversationDump) -> None:
        """One script (``restore.lua``), refused when the conversation is stored already."""
        self._do(self._restore_steps(dump))

    # -- the lifecycle (steps of redis_lifecycle) ----------------------------------------------

    def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        cid = check_conversation_id(conversation_id)
        return self._do(self._conversation_record_steps(cid))

    def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        cid = check_conversation_id(conversation_id)
        return self._do(self._set_metadata_steps(cid, title, tags, values))

    def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        return self._do(self._list_conversations_steps(scope, tag, offset, limit))

    def idle_conversations(self, scope: str | None, cutoff: datetime, limit: int) -> list[str]:
        return self._do(self._idle_conversations_steps(scope, cutoff, limit))

    def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        cid = check_conversation_id(conversation_id)
        return self._do(self._delete_idle_steps(cid, cutoff))

    def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        cid = check_conversation_id(conversation_id)
        return self._do(self._erase_steps(cid, guard_seconds))

    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        return self._do(self._erase_scope_steps(scope, limit, guard_seconds))

    def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        return self._do(self._erase_namespaces_steps(scope, guard_seconds))

    def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        return self._do(self._sweep_namespaces_steps(scope, now))


__all__ = ["NODE", "RedisStore"]
