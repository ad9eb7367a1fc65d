"""How the Redis stores talk to redis-py: the closed set of requests their steps yield
(:data:`RedisRequest`), the two drivers that do them with a client (:func:`run` with a sync
``redis.Redis`` / ``RedisCluster``, :func:`arun` with their ``redis.asyncio`` twins), and the
client a store URL describes.

The steps themselves — what the stores do, without I/O — are
:class:`~chat_memory.backends.redis_sansio.RedisSansIO`'s. A step is a generator typed
:data:`RedisSteps` ``[T]``: it yields a request (or a :class:`~chat_memory.steps.Sleep`),
receives the reply (or has the driver's exception thrown into it at the ``yield``) and
returns its ``T``. Nothing here imports redis-py until a driver or a client needs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError
from ..steps import Sleep, adrive, drive
from .declarations import DeclaresOptions, settings_from_url
from .failures import DriverErrors
from .migrations import Migration

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.client import Redis
    from redis.cluster import RedisCluster

    #: A sync redis-py client, of a single server or a cluster.
    SyncClient: TypeAlias = Redis | RedisCluster
    #: A ``redis.asyncio`` client, of a single server or a cluster.
    AsyncClient: TypeAlias = AsyncRedis | AsyncRedisCluster

T = TypeVar("T")

SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# Small socket timeouts and a few quick retries: a server that is down or restarting gives a
# StorageError within about a second or two instead of hanging the agent.
_DRIVER_DEFAULTS: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 2.0}
RETRIES = 3
#: What the Redis stores turn into StorageError: redis-py's errors (it wraps socket errors in
#: its ConnectionError and TimeoutError) and its cluster client's, which are not RedisErrors.
REDIS_DRIVER_ERRORS: DriverErrors = (
    "redis.exceptions:RedisError",
    "redis.exceptions:RedisClusterException",
)

#: The client commands a step may ask for, by redis-py method name (same on every client).
CommandName = Literal[
    "delete", "exists", "get", "hset", "lrange", "sadd", "set", "smembers", "srem", "zrange"
]


class ScriptSource(Protocol):
    """A Lua script as ``EVALSHA`` and ``EVAL`` take it: a :class:`LuaScript`, or the
    ``Script`` of redis-py's ``register_script``."""

    @property
    def sha(self) -> str: ...

    @property
    def script(self) -> str | bytes: ...


@dataclass(frozen=True)
class LuaScript:
    """A script's source and SHA1 (what ``EVALSHA`` names it by)."""

    script: str

    @cached_property
    def sha(self) -> str:
        """The SHA1 hex digest of the source (computed once)."""
        return hashlib.sha1(self.script.encode("utf-8")).hexdigest()

    @cached_property
    def sha_bytes(self) -> bytes:
        """:attr:`sha` as ``EVALSHA`` sends it (encoded once, not by the client on every call)."""
        return self.sha.encode("ascii")

    @classmethod
    def of(cls, script: ScriptSource) -> LuaScript:
        """``script`` as a :class:`LuaScript` (itself when it is one)."""
        if isinstance(script, LuaScript):
            return script
        source = script.script
        return cls(source.decode("utf-8") if isinstance(source, bytes) else source)


