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

A store reads ``<prefix>layout`` once, at its first command (one ``GET``; a prefix without
the key gets it), runs the pending migrations of :data:`REDIS_LAYOUT` under a lock key, and
refuses a newer layout with :class:`SchemaError`. Later commands never look at it again, so
a turn costs no extra round trip.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from ..errors import ConcurrencyError, ConfigurationError, StorageError
from ..events import Event, EventType, Window
from ..search import MatchMode, SearchQuery, SearchResult, search_text
from .base import (
    Backoff,
    CompactionPlan,
    ConnectionField,
    Snapshot,
    Store,
    StoreNode,
    StoreOption,
    check_conversation_id,
    envelope_id_prefix,
)
from .migrations import StoredFormat

DEFAULT_PREFIX = "chat-memory:"
DEFAULT_MAX_ARCHIVED_EVENTS = 1000
_SUFFIXES = ("meta", "pinned", "active", "archive", "texts", "recent", "compactions")
_SCRIPTS = ("load", "append", "apply", "history", "search", "record_error")
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# Small socket timeouts and a few quick retries: a server that is down or restarting gives a
# StorageError within about a second or two instead of hanging the agent.
_DRIVER_DEFAULTS: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 2.0}
_RETRIES = 3
#: The key layout's version and its migrations (N -> N+1), each called with the store.
#: Data written before the layout key existed is layout 1.
REDIS_LAYOUT: StoredFormat[Any] = StoredFormat(
    "Redis key layout", current=1, remedy="upgrade chat-memory, or use another prefix"
)
#: Seconds a migration may hold the lock before another store may take it over.
MIGRATION_LOCK_SECONDS = 300
_UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def _driver() -> Any:
    try:
        import redis
    except ModuleNotFoundError as exc:
        raise ConfigurationError("the Redis store needs the redis driver; pip install 'chat-memory[redis]'") from exc
    return redis


def _retry() -> Any:
    redis = _driver()
    # FullJitterBackoff (uniform up to min(cap, base * 2**failures)) is in every redis>=5.0;
    # ExponentialWithJitterBackoff, nearly the same, only from 5.3 on.
    from redis.backoff import FullJitterBackoff
    from redis.retry import Retry

    return Retry(
        FullJitterBackoff(cap=0.5, base=0.05),
        _RETRIES,
        supported_errors=(redis.ConnectionError, redis.TimeoutError),
    )


@cache
def _lua(name: str) -> str:
    folder = resources.files(__package__) / "redis_scripts"
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name == "prune":
        return body
    return (folder / "prelude.lua").read_text(encoding="utf-8") + "\n" + body


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _event(element: bytes | str, archived: bool = False) -> Event:
    seq, _, envelope = _text(element).partition(":")
    return Event.from_json(envelope).model_copy(update={"seq": int(seq), "archived": archived})


