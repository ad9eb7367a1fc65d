"""The Redis store: one Lua script (one round trip) per append, window read and compaction,
on a single Redis server or on Redis Cluster.

Layout, per conversation, under a configurable prefix (default ``chat-memory:``)::

    <prefix>{<digest>}:meta      hash: cid, version, last_seq, error, summary
    <prefix>{<digest>}:pinned    list of system events
    <prefix>{<digest>}:active    list of active real events
    <prefix>{<digest>}:archive   sorted set of archived events, scored by seq
    <prefix>{<digest>}:texts     hash seq -> folded search text of each real event
    <prefix>{<digest>}:recent    sorted set of the last request tokens (retry de-duplication)
    <prefix>{<digest>}:compactions  list of the newest compaction records (JSON), oldest first
    <prefix>conversations        set of conversation ids (the registry)
    <prefix>layout               the layout version of everything under the prefix
    <prefix>layout:migrations    hash N -> when and why the layout was migrated to N

``<digest>`` is a hash of the conversation id, so whatever the id contains (``{``, ``}``,
``*``, ``:``…) it can neither break the ``{…}`` hash tag nor collide with another id's keys;
every key of a conversation lands in one hash slot. The id itself is kept in ``meta`` (and
checked there, so a digest collision is refused rather than mixed up) and in the registry.
Stored elements are ``"<seq>:<event JSON>"``.

The layout, the scripts' arguments and the replies are shared with the async store
(:mod:`.redis_layout`); this module owns only the redis-py I/O.

A store reads ``<prefix>layout`` once, at its first command (one ``GET``; a prefix without
the key gets it), runs the pending migrations of :data:`REDIS_LAYOUT` under a lock key, and
refuses a newer layout with :class:`SchemaError`. Later commands never look at it again, so
a turn costs no extra round trip.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..errors import StorageError
from ..events import Event
from ..search import SearchQuery, SearchResult
from ..steps import Steps, run
from .base import AppendsWithoutWindow, CompactionPlan, Retracts, Snapshot, Store
from .declarations import ConnectionField, StoreNode
from .failures import wrap_driver_errors
from .migrations import Migration
from .redis_layout import (
    DEFAULT_MAX_ARCHIVED_EVENTS,
    DEFAULT_PREFIX,
    MIGRATION_LOCK_SECONDS,
    REDIS_LAYOUT,
    LuaScript,
    RedisLayout,
    driver,
    driver_target,
    retry,
)

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


def _driver() -> Any:
    return driver()


class RedisStore(RedisLayout, AppendsWithoutWindow, Retracts, Store):
    """Conversations in Redis (``redis://``, ``rediss://``) or Redis Cluster
    (``redis+cluster://host:port``).

    Pass a URL to :meth:`from_url` (or :func:`chat_memory.open_store`), or a ready
    ``redis.Redis`` / ``redis.cluster.RedisCluster`` client here; a client passed in is not
    closed by :meth:`close`. ``prefix`` namespaces every key (it must not contain ``{`` or
    ``}``); ``max_archived_events`` caps the archive when a plan names no cap (None:
    unbounded); ``ttl_seconds`` expires a whole conversation that long after its last write.
    """

    schemes = RedisLayout.schemes
    node = NODE

    def _is_cluster(self, client: Any) -> bool:
        return isinstance(client, _driver().cluster.RedisCluster)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """Open a store from ``redis://[user:password@]host:port/db?prefix=…&max_archived_events=…&ttl_seconds=…``
        (``rediss://`` for TLS, ``redis+cluster://host:port`` for a cluster). Other query
        parameters, and keyword options that are not store options, go to the redis-py client."""
        redis = _driver()
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

    # -- the I/O the shared steps ask for ----------------------------------------------------

    def _command(self, method: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return getattr(self.client, method)(*args, **kwargs)

    def _script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA, and on NOSCRIPT (first use, SCRIPT FLUSH, restart, failover) EVAL, which
        also caches the script on the node that ran it. Not redis-py's fallback: on a cluster
        it sends SCRIPT LOAD to every primary, and so fails while any one of them is down."""
        try:
            return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except _driver().exceptions.NoScriptError:
            return self.client.eval(script.script, len(keys), *keys, *args)

    def _pipeline(
        self, commands: Sequence[tuple[str, Sequence[Any]]], transaction: bool
    ) -> list[Any]:
        pipe = self.client.pipeline(transaction=transaction)
        for method, args in commands:
            getattr(pipe, method)(*args)
        return pipe.execute()  # type: ignore[no-any-return]

    def _upgrade(self, step: Migration[Any]) -> None:
        step.upgrade(self)

    def _do(self, steps: Steps[Any]) -> Any:
        return run(steps, self)

    def _run(self, name: str, cid: str, *args: Any) -> Any:
        return self._do(self._run_steps(name, cid, *args))

    def _call(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run any script (``.sha``, ``.script``) after the layout check (long-term memory uses it)."""
        return self._do(self._script_steps(script, keys, args))

    # -- the store protocol ------------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        return self._do(self._load_steps(conversation_id))  # type: ignore[no-any-return]

    def history(self, conversation_id: str) -> list[Event]:
        return self._do(self._history_steps(conversation_id))  # type: ignore[no-any-return]

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return self._do(self._search_steps(conversation_id, query))  # type: ignore[no-any-return]

    def conversations(self) -> list[str]:
        return self._do(self._conversations_steps())  # type: ignore[no-any-return]

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        return self._do(self._append_steps(conversation_id, events))  # type: ignore[no-any-return]

    @wrap_driver_errors
    def append_without_window(self, conversation_id: str, events: Sequence[Event]) -> list[Event]:
        """Append like :meth:`append` (atomic, idempotent per event id) and return the stored
        copy of each of ``events``, in order, without reading the window: the id index finds
        retried events, so the cost depends on the batch, not on the conversation's length."""
        return self._do(self._append_without_window_steps(conversation_id, events))  # type: ignore[no-any-return]

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the event-id and tool-call-id indexes: one script that reads the elements asked for."""
        return self._do(self._find_events_steps(conversation_id, event_ids, tool_call_ids))  # type: ignore[no-any-return]

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """By the tool-call-id index (window and the capped archive), not the history."""
        return self.find_events(conversation_id, (), tool_call_ids)

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        return self._do(self._apply_steps(conversation_id, plan))  # type: ignore[no-any-return]

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return self._do(self._compactions_steps(conversation_id))  # type: ignore[no-any-return]

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        self._do(self._record_error_steps(conversation_id, message))

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """One script (``retract.lua``): see :class:`~chat_memory.backends.base.Retracts`."""
        return self._do(self._retract_steps(conversation_id, event_ids))  # type: ignore[no-any-return]

    def retracted(self, conversation_id: str) -> list[Event]:
        return self._do(self._retracted_steps(conversation_id))  # type: ignore[no-any-return]

    def clear(self, conversation_id: str) -> None:
        self._do(self._clear_steps(conversation_id))


__all__ = [
    "DEFAULT_MAX_ARCHIVED_EVENTS",
    "DEFAULT_PREFIX",
    "MIGRATION_LOCK_SECONDS",
    "REDIS_LAYOUT",
    "NODE",
    "RedisStore",
]
