"""The Redis store: one Lua script (one round trip) per append, window read and compaction,
on a single Redis server or on Redis Cluster.

Layout, per conversation, under a configurable prefix (default ``chat-memory:``)::

    <prefix>{<digest>}:meta      hash: cid, version, last_seq, error, summary
    <prefix>{<digest>}:pinned    list of system events
    <prefix>{<digest>}:active    list of active real events
    <prefix>{<digest>}:archive   sorted set of archived events, scored by seq
    <prefix>{<digest>}:texts     hash seq -> folded search text of each real event
    <prefix>{<digest>}:recent    sorted set of the last request tokens (retry de-duplication)
    <prefix>conversations        set of conversation ids (the registry)

``<digest>`` is a hash of the conversation id, so whatever the id contains (``{``, ``}``,
``*``, ``:``…) it can neither break the ``{…}`` hash tag nor collide with another id's keys;
every key of a conversation lands in one hash slot. The id itself is kept in ``meta`` (and
checked there, so a digest collision is refused rather than mixed up) and in the registry.
Stored elements are ``"<seq>:<event JSON>"``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError, StorageError
from ..events import Event, EventType, Window
from ..search import MatchMode, SearchQuery, SearchResult, search_text
from .base import CompactionPlan, Snapshot, Store, check_conversation_id

DEFAULT_PREFIX = "chat-memory:"
DEFAULT_MAX_ARCHIVED_EVENTS = 1000
_SUFFIXES = ("meta", "pinned", "active", "archive", "texts", "recent")
_SCRIPTS = ("load", "append", "apply", "history", "search", "record_error")
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_OPTIONS = ("prefix", "max_archived_events", "ttl_seconds")
# Small socket timeouts and a few quick retries: a server that is down or restarting gives a
# StorageError within about a second or two instead of hanging the agent.
_DRIVER_DEFAULTS: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 2.0}
_RETRIES = 3


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


def _optional_int(name: str, value: Any, *, minimum: int) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} ({value!r}) must be a whole number") from None
    if isinstance(value, bool) or number < minimum:
        raise ConfigurationError(f"{name} ({value!r}) must be a whole number, {minimum} or more")
    return number


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
        self.default_max_archived_events = _optional_int("max_archived_events", max_archived_events, minimum=0)
        self.ttl_seconds = _optional_int("ttl_seconds", ttl_seconds, minimum=1)
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
        query = parse_qsl(parts.query, keep_blank_values=True)
        store_options: dict[str, Any] = {key: value for key, value in query if key in _OPTIONS}
        store_options.update({key: options.pop(key) for key in _OPTIONS if key in options})
        driver_query = [(key, value) for key, value in query if key not in _OPTIONS]
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
        try:
            return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except _driver().exceptions.NoScriptError:
            return self.client.eval(script.script, len(keys), *keys, *args)

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
        total, hits = self._call(self._scripts["search"], self._keys(cid)[:6], (mode, query.offset, query.limit, *query.terms))
        events = [_event(hits[i + 1], archived=_text(hits[i]) == "1") for i in range(0, len(hits), 2)]
        return SearchResult(events=events, total=int(total))

    def conversations(self) -> list[str]:
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
            if event.type is EventType.SYSTEM:
                args += ["p", event.to_json(), ""]
            else:
                args += ["a", event.to_json(), search_text(event) or ""]
        created, reply = self._run("append", cid, *args)
        if created and self.cluster:
            self.client.sadd(self._registry, cid)
        return self._snapshot(cid, reply)

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        cap = plan.max_archived_events if plan.max_archived_events is not None else self.default_max_archived_events
        summary = plan.summary.model_copy(update={"seq": None, "archived": False}).to_json() if plan.summary else ""
        applied = self._run(
            "apply", cid, plan.expected_version, plan.archive_through_seq, summary, "" if cap is None else cap, self._ttl
        )
        return bool(applied)

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        self._run("record_error", cid, "0" if message is None else "1", message or "", self._ttl)

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        keys = self._keys(cid)[:6]
        if self.cluster:
            # registry first: an append racing with this clear re-registers after it
            self.client.srem(self._registry, cid)
            self.client.delete(*keys)
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(self._registry, cid)
        pipe.delete(*keys)
        pipe.execute()


__all__ = ["DEFAULT_MAX_ARCHIVED_EVENTS", "DEFAULT_PREFIX", "RedisStore"]
