"""The Redis stores' reads, as steps: the window (``load.lua``, answered from the held window
when it is still current) and the snapshot in a reply, the history, the search (``search.lua``,
slice after slice), the look-ups by event id and tool call id (``find.lua``), the conversation
list, the compaction records and the retracted events.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from ..errors import ConcurrencyError
from ..events import Event, EventType, Window
from ..lifecycle.keys import stored_key
from ..search import MatchMode, SearchQuery, SearchResult
from .base import Snapshot, check_conversation_id
from .bookkeeping import tool_call_fragment, tool_events
from .redis_base import ClientT, RedisBase
from .redis_io import Command, Pipeline, RedisSteps
from .redis_wire import (
    _SUFFIXES,
    _WINDOW_KEYS,
    _WINDOW_REPLY,
    _element_seq,
    _event,
    _id_prefix,
    _same_reply,
    _text,
    _with_batch,
    lua,
)

#: Server time one ``search.lua`` call may take before it returns a cursor (plus at most one
#: step of about 1 ms): Redis serves no other client while a script runs.
SEARCH_CALL_MICROSECONDS = 5000
#: Bytes of text a search call matches (summed over the terms) between two reads of the
#: server clock: about 0.1 to 1 ms of work.
SEARCH_CHECK_BYTES = 131_072
#: How often a search starts over because its conversation was cleared under it.
SEARCH_RESTARTS = 3


class RedisReads(RedisBase[ClientT]):
    """:class:`~chat_memory.backends.redis_base.RedisBase` with the read steps (see the module
    docstring)."""

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

    def _retracted_steps(self, conversation_id: str) -> RedisSteps[list[Event]]:
        cid = check_conversation_id(conversation_id)
        elements = yield from self._command_steps(
            "zrange", self._keys(cid)[_SUFFIXES.index("retracted")], 0, -1
        )
        return [_event(e, retracted=True) for e in elements]


__all__ = ["SEARCH_CALL_MICROSECONDS", "SEARCH_CHECK_BYTES", "SEARCH_RESTARTS", "RedisReads"]
