"""The Redis stores' I/O-free half: :class:`RedisSansIO` composes the steps both Redis stores
drive, and holds the appends, compactions, retractions and clearing itself. Its parts:

- :mod:`.redis_wire`: the wire format (key names, the Lua scripts, packed batches, replies
  decoded into events);
- :mod:`.redis_base`: the store options, the layout check and migration, running a script or a
  command, the held windows (:class:`~chat_memory.backends.redis_base.RedisBase`);
- :mod:`.redis_reads`: the window, history, search and look-ups
  (:class:`~chat_memory.backends.redis_reads.RedisReads`).

Every name this module held before it was split is still importable from it.

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
import json
import sys
import types
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from ..errors import ConcurrencyError, InvalidInputError, StorageError
from ..events import Event, Window
from .base import CompactionPlan, Snapshot, check_conversation_id
from .bookkeeping import replaced
from .redis_base import (
    DEFAULT_MAX_ARCHIVED_EVENTS,
    DEFAULT_PREFIX,
    MIGRATION_LOCK_SECONDS,
    REDIS_LAYOUT,
    URL_OPTIONS,
    WINDOWS_KEPT,
    ClientT,
)
from .redis_io import Command, Pipeline, RedisSteps, command
from .redis_reads import SEARCH_CALL_MICROSECONDS, SEARCH_CHECK_BYTES, SEARCH_RESTARTS, RedisReads
from .redis_wire import (
    _SUFFIXES,
    ScriptName,
    _event,
    _id_prefix,
    _stored,
    _tail_reply,
    _text,
    conversation_base,
    lifecycle_keys,
    lua,
    packed_batch,
    scope_base,
)


class StateMoved(Exception):
    """A conditional append found the conversation changed since the state the caller
    checked its batch on: nothing was written (the caller looks again and retries)."""


class RedisSansIO(RedisReads[ClientT]):
    """The I/O-free half of the Redis stores (see the module docstring), over a client of
    type ``ClientT``. ``prefix`` namespaces every key (no ``{`` or ``}``);
    ``max_archived_events`` caps the archive when a plan names no cap (None: unbounded);
    ``ttl_seconds`` expires a whole conversation that long after its last write (``ttl_ms``,
    in milliseconds, wins over it: short retentions).

    A store holds its last window of each of the :data:`WINDOWS_KEPT` conversations it used
    last: a window read or an append whose held window is still current (the script compares
    the conversation's epoch and version, atomically) gets back only the bookkeeping and the
    batch's seqs, and nothing is parsed but the batch; any other write, by anyone, is seen."""

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
    "SEARCH_CALL_MICROSECONDS",
    "SEARCH_CHECK_BYTES",
    "SEARCH_RESTARTS",
    "URL_OPTIONS",
    "WINDOWS_KEPT",
    "ClientT",
    "RedisSansIO",
    "ScriptName",
    "StateMoved",
    "conversation_base",
    "lifecycle_keys",
    "lua",
    "packed_batch",
    "scope_base",
]


class _SettingsForwarded(types.ModuleType):
    """This module, with its tuning settings forwarded: the settings moved to the modules
    whose methods read them (redis_base, redis_reads) when this one was split, and
    docs/performance.md once told deployments to set ``redis_sansio.WINDOWS_KEPT`` at
    start-up; setting one here still sets it where it is read."""

    def __setattr__(self, name: str, value: Any) -> None:
        home = _SETTINGS_HOME.get(name)
        if home is not None:
            setattr(sys.modules[home], name, value)
        super().__setattr__(name, value)


#: The module each tuning setting is read from.
_SETTINGS_HOME = {
    "WINDOWS_KEPT": "chat_memory.backends.redis_base",
    "REDIS_LAYOUT": "chat_memory.backends.redis_base",
    "MIGRATION_LOCK_SECONDS": "chat_memory.backends.redis_base",
    "SEARCH_CALL_MICROSECONDS": "chat_memory.backends.redis_reads",
    "SEARCH_CHECK_BYTES": "chat_memory.backends.redis_reads",
    "SEARCH_RESTARTS": "chat_memory.backends.redis_reads",
}
sys.modules[__name__].__class__ = _SettingsForwarded
