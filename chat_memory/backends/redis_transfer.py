"""Fork, dump and restore on the Redis stores (the :class:`~chat_memory.backends.base.Forks`
and :class:`~chat_memory.backends.base.Dumps` abilities), written once as steps for
:class:`~chat_memory.backends.redis.RedisStore` and
:class:`~chat_memory.backends.redis_aio.AsyncRedisStore`.

- **dump**: ``dump.lua`` reads every key of the conversation in one script (one consistent
  state): meta, pinned, active, archive, retracted, records and the timeline.
- **restore**: ``restore.lua`` writes them all in one script in the conversation's hash slot,
  refusing (writing nothing) when the conversation is stored already; it rebuilds the id and
  call-id indexes itself, the search texts are folded here (Python's casefold, as append does).
- **fork**: at the source's last seq, when the new id's keys share the source's hash slot
  (always on a single server; on a cluster, a fork within a scope), ``fork.lua`` copies
  every key server-side in one script. Otherwise the new id's keys live in another slot: the
  dump script on the source, :func:`~chat_memory.backends.timeline.state_at` here, and the
  restore script on the new id: each script atomic, the source read in one consistent state,
  the new conversation written whole or not at all.

The timeline (``<prefix>{<digest>}:timeline``, a list of JSON entries) is written by the apply,
append (when it compacts) and retract scripts themselves (``apply_plan`` and ``retract.lua``),
in the same script as the change it records. A conversation stored before timelines were kept
gets ``meta.timeline_from`` (the last seq then; 0 when nothing had been compacted, retracted or
deleted by the archive cap) with its first entry, and the entries that make the state at that
seq exact (see ``timeline_start`` in prelude.lua); a fork before it is refused.

Lifecycle metadata (title, tags, values, scope index) is kept by the store's lifecycle ability;
it takes part through three hooks a lifecycle mixin overrides: :meth:`_metadata_of`,
:meth:`_metadata_pairs` and :meth:`_restored_steps`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import ConcurrencyError, InvalidInputError
from ..events import Event, EventType
from ..lifecycle.decisions import now
from ..search import search_text
from .base import Snapshot, check_conversation_id
from .redis_io import RedisSteps
from .redis_sansio import ClientT, RedisSansIO
from .redis_wire import _SUFFIXES, _event, _text, lua
from .timeline import ConversationDump, shown_id, state_at

__all__ = ["RedisTransfer"]


def _element(event: Event) -> str:
    """The stored element of ``event``: ``"<seq>:<envelope>"``, the envelope as append writes
    it (no seq, no flags)."""
    envelope = event.model_copy(update={"seq": None, "archived": False, "retracted": False})
    return f"{event.seq or 0}:{envelope.to_json()}"


def _hash_tag(key: str) -> str:
    """The hash tag of a key (what is between its first ``{`` and the next ``}``)."""
    return key[key.index("{") + 1 : key.index("}")]


def _section(items: list[Any]) -> list[Any]:
    """A section of restore.lua's arguments: its item count, then its items."""
    return [len(items), *items]


