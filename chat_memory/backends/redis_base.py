"""The base of the Redis stores' I/O-free half: the store options, the key layout's version
and its migration, how a step runs a script or a command, and the windows a store holds.

:class:`RedisBase` is what every mixin of the Redis steps builds on (the reads of
:mod:`.redis_reads`, the appends of :mod:`.redis_sansio`, then :mod:`.redis_writes`,
:mod:`.redis_lifecycle` and :mod:`.redis_transfer`); the module constants here are the ones
its methods read (:data:`WINDOWS_KEPT`, :data:`REDIS_LAYOUT`, :data:`MIGRATION_LOCK_SECONDS`),
so a test or a benchmark that rebinds one rebinds it here.
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar, Generic, TypeVar

from ..backoff import Backoff
from ..errors import ConcurrencyError, ConfigurationError
from ..steps import Sleep
from .base import COMPACTION_RECORDS_KEPT, Snapshot
from .declarations import StoreOption
from .failures import DriverErrors
from .migrations import StoredFormat
from .redis_io import (
    REDIS_DRIVER_ERRORS,
    SCHEMES,
    CommandName,
    LuaScript,
    RedisSteps,
    Script,
    Upgrade,
    command,
    script,
)
from .redis_wire import _SUFFIXES, ScriptName, _text, conversation_base, lifecycle_keys, lua

#: The client type of a store (a sync or an asyncio redis-py client).
ClientT = TypeVar("ClientT")

DEFAULT_PREFIX = "chat-memory:"
DEFAULT_MAX_ARCHIVED_EVENTS = 1000
URL_OPTIONS = (
    StoreOption("prefix"),
    StoreOption("max_archived_events", int, minimum=0, nullable=True),
    StoreOption("ttl_seconds", int, minimum=1, nullable=True),
    StoreOption("ttl_ms", int, minimum=1, nullable=True),
)
#: How many conversations' last windows a store keeps (its own last read or write of each), so
#: that a read or an append the copy is still current for is answered without the window
#: (``window_unless`` in prelude.lua). The events are shared with the snapshots handed out.
#: A trade-off, measured (docs/performance.md, "The held-window cache"): a cache smaller than
#: the set of active conversations misses every time they cycle through it, but every held
#: window is walked by each full garbage collection. With 1,000 conversations on one loop,
#: 2,048 carried ~35% more turns/s and doubled the longest collection (its longest stall
#: 59-89 ms of loop CPU against 46-53 at 256), so 256 stays the default for the loop's
#: latency. A held window costs what its events do: ~1.1 KB of heap an event.
WINDOWS_KEPT = 256
#: The key layout's version and its migrations (N -> N+1), each called with the store (an
#: async store awaits what a migration returns). Data written before the layout key existed
#: is layout 1.
REDIS_LAYOUT: StoredFormat[Any] = StoredFormat(
    "Redis key layout", current=1, remedy="upgrade chat-memory, or use another prefix"
)
#: Seconds a migration may hold the lock before another store may take it over.
MIGRATION_LOCK_SECONDS = 300

_UNLOCK = LuaScript(
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


class RedisBase(ABC, Generic[ClientT]):
    """The options, keys, layout check, script running and held windows of the Redis stores'
    I/O-free half (see :class:`~chat_memory.backends.redis_sansio.RedisSansIO`, which composes
    the steps over it), over a client of type ``ClientT``."""

    schemes: ClassVar[tuple[str, ...]] = SCHEMES
    extra: ClassVar[str | None] = "redis"
    driver_errors: ClassVar[DriverErrors] = REDIS_DRIVER_ERRORS
    url_options: ClassVar[tuple[StoreOption, ...]] = URL_OPTIONS
    passes_query_to_driver: ClassVar[bool] = True
    compaction_records_kept: ClassVar[int] = COMPACTION_RECORDS_KEPT
    default_max_archived_events: int | None
    _layout_checked = False

    def __init__(
        self,
        client: ClientT,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_archived_events: int | None = DEFAULT_MAX_ARCHIVED_EVENTS,
        ttl_seconds: int | None = None,
        ttl_ms: int | None = None,
        owns_client: bool = False,
    ) -> None:
        cluster = self._is_cluster(client)
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigurationError(
                f"prefix ({prefix!r}) must be a string without '{{' or '}}' (they mark hash tags)"
            )
        declared = {option.name: option for option in URL_OPTIONS}
        name = type(self).__name__
        self.client = client
        self.cluster = cluster
        self.prefix = prefix
        self.default_max_archived_events = declared["max_archived_events"].parse(
            max_archived_events, name
        )
        self.ttl_seconds = declared["ttl_seconds"].parse(ttl_seconds, name)
        self.ttl_ms = declared["ttl_ms"].parse(ttl_ms, name)
        self._owns_client = owns_client
        self._closed = False
        self._registry = f"{prefix}conversations"
        # conversation id -> (epoch, the last snapshot this store read or wrote), oldest first
        self._windows: dict[str, tuple[str, Snapshot]] = {}
        self._windows_lock = threading.Lock()
        # conversation id -> its script keys, encoded (:meth:`_script_keys`)
        self._key_cache: dict[str, tuple[bytes, ...]] = {}

    @abstractmethod
    def _is_cluster(self, client: ClientT) -> bool:
        """Whether ``client`` is a cluster client (refusing one of the wrong kind): each store
        knows its own driver's client classes."""

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "server"
        return f"{type(self).__name__}({kind}, prefix={self.prefix!r})"

    def _keys(self, cid: str) -> list[str]:
        """The conversation's keys (``_SUFFIXES``), then the registry (a single server only)
        and the lifecycle keys of its slot (:mod:`.redis_lifecycle`), which the prelude finds by
        name: a scoped conversation lives in its scope's hash slot."""
        base = conversation_base(self.prefix, cid)
        keys = [f"{base}:{suffix}" for suffix in _SUFFIXES]
        # the registry lives in another slot: scripts may touch it only on a single server
        registry = [] if self.cluster else [self._registry]
        return [*keys, *registry, *lifecycle_keys(self.prefix, cid, self.cluster)]

    @property
    def _layout_key(self) -> str:
        return f"{self.prefix}layout"

    @property
    def _ttl(self) -> int:
        """The TTL the scripts set, in milliseconds (0: none)."""
        if self.ttl_ms is not None:
            return int(self.ttl_ms)
        return int(self.ttl_seconds or 0) * 1000

    # -- layout version ----------------------------------------------------------------------

    def _layout_steps(self) -> RedisSteps[None]:
        """Once per store: read the prefix's layout version, migrate older data, refuse newer."""
        if self._layout_checked:
            return
        found = yield from command("get", self._layout_key)
        if found is None:
            # a new prefix, or data from before the key existed (which is layout 1)
            found = 1 if (yield from command("exists", self._registry)) else REDIS_LAYOUT.current
            yield from command("set", self._layout_key, found, nx=True)
            found = (
                yield from command("get", self._layout_key)
            ) or found  # another store may have set it first
        where = f"Redis key {self._layout_key!r}"
        if REDIS_LAYOUT.steps(REDIS_LAYOUT.parse(found, where), where):
            self._layout_checked = True  # migrations may use the store's own commands
            try:
                yield from self._migrate_steps(where)
            except BaseException:
                self._layout_checked = False
                raise
        self._layout_checked = True

    def _migrate_steps(self, where: str) -> RedisSteps[None]:
        """Run the pending migrations while holding ``<prefix>layout:lock``; each step's new
        version is stored as soon as it is done, so an interrupted run resumes where it stopped."""
        lock, token = f"{self._layout_key}:lock", uuid.uuid4().hex
        for delay in Backoff(attempts=200, base=0.01, cap=1.0).delays():
            if (yield from command("set", lock, token, nx=True, ex=MIGRATION_LOCK_SECONDS)):
                break
            yield Sleep(delay)
        else:
            raise ConcurrencyError(
                f"the Redis layout lock {lock!r} stayed taken; is a migration still running?"
            )
        try:
            found = REDIS_LAYOUT.parse(
                (yield from command("get", self._layout_key)), where
            )  # re-read under the lock
            for step in REDIS_LAYOUT.steps(found, where):
                yield Upgrade(step)
                note = (
                    f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {step.description}"
                )
                yield from command(
                    "hset", f"{self._layout_key}:migrations", str(step.to_version), note
                )
                yield from command("set", self._layout_key, step.to_version)
        finally:
            yield from script(_UNLOCK, (lock,), (token,))

    def _script_steps(
        self, source: LuaScript, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> RedisSteps[Any]:
        """Run any script after the layout check."""
        if not self._layout_checked:
            yield from self._layout_steps()
        return (yield Script(source, tuple(keys), tuple(args)))

    def _run_steps(self, name: ScriptName, cid: str, *args: Any) -> RedisSteps[Any]:
        """Run ``redis_scripts/<name>.lua`` on the keys of conversation ``cid``."""
        return (yield from self._script_steps(lua(name), self._script_keys(cid), args))

    def _script_keys(self, cid: str) -> tuple[bytes, ...]:
        """:meth:`_keys` as the bytes a script call sends, kept for the conversations used last
        (they are the same for the store's life): deriving them hashes the id and the client
        encodes each str key again, on every call."""
        keys = self._key_cache.get(cid)
        if keys is None:
            keys = tuple(key.encode("utf-8") for key in self._keys(cid))
            if len(self._key_cache) >= WINDOWS_KEPT:
                self._key_cache.clear()  # cheap and rare: a miss costs one derivation
            self._key_cache[cid] = keys
        return keys

    def _command_steps(self, name: CommandName, *args: Any) -> RedisSteps[Any]:
        """One client command after the layout check."""
        yield from self._layout_steps()
        return (yield from command(name, *args))

    # -- the windows this store holds ---------------------------------------------------------

    def _held(self, cid: str) -> tuple[str, Snapshot] | None:
        """This store's last snapshot of ``cid`` and its epoch (taken before a request: another
        thread may replace it before the reply comes)."""
        with self._windows_lock:
            return self._windows.get(cid)

    @staticmethod
    def _held_args(held: tuple[str, Snapshot] | None) -> tuple[str, str]:
        """The epoch and version a script compares with the stored ones ('' and '': none)."""
        return (held[0], str(held[1].version)) if held else ("", "")

    def _hold(self, cid: str, epoch: bytes | str, snapshot: Snapshot) -> Snapshot:
        """Keep ``snapshot`` as this store's copy of ``cid`` (not when the conversation has no
        epoch: written by an older chat-memory, or not stored); returns it."""
        epoch = _text(epoch)
        with self._windows_lock:
            self._windows.pop(cid, None)
            if epoch:
                self._windows[cid] = (epoch, snapshot)
                if len(self._windows) > WINDOWS_KEPT:
                    del self._windows[next(iter(self._windows))]
        return snapshot


__all__ = [
    "DEFAULT_MAX_ARCHIVED_EVENTS",
    "DEFAULT_PREFIX",
    "MIGRATION_LOCK_SECONDS",
    "REDIS_LAYOUT",
    "URL_OPTIONS",
    "WINDOWS_KEPT",
    "ClientT",
    "RedisBase",
]