class RedisStore(Store):
    """Conversations in Redis (``redis://``, ``rediss://``) or Redis Cluster
    (``redis+cluster://host:port``).

    Pass a URL to :meth:`from_url` (or :func:`chat_memory.open_store`), or a ready
    ``redis.Redis`` / ``redis.cluster.RedisCluster`` client here; a client passed in is not
    closed by :meth:`close`. ``prefix`` namespaces every key (it must not contain ``{`` or
    ``}``); ``max_archived_events`` caps the archive when a plan names no cap (None:
    unbounded); ``ttl_seconds`` expires a whole conversation that long after its last write.
    """

    schemes = ("redis", "rediss", "redis+cluster", "rediss+cluster")
    extra = "redis"
    url_options = (
        StoreOption("prefix"),
        StoreOption("max_archived_events", int, minimum=0, nullable=True),
        StoreOption("ttl_seconds", int, minimum=1, nullable=True),
    )
    passes_query_to_driver = True
    node = StoreNode(
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
    default_max_archived_events = DEFAULT_MAX_ARCHIVED_EVENTS

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_archived_events: int | None = DEFAULT_MAX_ARCHIVED_EVENTS,
        ttl_seconds: int | None = None,
        owns_client: bool = False,
    ) -> None:
        redis = _driver()
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigurationError(f"prefix ({prefix!r}) must be a string without '{{' or '}}' (they mark hash tags)")
        self.client = client
        self.prefix = prefix
        declared = {option.name: option for option in self.url_options}
        self.default_max_archived_events = declared["max_archived_events"].parse(max_archived_events, "RedisStore")
        self.ttl_seconds = declared["ttl_seconds"].parse(ttl_seconds, "RedisStore")
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        self._owns_client = owns_client
        self._registry = f"{prefix}conversations"
        self._scripts = {name: client.register_script(_lua(name)) for name in _SCRIPTS}
        self._prune = client.register_script(_lua("prune"))

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """Open a store from ``redis://[user:password@]host:port/db?prefix=…&max_archived_events=…&ttl_seconds=…``
        (``rediss://`` for TLS, ``redis+cluster://host:port`` for a cluster). Other query
        parameters, and keyword options that are not store options, go to the redis-py client."""
        redis = _driver()
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in (*cls.schemes, *_CLUSTER_SCHEMES):
            raise ConfigurationError(f"store URL scheme ({scheme!r}) is not a Redis scheme; use redis://, rediss:// or redis+cluster://")
        store_options, driver_query = cls.url_settings(parts.query, options)
        options = {key: value for key, value in options.items() if key not in store_options}
        driver_url = urlunsplit((_CLUSTER_SCHEMES.get(scheme, scheme), parts.netloc, parts.path, urlencode(driver_query), ""))
        driver_options = {**_DRIVER_DEFAULTS, "retry": _retry(), **options}
        if scheme in _CLUSTER_SCHEMES:
            try:  # a cluster client connects at once, to learn the slot map
                client = redis.cluster.RedisCluster.from_url(driver_url, **driver_options)
            except Exception as exc:
                raise StorageError(f"RedisStore could not reach the cluster at {parts.hostname}:{parts.port}: {exc}") from exc
        else:
            # redis-py before 6 retries a command only on the errors named here, whatever the Retry says
            driver_options.setdefault("retry_on_error", [redis.ConnectionError, redis.TimeoutError])
            client = redis.Redis.from_url(driver_url, **driver_options)
        return cls(client, owns_client=True, **store_options)

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        options = {"prefix": connection.get("keyPrefix"), "ttl_seconds": connection.get("ttlSeconds")}
        return connection["url"], {key: value for key, value in options.items() if value not in (None, "")}

    def close(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            self.client.close()

    # -- keys --------------------------------------------------------------------------------

    def _keys(self, cid: str) -> list[str]:
        digest = hashlib.sha256(cid.encode("utf-8")).hexdigest()[:32]
        keys = [f"{self.prefix}{{{digest}}}:{suffix}" for suffix in _SUFFIXES]
        # the registry lives in another slot: scripts may touch it only on a single server
        return keys if self.cluster else [*keys, self._registry]

    def _run(self, name: str, cid: str, *args: Any) -> Any:
        return self._call(self._scripts[name], self._keys(cid), args)

    def _call(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA, and on NOSCRIPT (first use, SCRIPT FLUSH, restart, failover) EVAL, which
        also caches the script on the node that ran it. Not redis-py's fallback: on a cluster
        it sends SCRIPT LOAD to every primary, and so fails while any one of them is down."""
        self._check_layout()
        try:
            return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except _driver().exceptions.NoScriptError:
            return self.client.eval(script.script, len(keys), *keys, *args)

    # -- layout version ----------------------------------------------------------------------

    _layout_checked = False

    @property
    def _layout_key(self) -> str:
        return f"{self.prefix}layout"

    def _check_layout(self) -> None:
        """Once per store: read the prefix's layout version, migrate older data, refuse newer."""
        if self._layout_checked:
            return
        found = self.client.get(self._layout_key)
        if found is None:
            # a new prefix, or data from before the key existed (which is layout 1)
            found = 1 if self.client.exists(self._registry) else REDIS_LAYOUT.current
            self.client.set(self._layout_key, found, nx=True)
            found = self.client.get(self._layout_key) or found  # another store may have set it first
        where = f"Redis key {self._layout_key!r}"
        if REDIS_LAYOUT.steps(REDIS_LAYOUT.parse(found, where), where):
            self._layout_checked = True  # migrations may use the store's own commands
            try:
                self._migrate(where)
            except BaseException:
                self._layout_checked = False
                raise
        self._layout_checked = True

    def _migrate(self, where: str) -> None:
        """Run the pending migrations while holding ``<prefix>layout:lock``; each step's new
        version is stored as soon as it is done, so an interrupted run resumes where it stopped."""
        lock, token = f"{self._layout_key}:lock", uuid.uuid4().hex
        backoff = Backoff(attempts=200, base=0.01, cap=1.0)
        for delay in backoff.delays():
            if self.client.set(lock, token, nx=True, ex=MIGRATION_LOCK_SECONDS):
                break
            time.sleep(delay)
        else:
            raise ConcurrencyError(f"the Redis layout lock {lock!r} stayed taken; is a migration still running?")
        try:
            found = REDIS_LAYOUT.parse(self.client.get(self._layout_key), where)  # re-read under the lock
            for step in REDIS_LAYOUT.steps(found, where):
                step.upgrade(self)
                note = f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {step.description}"
                self.client.hset(f"{self._layout_key}:migrations", str(step.to_version), note)
                self.client.set(self._layout_key, step.to_version)
        finally:
            self.client.eval(_UNLOCK, 1, lock, token)

    @property
    def _ttl(self) -> int:
        return self.ttl_seconds or 0

    # -- reading -----------------------------------------------------------------------------

    def _snapshot(self, cid: str, reply: list[Any]) -> Snapshot:
        version, last_seq, error, summary, pinned, active, archived_count = reply[:7]
        error_text = _text(error)
        return Snapshot(
            conversation_id=cid,
            version=int(version),
            last_seq=int(last_seq),
            window=Window(
                pinned=tuple(_event(e) for e in pinned),
                summary=_event(summary) if summary else None,
                active=tuple(_event(e) for e in active),
            ),
            archived_count=int(archived_count),
            compaction_error=error_text[1:] if error_text else None,
        )

    def load(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        return self._snapshot(cid, self._run("load", cid))

    def history(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)
        reply = self._run("history", cid)
        snapshot = self._snapshot(cid, reply)
        events = [*snapshot.window.events(), *(_event(e, archived=True) for e in reply[7])]
        return sorted(events, key=lambda e: e.seq or 0)

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        cid = check_conversation_id(conversation_id)
        mode = "any" if query.match_mode is MatchMode.ANY else "all"
        total, hits = self._call(
            self._scripts["search"],
            self._keys(cid)[: len(_SUFFIXES)],
            (mode, query.offset, query.limit, "1" if query.include_recall_tools else "0", *query.terms),
        )
        events = [_event(hits[i + 1], archived=_text(hits[i]) == "1") for i in range(0, len(hits), 2)]
        return SearchResult(events=events, total=int(total))

    def conversations(self) -> list[str]:
        self._check_layout()
        ids = sorted(_text(m) for m in self.client.smembers(self._registry))
        if self.cluster:
            # no cross-slot script on a cluster: filter out expired conversations, leave the ids
            pipe = self.client.pipeline(transaction=False)
            for cid in ids:
                pipe.exists(self._keys(cid)[0])
            return [cid for cid, alive in zip(ids, pipe.execute()) if alive]
        live: list[str] = []
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            keys = [self._registry, *(self._keys(cid)[0] for cid in chunk)]
            live += [_text(cid) for cid in self._call(self._prune, keys, chunk)]
        return sorted(live)

    # -- writing -----------------------------------------------------------------------------

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        args: list[Any] = [cid, self._ttl, uuid.uuid4().hex]
        for event in events:
            envelope = event.to_json()
            if event.type is EventType.SYSTEM:
                args += ["p", envelope, "", envelope_id_prefix(envelope)]
            else:
                args += ["a", envelope, search_text(event) or "", envelope_id_prefix(envelope)]
        created, reply = self._run("append", cid, *args)
        if created and self.cluster:
            self.client.sadd(self._registry, cid)
        return self._snapshot(cid, reply)

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        cap = self.archive_cap(plan)
        summary = plan.summary.model_copy(update={"seq": None, "archived": False}).to_json() if plan.summary else ""
        record = json.dumps(plan.record) if plan.record is not None else ""
        applied = self._run(
            "apply",
            cid,
            plan.expected_version,
            plan.archive_through_seq,
            summary,
            "" if cap is None else cap,
            self._ttl,
            record,
            self.compaction_records_kept,
        )
        return bool(applied)

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        cid = check_conversation_id(conversation_id)
        self._check_layout()
        return [json.loads(_text(r)) for r in self.client.lrange(self._keys(cid)[6], 0, -1)]

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        self._run("record_error", cid, "0" if message is None else "1", message or "", self._ttl)

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        self._check_layout()
        keys = self._keys(cid)[: len(_SUFFIXES)]
        if self.cluster:
            # registry first: an append racing with this clear re-registers after it
            self.client.srem(self._registry, cid)
            self.client.delete(*keys)
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(self._registry, cid)
        pipe.delete(*keys)
        pipe.execute()


__all__ = ["DEFAULT_MAX_ARCHIVED_EVENTS", "DEFAULT_PREFIX", "REDIS_LAYOUT", "RedisStore"]