@dataclass(frozen=True)
class Command:
    """One client command, ``client.<name>(*args, **options)``: its reply as redis-py gives it."""

    name: CommandName
    args: tuple[Any, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Script:
    """Run ``script`` with ``keys`` and ``args``: ``EVALSHA``, and ``EVAL`` when the server
    does not know it (first use, ``SCRIPT FLUSH``, a restart or a failover). Its reply."""

    script: LuaScript
    keys: tuple[str | bytes, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Pipeline:
    """Send ``commands`` in one pipeline (``MULTI``/``EXEC`` when ``transaction``; a cluster
    client takes no transaction): the list of their replies."""

    commands: tuple[Command, ...]
    transaction: bool


@dataclass(frozen=True)
class Upgrade:
    """Run one layout migration on the store (an async store awaits what it returns)."""

    migration: Migration[Any]


#: What a Redis step may ask its driver for (besides a :class:`~chat_memory.steps.Sleep`).
RedisRequest = Command | Script | Pipeline | Upgrade
#: A Redis step returning ``T``: yields requests, receives their replies.
RedisSteps = Generator[RedisRequest | Sleep, Any, T]


def command(name: CommandName, *args: Any, **options: Any) -> RedisSteps[Any]:
    """``reply = yield from command("get", key)``: one client command as a step."""
    return (yield Command(name, args, options))


def script(
    source: LuaScript, keys: tuple[str | bytes, ...], args: tuple[Any, ...]
) -> RedisSteps[Any]:
    """``reply = yield from script(lua("load"), keys, args)``: one script call as a step."""
    return (yield Script(source, keys, args))


# -- the drivers --------------------------------------------------------------------------


def run(steps: RedisSteps[T], client: SyncClient, store: object) -> T:
    """Drive ``steps`` with a sync client, in this thread (``store`` is what a layout
    migration is given)."""
    return drive(steps, lambda request: _do(request, client, store))


def _do(request: RedisRequest | Sleep, client: SyncClient, store: object) -> Any:
    if isinstance(request, Command):
        return getattr(client, request.name)(*request.args, **request.options)
    if isinstance(request, Script):
        return run_script(client, request.script, request.keys, request.args)
    if isinstance(request, Pipeline):
        pipe = client.pipeline(transaction=request.transaction)
        for queued in request.commands:
            getattr(pipe, queued.name)(*queued.args, **queued.options)
        return pipe.execute()
    if isinstance(request, Upgrade):
        return request.migration.upgrade(store)
    time.sleep(request.seconds)
    return None


def run_script(
    client: SyncClient, script: LuaScript, keys: tuple[str | bytes, ...], args: tuple[Any, ...]
) -> Any:
    """EVALSHA, and on NOSCRIPT EVAL, which also caches the script on the node that ran it.
    Not redis-py's own fallback: on a cluster it sends SCRIPT LOAD to every primary, and so
    fails while any one of them is down."""
    try:
        # the SHA as bytes: the client would encode the str again on every call
        sha: Any = script.sha_bytes  # redis-py sends bytes as they are; its stubs say str
        return client.evalsha(sha, len(keys), *keys, *args)
    except _no_script_error():
        return client.eval(script.script, len(keys), *keys, *args)


@cache
def _no_script_error() -> type[Exception]:
    # looked up once: an import statement in the call costs ~2.5 µs on every script call
    from redis.exceptions import NoScriptError

    return NoScriptError


async def arun(steps: RedisSteps[T], client: AsyncClient, store: object) -> T:
    """Drive ``steps`` with a ``redis.asyncio`` client: every request awaited, pauses are
    ``asyncio.sleep``, so the event loop never waits on Redis."""
    return await adrive(steps, lambda request: _ado(request, client, store))


async def _ado(request: RedisRequest | Sleep, client: AsyncClient, store: object) -> Any:
    if isinstance(request, Command):
        return await getattr(client, request.name)(*request.args, **request.options)
    if isinstance(request, Script):
        return await arun_script(client, request.script, request.keys, request.args)
    if isinstance(request, Pipeline):
        pipe = client.pipeline(transaction=request.transaction)
        for queued in request.commands:
            getattr(pipe, queued.name)(*queued.args, **queued.options)
        return await pipe.execute()
    if isinstance(request, Upgrade):
        done = request.migration.upgrade(store)
        return (await done) if inspect.isawaitable(done) else done
    await asyncio.sleep(request.seconds)
    return None


async def arun_script(
    client: AsyncClient, script: LuaScript, keys: tuple[str | bytes, ...], args: tuple[Any, ...]
) -> Any:
    """:func:`run_script`, awaited."""
    try:
        sha: Any = script.sha_bytes  # as in run_script
        return await client.evalsha(sha, len(keys), *keys, *args)
    except _no_script_error():
        return await client.eval(script.script, len(keys), *keys, *args)


# -- the client a store URL describes --------------------------------------------------------


def driver(*modules: str) -> Any:
    """The ``redis`` package, with ``modules`` of it imported; a missing one names the extra."""
    try:
        import redis

        for module in modules:
            importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            "the Redis stores need the redis driver; pip install 'chat-memory[redis]'"
        ) from exc
    return redis


def driver_target(
    store: DeclaresOptions, url: str, options: Mapping[str, Any]
) -> tuple[dict[str, Any], str, dict[str, Any], bool]:
    """Split a store URL and keyword options into (the store's settings, the URL for the
    redis-py client, the client's options without its retry policy, whether it is a cluster).
    Query parameters and keywords that are not store options go to the client."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"store URL scheme ({scheme!r}) is not a Redis scheme; use redis://, rediss:// or redis+cluster://"
        )
    settings, driver_query = settings_from_url(store, parts.query, options)
    driver_options = {**_DRIVER_DEFAULTS, **{k: v for k, v in options.items() if k not in settings}}
    if not _SETINFO_OPTIONS & {*(name for name, _ in driver_query), *driver_options}:
        driver_options.update(_client_identity())
    _check_client_options(
        store, [*(name for name, _ in driver_query), *options.keys() - settings.keys()]
    )
    driver_url = urlunsplit(
        (
            _CLUSTER_SCHEMES.get(scheme, scheme),
            parts.netloc,
            parts.path,
            urlencode(driver_query),
            "",
        )
    )
    return settings, driver_url, driver_options, scheme in _CLUSTER_SCHEMES


#: The client options that name what CLIENT SETINFO reports; a caller's choice is left alone.
_SETINFO_OPTIONS = frozenset({"driver_info", "lib_name", "lib_version"})


@cache
def _client_identity() -> dict[str, Any]:
    """One ``DriverInfo`` shared by every connection the stores open (a redis-py that has
    ``redis.driver_info``): without it, redis-py builds one for each new connection and
    looks its own version up in the installed packages' metadata each time, 1–2 ms of CPU a
    connection, all of them on the event loop when a burst of requests opens a pool's
    connections at once. What the server is told (CLIENT SETINFO) is unchanged. Empty for a
    redis-py without it (5.x reads its version once, at import)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


def _check_client_options(store: DeclaresOptions, names: list[str]) -> None:
    """Refuse, when the store is opened, an option that is neither the store's nor one a
    redis-py client, connection pool or connection takes (redis-py itself would raise a
    TypeError at the first command)."""
    redis = driver("redis.cluster")
    accepted: set[str] = set()
    for target in (
        redis.Redis.__init__,
        redis.cluster.RedisCluster.__init__,
        redis.connection.ConnectionPool.__init__,
        redis.connection.Connection.__init__,
        redis.connection.SSLConnection.__init__,
        redis.connection.UnixDomainSocketConnection.__init__,
        getattr(redis.connection, "AbstractConnection", redis.connection.Connection).__init__,
    ):
        accepted.update(inspect.signature(target).parameters)
    unknown = sorted({name for name in names if name not in accepted})
    if unknown:
        known = ", ".join(option.name for option in store.url_options)
        raise ConfigurationError(
            f"store URL option {unknown[0]!r} is neither a Redis store option ({known}) nor "
            "an option of redis-py's client, connection pool or connection"
        )


def retry(retry_class: Any, errors: tuple[type[BaseException], ...]) -> Any:
    """A few quick jittered retries on ``errors`` (``redis.retry.Retry`` or its asyncio twin)."""
    # FullJitterBackoff (uniform up to min(cap, base * 2**failures)) is in every redis>=5.0;
    # ExponentialWithJitterBackoff, nearly the same, only from 5.3 on.
    from redis.backoff import FullJitterBackoff

    return retry_class(FullJitterBackoff(cap=0.5, base=0.05), RETRIES, supported_errors=errors)


__all__ = [
    "SCHEMES",
    "Command",
    "CommandName",
    "LuaScript",
    "Pipeline",
    "RedisRequest",
    "RedisSteps",
    "Script",
    "ScriptSource",
    "Upgrade",
    "arun",
    "arun_script",
    "command",
    "driver",
    "driver_target",
    "retry",
    "run",
    "run_script",
]