class RedisTransfer(RedisSansIO[ClientT]):
    """:class:`~chat_memory.backends.redis_sansio.RedisSansIO` with the steps of fork, dump and
    restore (see the module docstring); the drivers expose them as methods."""

    # -- hooks of the lifecycle ability -------------------------------------------------------

    def _metadata_of(self, cid: str, meta: Mapping[str, str]) -> dict[str, Any]:
        """The metadata a dump carries (title, tags, values, created/last active), read from
        the conversation's meta hash: the lifecycle ability's (none without it)."""
        return {}

    def _metadata_pairs(self, cid: str, metadata: Mapping[str, Any]) -> list[str]:
        """The meta hash field/value pairs that store ``metadata`` (restore.lua writes them
        with the conversation): the lifecycle ability's (none without it)."""
        return []

    def _restored_steps(self, cid: str, metadata: Mapping[str, Any]) -> RedisSteps[None]:
        """After restore.lua stored ``cid``: on a cluster, what lives in other hash slots (as
        after an append that created a conversation)."""
        if self.cluster:
            yield from self._created_steps(cid)

    # -- dump --------------------------------------------------------------------------------

    def _dump_steps(self, conversation_id: str) -> RedisSteps[ConversationDump | None]:
        """``dump.lua``: the whole conversation, None when it is not stored."""
        cid = check_conversation_id(conversation_id)
        reply = yield from self._run_steps("dump", cid)
        if not int(reply[0]):
            return None
        pairs, pinned, active, archive, taken, records, entries, timeline_from = reply[1:]
        meta = {_text(pairs[i]): _text(pairs[i + 1]) for i in range(0, len(pairs), 2)}
        events = [
            *(_event(e) for e in pinned),
            *(_event(e) for e in active),
            *(_event(e, archived=True) for e in archive),
            *(_event(e, retracted=True) for e in taken),
        ]
        if meta.get("summary"):
            events.append(_event(meta["summary"]))
        return ConversationDump(
            conversation_id=cid,
            last_seq=int(meta.get("last_seq", 0)),
            events=tuple(sorted(events, key=lambda e: e.seq or 0)),
            records=tuple(json.loads(_text(r)) for r in records),
            timeline=tuple(json.loads(_text(e)) for e in entries),
            compaction_error=meta.get("error"),
            compaction_failures=int(meta.get("failures", 0)),
            metadata=self._metadata_of(cid, meta),
            version=int(meta.get("version", 0)),
            timeline_from=int(timeline_from),
        )

    # -- restore -----------------------------------------------------------------------------

    def _restore_args(self, cid: str, dump: ConversationDump) -> list[Any]:
        """restore.lua's arguments for ``dump`` stored as ``cid``; refuses a dump that is not
        one conversation (two summaries in force, a seq past its last, a repeated seq)."""
        pinned: list[str] = []
        active: list[str] = []
        archived: list[Any] = []
        taken: list[Any] = []
        texts: list[Any] = []
        summary = ""
        seqs: set[int] = set()
        for event in sorted(dump.events, key=lambda e: e.seq or 0):
            seq = event.seq or 0
            if not 0 < seq <= dump.last_seq or seq in seqs:
                raise InvalidInputError(
                    f"dump of {shown_id(cid)!r}: event {event.id!r} has seq {event.seq!r}, "
                    f"not a seq of its own from 1 to last_seq ({dump.last_seq})"
                )
            seqs.add(seq)
            element = _element(event)
            real = event.type not in (EventType.SYSTEM, EventType.SUMMARY)
            if event.retracted:
                taken += [seq, element]
                continue
            if real:
                texts += [seq, search_text(event) or ""]
            if event.archived:
                archived += [seq, element]
            elif event.type is EventType.SYSTEM:
                pinned.append(element)
            elif event.type is EventType.SUMMARY:
                if summary:
                    raise InvalidInputError(
                        f"dump of {shown_id(cid)!r}: two summaries in force (seq "
                        f"{summary.partition(':')[0]} and {seq}); archive all but one"
                    )
                summary = element
            else:
                active.append(element)
        meta: list[Any] = [
            *("cid", cid, "epoch", uuid.uuid4().hex, "version", max(dump.version, 1)),
            *("last_seq", dump.last_seq, "timeline_from", dump.timeline_from),
        ]
        if summary:
            meta += ["summary", summary]
        if dump.compaction_error is not None:
            meta += ["error", dump.compaction_error]
        if dump.compaction_failures:
            meta += ["failures", dump.compaction_failures]
        meta += self._metadata_pairs(cid, dump.metadata)
        return [
            self._ttl,
            *_section(meta),
            *_section(pinned),
            *_section(active),
            *_section(archived),
            *_section(taken),
            *_section(texts),
            *_section([json.dumps(r) for r in dump.records]),
            *_section([json.dumps(e) for e in dump.timeline]),
        ]

    def _restore_steps(self, dump: ConversationDump) -> RedisSteps[None]:
        """``restore.lua``: ``dump`` stored whole, or :class:`InvalidInputError` naming the id
        when it is stored already (nothing written)."""
        cid = check_conversation_id(dump.conversation_id)
        args = self._restore_args(cid, dump)
        written = int((yield from self._run_steps("restore", cid, *args)))
        self._refuse_restore(cid, -1 if written == 0 else written)
        yield from self._restored_steps(cid, dump.metadata)

    # -- fork --------------------------------------------------------------------------------

    def _shares_slot(self, cid: str, new_cid: str) -> bool:
        """Whether one script may touch both conversations' keys: always on a single server,
        on a cluster when their keys share a hash tag (a scoped conversation and its fork
        within the scope)."""
        if not self.cluster:
            return True
        return _hash_tag(self._keys(cid)[0]) == _hash_tag(self._keys(new_cid)[0])

    def _copy_fork_steps(self, cid: str, new_cid: str, at: int | None) -> RedisSteps[bool]:
        """``fork.lua``: a fork at the source's last seq, every key copied by the server
        (``COPY``); False, writing nothing, when ``at`` is an earlier seq (or past the last:
        the dump path says which)."""
        keys = [*self._keys(new_cid), *self._keys(cid)[: len(_SUFFIXES)]]
        args = (new_cid, self._ttl, uuid.uuid4().hex, "" if at is None else at)
        reply = yield from self._script_steps(lua("fork"), keys, args)
        status = int(reply[0])
        if status == 0:
            raise InvalidInputError(
                f"conversation_id ({shown_id(cid)!r}) is not a stored conversation"
            )
        if status == -3:
            return False
        self._refuse_restore(new_cid, status)
        yield from self._restored_steps(new_cid, {"tags": json.loads(_text(reply[1]))})
        return True

    @staticmethod
    def _refuse_restore(cid: str, status: int) -> None:
        """The refusals of restore.lua and fork.lua: -1 stored already, -2 being erased."""
        if status == -2:
            raise ConcurrencyError(
                f"conversation {shown_id(cid)!r} is being erased (forget); a restore or fork "
                "that would create it again is refused until the erasure guard lapses"
            )
        if status == -1:
            raise InvalidInputError(f"conversation_id ({shown_id(cid)!r}) is stored already")

    def _fork_steps(
        self, conversation_id: str, new_conversation_id: str, at: int | None
    ) -> RedisSteps[Snapshot]:
        """The source read by ``dump.lua`` (one slot), its state at ``at`` rebuilt
        (:func:`~chat_memory.backends.timeline.state_at`), written by ``restore.lua`` in the
        new id's slot (refused there when the new id is stored); the fork's snapshot."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        if self._shares_slot(cid, new_cid):
            forked = yield from self._copy_fork_steps(cid, new_cid, at)
            if forked:
                return (yield from self._load_steps(new_cid))
        source = yield from self._dump_steps(cid)
        if source is None:
            raise InvalidInputError(
                f"conversation_id ({shown_id(cid)!r}) is not a stored conversation"
            )
        fork = state_at(source, source.last_seq if at is None else at, new_cid)
        # a new conversation: its title, tags and values come along, its clock starts now
        started = now().isoformat()
        metadata = {**fork.metadata, "created_at": started, "last_active_at": started}
        yield from self._restore_steps(replace(fork, metadata=metadata))
        return (yield from self._load_steps(new_cid))
