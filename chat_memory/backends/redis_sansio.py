"""The Redis stores' I/O-free half: the key layout, the store options, the Lua scripts and
their arguments, the layout check and migration, and the replies turned into snapshots, events
and search results — written once, as steps.

Each operation of :class:`RedisSansIO` is a generator typed
:data:`~chat_memory.backends.redis_io.RedisSteps` ``[T]``: it yields the Redis I/O it needs as
one of the closed set of requests of :mod:`.redis_io` (a :class:`~.redis_io.Command`, a
:class:`~.redis_io.Script`, a :class:`~.redis_io.Pipeline`, an :class:`~.redis_io.Upgrade` of
the layout, or a :class:`~chat_memory.steps.Sleep`), receives the reply and returns its value.
:class:`~chat_memory.backends.redis.RedisStore` drives the steps with
:func:`~chat_memory.backends.redis_io.run` (plain redis-py calls) and
:class:`~chat_memory.backends.redis_aio.AsyncRedisStore` with
:func:`~chat_memory.backends.redis_io.arun` (awaited ``redis.asyncio`` calls); neither owns
anything but its client.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Generic, Literal, TypeVar

from ..backoff import Backoff
from ..errors import ConcurrencyError, ConfigurationError, InvalidInputError, StorageError
from ..events import Event, EventType, Window
from ..lifecycle.keys import is_scoped, scope_of_key, stored_key
from ..search import MatchMode, SearchQuery, SearchResult, search_text
from ..steps import Sleep
from .base import COMPACTION_RECORDS_KEPT, CompactionPlan, Snapshot, check_conversation_id
from .bookkeeping import envelope_id_prefix, replaced, tool_call_fragment, tool_events
from .declarations import StoreOption
from .failures import DriverErrors
from .migrations import StoredFormat
from .redis_io import (
    REDIS_DRIVER_ERRORS,
    SCHEMES,
    Command,
    CommandName,
    LuaScript,
    Pipeline,
    RedisSteps,
    Script,
    Upgrade,
    command,
    script,
)

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
_SUFFIXES = (
    "meta",
    "pinned",
    "active",
    "archive",
    "texts",
    "recent",
    "compactions",
    "ids",
    "calls",
    "retracted",
    "timeline",
)
#: Items of the reply of ``window()`` (prelude.lua): version, last seq, error, summary, pinned,
#: active, archive size, failed compactions; a script that returns more puts it after these.
_WINDOW_REPLY = 8
#: The keys ``load.lua`` reads (meta, pinned, active, archive: ``window_unless``), the first of
#: ``_SUFFIXES``: a read sends only those, not the fifteen or so a write needs.
_WINDOW_KEYS = 4
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
#: Server time one ``search.lua`` call may take before it returns a cursor (plus at most one
#: step of about 1 ms): Redis serves no other client while a script runs.
SEARCH_CALL_MICROSECONDS = 5000
#: Bytes of text a search call matches (summed over the terms) between two reads of the
#: server clock: about 0.1 to 1 ms of work.
SEARCH_CHECK_BYTES = 131_072
#: How often a search starts over because its conversation was cleared under it.
SEARCH_RESTARTS = 3

#: The scripts of ``redis_scripts/`` (besides ``prelude.lua``, which each of them but ``prune``
#: starts with).
ScriptName = Literal[
    "append",
    "apply",
    "dump",
    "find",
    "fork",
    "history",
    "load",
    "prune",
    "record_error",
    "restore",
    "retract",
    "search",
]

_UNLOCK = LuaScript(
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


@cache
def lua(name: ScriptName) -> LuaScript:
    """The script ``redis_scripts/<name>.lua`` (after the shared prelude, except ``prune``)."""
    folder = resources.files(__package__) / "redis_scripts"
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name != "prune":
        body = (folder / "prelude.lua").read_text(encoding="utf-8") + "\n" + body
    return LuaScript(body)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _event(element: bytes | str, archived: bool = False, retracted: bool = False) -> Event:
    seq, _, envelope = _text(element).partition(":")
    return replaced(
        Event.from_json(envelope), {"seq": int(seq), "archived": archived, "retracted": retracted}
    )


def _stored(envelope: str, seq: int) -> Event:
    """The stored copy of an event appended as ``envelope`` with ``seq``: what reading back
    its element (``"<seq>:<envelope>"``) gives, without the round trip."""
    return replaced(Event.from_json(envelope), {"seq": seq, "archived": False, "retracted": False})


def _with_batch(window: Window, batch: Sequence[tuple[Event, str]], seqs: Sequence[Any]) -> Window:
    """``window`` followed by the events of ``batch`` (each with the envelope sent) that got a
    seq (``seqs``, one per event, 0 for an event stored before): the window after an append
    that added no pinned event."""
    added = [_stored(envelope, int(seq)) for (_, envelope), seq in zip(batch, seqs) if int(seq)]
    if not added:
        return window
    return Window(pinned=window.pinned, summary=window.summary, active=(*window.active, *added))


def _tail_reply(flat: bytes | str) -> list[Any]:
    """An append's ``'tail'`` reply as one string (append.lua) in the shape of the list one:
    ``[created, the window's ten items, (plan applied, archive size)]``."""
    fields = _text(flat).split("|", 10)
    _, created, version, last_seq, archived, failures, epoch, seqs, applied, after, error = fields
    window = [version, last_seq, error, "", [], seqs.split(",") if seqs else [], archived]
    found: list[Any] = [int(created), [*window, failures, "tail", epoch]]
    return [*found, applied, after] if applied else found


def _same_reply(flat: bytes | str) -> list[Any]:
    """A ``'same'`` window reply as one string (load.lua) in the shape of the list one."""
    _, version, last_seq, archived, failures, epoch, error = _text(flat).split("|", 6)
    return [version, last_seq, error, "", [], [], archived, failures, "same", epoch]


def _element_seq(element: bytes | str) -> int:
    """The seq an element (``"<seq>:<envelope>"``) starts with."""
    if isinstance(element, bytes):
        return int(element[: element.index(b":")])
    return int(element[: element.index(":")])


def _id_prefix(event_id: str) -> str:
    """How an envelope starts for an event of this id (``{"id":"…"``), the ``ids`` index's key."""
    return envelope_id_prefix(Event.user("").model_copy(update={"id": event_id}).to_json())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def conversation_base(prefix: str, cid: str) -> str:
    """What every key of conversation ``cid`` starts with (its hash tag included)."""
    if is_scoped(cid):
        return f"{prefix}{{{_digest(scope_of_key(cid))}}}:{_digest(cid)}"
    return f"{prefix}{{{_digest(cid)}}}"


def scope_base(prefix: str, scope: str) -> str:
    """What the lifecycle keys of a scope prefix start with (``""``: the unscoped ones, in the
    registry's slot)."""
    if scope:
        return f"{prefix}{{{_digest(scope)}}}"
    return f"{prefix}{{{prefix}conversations}}"


def lifecycle_keys(prefix: str, cid: str, cluster: bool) -> list[str]:
    """The lifecycle keys a per-conversation script gets after the conversation's own
    (prelude.lua finds them by the role their names end with): on a cluster only those of the
    conversation's slot."""
    keys = [f"{conversation_base(prefix, cid)}:erasing"]
    scope = scope_of_key(cid)
    if scope:
        base = scope_base(prefix, scope)
        keys += [f"{base}:erasingscope", f"{base}:index"]
    elif not cluster:
        keys.append(f"{scope_base(prefix, '')}:index")
    if not cluster:
        keys.append(f"{scope_base(prefix, '')}:scopes")
    return keys


def packed_batch(events: Iterable[Event]) -> tuple[bytes, list[tuple[Event, str]]]:
    """A batch as append.lua takes it, in one argument (a client encodes every argument on its
    own, so one per event field cost more than the rest of an append): per event, ``p``
    (pinned) or ``a``, the envelope's byte length, ``:``, the envelope, the folded text's byte
    length, ``:``, the text. Also each event with its envelope (each serialised once)."""
    parts: list[bytes] = []
    batch: list[tuple[Event, str]] = []
    for event in events:
        envelope = event.to_json()
        batch.append((event, envelope))
        data = envelope.encode("utf-8")
        if event.type is EventType.SYSTEM:
            parts.append(b"p%d:%s0:" % (len(data), data))
        else:
            text = (search_text(event) or "").encode("utf-8")
            parts.append(b"a%d:%s%d:%s" % (len(data), data, len(text), text))
    return b"".join(parts), batch


class StateMoved(Exception):
    """A conditional append found the conversation changed since the state the caller
    checked its batch on: nothing was written (the caller looks again and retries)."""


class RedisSansIO(ABC, Generic[ClientT]):
    """The I/O-free half of the Redis stores (see the module docstring), over a client of
    type ``ClientT``. ``prefix`` namespaces every key (no ``{`` or ``}``);
    ``max_archived_events`` caps the archive when a plan names no cap (None: unbounded);
    ``ttl_seconds`` expires a whole conversation that long after its last write (``ttl_ms``,
    in milliseconds, wins over it: short retentions).

    A store holds its last window of each of the :data:`WINDOWS_KEPT` conversations it used
    last: a window read or an append whose held window is still current (the script compares
    the conversation's epoch and version, atomically) gets back only the bookkeeping and the
    batch's seqs, and nothing is parsed but the batch; any other write, by anyone, is seen."""

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

    # -- reading -----------------------------------------------------------------------------

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

    def _snapshot(
        self,
        cid: str,
        reply: list[Any],
        held: tuple[str, Snapshot] | None = None,
        batch: Sequence[tuple[Event, str]] = (),
    ) -> Snapshot:
        """The snapshot in a reply of ``window()`` (its eight items: every element parsed) or of
        ``window_unless`` and an append, which say how to read it and are kept as this store's
        copy (``'same'``: the held window; ``'tail'``: the held window plus the batch's events
        that got a seq, from the envelopes sent; ``'full'``: the elements, each parsed unless
        the held window of the same epoch has its seq — an element never changes while its
        conversation exists)."""
        version, last_seq, error, summary, pinned, active, archived_count, failures = reply[
            :_WINDOW_REPLY
        ]
        mode, epoch = (
            (_text(reply[_WINDOW_REPLY]), _text(reply[_WINDOW_REPLY + 1]))
            if len(reply) > _WINDOW_REPLY
            else ("full", "")
        )
        if mode == "full":
            reuse: dict[int, Event] = {}
            if held is not None and held[0] == epoch:
                reuse = {e.seq or 0: e for e in held[1].window.events()}

            def parsed(element: bytes | str) -> Event:
                kept = reuse.get(_element_seq(element))
                return kept if kept is not None else _event(element)

            window = Window(
                pinned=tuple(parsed(e) for e in pinned),
                summary=parsed(summary) if summary else None,
                active=tuple(parsed(e) for e in active),
            )
        else:
            # 'same' or 'tail' (the seqs of the batch in place of the active elements)
            assert held is not None, f"a {mode!r} reply to a store that held no window"
            window = (
                _with_batch(held[1].window, batch, active) if mode == "tail" else held[1].window
            )
        error_text = _text(error)
        snapshot = Snapshot(
            conversation_id=cid,
            version=int(version),
            last_seq=int(last_seq),
            window=window,
            archived_count=int(archived_count),
            compaction_error=error_text[1:] if error_text else None,
            compaction_failures=int(failures),
        )
        return self._hold(cid, epoch, snapshot) if len(reply) > _WINDOW_REPLY else snapshot

    def _load_steps(self, conversation_id: str) -> RedisSteps[Snapshot]:
        cid = check_conversation_id(conversation_id)
        held = self._held(cid)
        reply = yield from self._script_steps(
            lua("load"), self._script_keys(cid)[:_WINDOW_KEYS], self._held_args(held)
        )
        if isinstance(reply, (bytes, str)):
            reply = _same_reply(reply)
        return self._snapshot(cid, reply, held)

    def _history_steps(self, conversation_id: str) -> RedisSteps[list[Event]]:
        cid = check_conversation_id(conversation_id)
        reply = yield from self._run_steps("history", cid)
        events = [
            *self._snapshot(cid, reply[:_WINDOW_REPLY]).window.events(),
            *(_event(e, archived=True) for e in reply[_WINDOW_REPLY]),
        ]
        return sorted(events, key=lambda e: e.seq or 0)

    def _search_steps(self, conversation_id: str, query: SearchQuery) -> RedisSteps[SearchResult]:
        """Run ``search.lua`` slice after slice (each call stops after about
        :data:`SEARCH_CALL_MICROSECONDS` of server time and returns a cursor), so that a search
        never holds the single-threaded server for long. Seqs are immutable while a
        conversation exists, so resuming by seq is exact across appends and compactions; a
        conversation cleared (or expired) meanwhile shows as a version or last seq that went
        back, and the search starts over."""
        cid = check_conversation_id(conversation_id)
        keys = self._keys(cid)[: len(_SUFFIXES)]
        mode = "any" if query.match_mode is MatchMode.ANY else "all"
        recall = "1" if query.include_recall_tools else "0"
        for _ in range(SEARCH_RESTARTS):
            cursor: tuple[Any, ...] = (0, 1, "")
            through = seen_version = 0
            matched, hits = 0, list[Any]()
            while True:
                skip, room = max(0, query.offset - matched), max(0, query.limit - len(hits) // 2)
                args = (
                    mode,
                    recall,
                    *cursor,
                    through,
                    skip,
                    room,
                    SEARCH_CALL_MICROSECONDS,
                    SEARCH_CHECK_BYTES,
                    *query.terms,
                )
                reply = yield from self._script_steps(lua("search"), keys, args)
                version, last_seq, used_through, next_seq, next_pos, found, count, slice_hits = (
                    reply
                )
                if through and (int(version) < seen_version or int(last_seq) < through):
                    break  # cleared meanwhile: these seqs are another conversation's now
                through, seen_version = int(used_through), int(version)
                matched += int(count)
                hits += slice_hits
                if not int(next_seq):
                    events = [
                        _event(hits[i + 1], archived=_text(hits[i]) == "1")
                        for i in range(0, len(hits), 2)
                    ]
                    return SearchResult(events=events, total=matched)
                cursor = (int(next_seq), int(next_pos), _text(found))
        raise ConcurrencyError(
            f"conversation {cid!r} was cleared {SEARCH_RESTARTS} times during one search"
        )

    def _find_events_steps(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> RedisSteps[list[Event]]:
        """``find.lua``: the ids through the ``ids`` index, the call ids through the ``calls``
        index (window and archive); only the elements asked for are read. When an index is
        behind (an older chat-memory wrote since), the history instead, once: the next append
        rebuilds the indexes."""
        found, _ = yield from self._find_at_steps(conversation_id, event_ids, tool_call_ids)
        return found

    def _find_at_steps(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> RedisSteps[tuple[list[Event], tuple[str, int]]]:
        """:meth:`_find_events_steps`, and the epoch and version of the state it looked at
        (when the history was read instead, a state no newer than it: an append conditional
        on that state is refused if anything was written meanwhile)."""
        cid = check_conversation_id(conversation_id)
        wanted_ids, wanted_calls = set(event_ids), set(tool_call_ids)
        prefixes = [_id_prefix(i) for i in wanted_ids]
        fields = [tool_call_fragment(i)[len('"tool_call_id":') :] for i in wanted_calls]
        reply = yield from self._run_steps("find", cid, len(prefixes), *prefixes, *fields)
        state = (_text(reply[-1]), int(reply[-2]))
        if int(reply[0]):
            by_id, by_call, flags = reply[1:4]
            found = [_event(e) for e in by_id] + [
                _event(e, archived=_text(f) == "1") for e, f in zip(by_call, flags)
            ]
        else:
            history = yield from self._history_steps(cid)
            found = [
                e
                for e in history
                if e.id in wanted_ids and not e.archived and e.type is not EventType.SUMMARY
            ]
            found += tool_events(history, wanted_calls)
        unique = {e.seq: e for e in found}
        return sorted(unique.values(), key=lambda e: e.seq or 0), state

    def _conversations_steps(self) -> RedisSteps[list[str]]:
        ids = sorted(_text(m) for m in (yield from self._command_steps("smembers", self._registry)))
        if self.cluster:
            # no cross-slot script on a cluster: filter out expired conversations, leave the ids
            alive = yield Pipeline(
                tuple(Command("exists", (self._keys(cid)[0],)) for cid in ids), transaction=False
            )
            return [stored_key(cid) for cid, found in zip(ids, alive) if found]
        live: list[str] = []
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            keys = [self._registry, *(self._keys(cid)[0] for cid in chunk)]
            live += [
                _text(cid) for cid in (yield from self._script_steps(lua("prune"), keys, chunk))
            ]
        return [stored_key(cid) for cid in sorted(live)]

    def _compactions_steps(self, conversation_id: str) -> RedisSteps[list[dict[str, Any]]]:
        cid = check_conversation_id(conversation_id)
        records = yield from self._command_steps(
            "lrange", self._keys(cid)[_SUFFIXES.index("compactions")], 0, -1
        )
        return [json.loads(_text(r)) for r in records]

    # -- writing -----------------------------------------------------------------------------

    def _append_script_steps(
        self,
        cid: str,
        events: Sequence[Event],
        reply: str,
        held: tuple[str, Snapshot] | None,
        condition: str = "",
        basis: tuple[str, int] | None = None,
        plan: tuple[str, str] | None = None,
    ) -> RedisSteps[tuple[list[Any], list[tuple[Event, str]]]]:
        """One append script call (``reply``: ``"w"`` the window, ``"b"`` the batch's seqs),
        and each event with the envelope sent (each event is serialised once). The whole batch
        goes in one call, so it is stored whole or not at all; the script itself never hands
        Redis more than 1,000 arguments per command.

        ``condition`` (``"!"``: the held window, ``"="``: ``basis``, the epoch and version of a
        state looked up) makes the append conditional on the conversation being at that state
        still; when it is not, nothing is written and :class:`StateMoved` is raised. ``plan``:
        the compaction plan and record arguments of append.lua (see there)."""
        if basis is None and held is not None:
            basis = (held[0], held[1].version)
        reply = (
            f"{reply}{condition}" if basis is None else f"{reply}{condition}:{basis[0]}:{basis[1]}"
        )
        packed, batch = packed_batch(events)
        args: tuple[Any, ...] = (cid, self._ttl, uuid.uuid4().hex, reply, packed)
        if plan is not None:
            args += plan
        found: Any = yield from self._run_steps("append", cid, *args)
        if isinstance(found, (bytes, str)):
            found = _tail_reply(found)
        if int(found[0]) < 0:
            if int(found[0]) == -2:
                raise ConcurrencyError(
                    f"conversation {cid[:80]!r} is being erased (forget); writes that would "
                    "create it again are refused until the erasure guard lapses"
                )
            raise StateMoved(cid)
        if found[0] and self.cluster:
            yield from self._created_steps(cid)
        return found, batch

    def _created_steps(self, cid: str) -> RedisSteps[None]:
        """After a write created ``cid`` on a cluster: what lives in other hash slots (the
        registry; a lifecycle ability adds its indexes)."""
        yield from command("sadd", self._registry, cid)

    def _append_steps(self, conversation_id: str, events: Sequence[Event]) -> RedisSteps[Snapshot]:
        cid = check_conversation_id(conversation_id)
        held = self._held(cid)
        (_, reply), batch = yield from self._append_script_steps(cid, events, "w", held)
        return self._snapshot(cid, reply, held, batch)

    def _append_without_window_steps(
        self, conversation_id: str, events: Sequence[Event]
    ) -> RedisSteps[list[Event]]:
        cid = check_conversation_id(conversation_id)
        return (yield from self._stored_batch_steps(cid, events, self._held(cid)))

    def _stored_batch_steps(
        self,
        cid: str,
        events: Sequence[Event],
        held: tuple[str, Snapshot] | None,
        condition: str = "",
        basis: tuple[str, int] | None = None,
    ) -> RedisSteps[list[Event]]:
        """Append ``events`` (``"b"``: the reply is the batch's seqs, not the window), as
        :meth:`_append_script_steps` with ``condition`` and ``basis``; the stored copy of each."""
        found, _ = yield from self._append_script_steps(cid, events, "b", held, condition, basis)
        _, version, last_seq, seqs, existing, mode, epoch = found
        stored: list[Event | None] = []
        for event, seq, element in zip(events, seqs, existing):
            if int(seq):
                stored.append(replaced(event, {"seq": int(seq), "archived": False}))
            else:
                stored.append(_event(element) if element else None)
        if held is not None and _text(mode) == "tail":
            # the held window plus this batch is the window now: keep it for the next read (only
            # its window and version are ever used again), the stored copies above in it
            before = held[1].window
            added = [e for e, seq in zip(stored, seqs) if int(seq) and e is not None]
            window = Window(
                pinned=before.pinned, summary=before.summary, active=(*before.active, *added)
            )
            self._hold(
                cid,
                epoch,
                dataclasses.replace(
                    held[1], version=int(version), last_seq=int(last_seq), window=window
                ),
            )
        if any(e is None for e in stored):
            # a request retried after a lost reply whose events a compaction moved since: rare,
            # so read the history for them
            by_id = {e.id: e for e in (yield from self._history_steps(cid))}
            stored = [
                e if e is not None else by_id.get(event.id) for e, event in zip(stored, events)
            ]
        missing = [event.id for e, event in zip(stored, events) if e is None]
        if missing:
            raise StorageError(
                f"the stored copy of event {missing[0]!r} of conversation {cid!r} is gone (cleared?)"
            )
        return [e for e in stored if e is not None]

    def _apply_steps(self, conversation_id: str, plan: CompactionPlan) -> RedisSteps[bool]:
        cid = check_conversation_id(conversation_id)
        held = self._held(cid)
        cap = (
            plan.max_archived_events
            if plan.max_archived_events is not None
            else self.default_max_archived_events
        )
        summary = (
            plan.summary.model_copy(update={"seq": None, "archived": False}).to_json()
            if plan.summary
            else ""
        )
        record = json.dumps(plan.record) if plan.record is not None else ""
        args = (
            plan.expected_version,
            plan.archive_through_seq,
            summary,
            "" if cap is None else cap,
            self._ttl,
            record,
            self.compaction_records_kept,
        )
        applied = yield from self._run_steps("apply", cid, *args)
        if not applied:
            return False
        _, epoch, summary_seq = applied
        if (
            held is not None
            and held[1].version == plan.expected_version
            and held[0] == _text(epoch)
        ):
            # the held window was the one compacted: the window now is it without the archived
            # events, under the new summary (if any), and the next read gets back nothing else
            window, seq = held[1].window, int(summary_seq)
            self._hold(
                cid,
                epoch,
                dataclasses.replace(
                    held[1],
                    version=plan.expected_version + 1,
                    last_seq=max(held[1].last_seq, seq),
                    window=Window(
                        pinned=window.pinned,
                        summary=_stored(summary, seq) if seq else window.summary,
                        active=tuple(
                            e for e in window.active if (e.seq or 0) > plan.archive_through_seq
                        ),
                    ),
                ),
            )
        return True

    def _record_error_steps(self, conversation_id: str, message: str | None) -> RedisSteps[None]:
        cid = check_conversation_id(conversation_id)
        yield from self._run_steps(
            "record_error", cid, "0" if message is None else "1", message or "", self._ttl
        )

    def _retract_steps(
        self, conversation_id: str, event_ids: Collection[str]
    ) -> RedisSteps[list[Event]]:
        """``retract.lua``: one script moves the events and their tool partners to the
        ``retracted`` sorted set (same hash slot) and out of the texts and both indexes."""
        cid = check_conversation_id(conversation_id)
        prefixes = [_id_prefix(i) for i in dict.fromkeys(event_ids)]
        if not prefixes:
            return []
        reply = yield from self._run_steps("retract", cid, self._ttl, *prefixes)
        if not int(reply[0]):
            event_id = json.loads(_text(reply[1])[len('{"id":') :])
            raise InvalidInputError(
                f"event_ids: {event_id!r} names a {_text(reply[2])} event (seq {int(reply[3])}); "
                "pinned system events and summaries cannot be retracted"
            )
        return [_event(e, retracted=True) for e in reply[1]]

    def _retracted_steps(self, conversation_id: str) -> RedisSteps[list[Event]]:
        cid = check_conversation_id(conversation_id)
        elements = yield from self._command_steps(
            "zrange", self._keys(cid)[_SUFFIXES.index("retracted")], 0, -1
        )
        return [_event(e, retracted=True) for e in elements]

    def _clear_steps(self, conversation_id: str) -> RedisSteps[None]:
        cid = check_conversation_id(conversation_id)
        yield from self._layout_steps()
        keys = self._keys(cid)[: len(_SUFFIXES)]
        if self.cluster:
            # registry first: an append racing with this clear re-registers after it
            yield from command("srem", self._registry, cid)
            yield from command("delete", *keys)
            return
        yield Pipeline(
            (Command("srem", (self._registry, cid)), Command("delete", tuple(keys))),
            transaction=True,
        )


__all__ = [
    "DEFAULT_MAX_ARCHIVED_EVENTS",
    "DEFAULT_PREFIX",
    "MIGRATION_LOCK_SECONDS",
    "REDIS_LAYOUT",
    "URL_OPTIONS",
    "RedisSansIO",
    "ScriptName",
    "lua",
    "packed_batch",
]
