"""The Redis stores' appends that run the engine's tool-pair check and the compaction plan
inside the append's own script (:class:`~chat_memory.backends.base.ChecksToolPairs`,
:class:`~chat_memory.backends.base.CompactsWhileAppending`): one ``EVALSHA`` per ``add()``
when the store holds the conversation's current window, as it does after a window read or its
own last write.

The check cannot run in Lua (it is the engine's Python), so it runs on the client, on the
held window (or, when the window cannot answer, on a look-up by index that names the state
it saw), and the append is made conditional on that state: the script compares the
conversation's epoch and version and writes nothing when they moved, and the check runs again
on a fresh look-up (bounded, with backoff). A compaction plan is made the same way, on the
held window plus the batch (what the window will be after the append), and the script applies
it only if the append left the conversation exactly there; otherwise the plan is made again
on the window the append returned and applied as a compare-and-swap, as before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from ..backoff import Backoff
from ..errors import ConcurrencyError, InvalidEventError
from ..event_checks import found_in_window, tool_call_ids, tool_event_ids
from ..events import Event, EventType, Window
from ..steps import Sleep
from .base import CompactionPlan, Snapshot, ToolPairCheck, check_conversation_id
from .bookkeeping import replaced, unstored
from .redis_io import RedisSteps
from .redis_sansio import ClientT, RedisSansIO, StateMoved
from .redis_wire import _text

T = TypeVar("T")

#: How often a checked append looks again when its conversation keeps changing under it.
CHECKED_APPEND_RETRIES = Backoff(attempts=40, base=0.002, cap=0.25)

#: One conditional write: (the checked batch, the held window, the condition, the basis).
_Write = Callable[
    [list[Event], "tuple[str, Snapshot] | None", str, "tuple[str, int] | None"],
    Generator[Any, Any, T],
]


class RedisWrites(RedisSansIO[ClientT]):
    """:class:`~chat_memory.backends.redis_sansio.RedisSansIO` with the appends that check tool
    pairs and compact in their own script (see the module docstring)."""

    def _forget(self, cid: str) -> None:
        """Drop the held window of ``cid`` (it proved stale)."""
        with self._windows_lock:
            self._windows.pop(cid, None)

    def _checked_steps(
        self,
        cid: str,
        events: Sequence[Event],
        check: ToolPairCheck | None,
        write: _Write[T],
        by_index: bool = False,
    ) -> RedisSteps[T]:
        """Run ``write`` with the batch ``check`` returns on the held window (condition
        ``"!"``); without one (or with ``by_index``, whose window may be long), first on finding
        nothing stored (``"0"``: the script refuses when an index has any of the batch's ids
        or call ids: the common case of a new call and its result costs no look-up), then on
        a look-up by index (``"="``, its epoch and version the basis). When the write finds
        the conversation moved, look again. Without ``check``: ``write`` once, unconditionally."""
        if check is None:
            return (yield from write(list(events), self._held(cid), "", None))
        hopeful = True
        for delay in CHECKED_APPEND_RETRIES.delays():
            held = self._held(cid)
            found = None if held is None or by_index else found_in_window(events, held[1].window)
            condition, basis = "!", None
            batch: list[Event] | None = None
            if found is None and hopeful:
                hopeful = False
                try:
                    batch, condition = check([]), "0"
                except InvalidEventError:  # it needs stored events to pass: look them up
                    batch = None
            if batch is None and found is None:
                found, basis = yield from self._find_at_steps(
                    cid, tool_event_ids(events), tool_call_ids(events)
                )
                if held is not None and basis == (held[0], held[1].version):
                    basis = None  # the held window is that state: the reply may build on it
                else:
                    condition = "="
            if batch is None:
                assert found is not None
                batch = check(found)
            try:
                return (yield from write(batch, held, condition, basis))
            except StateMoved:
                self._forget(cid)
                if condition != "0":  # that one lost no race: it found events to look up
                    yield Sleep(delay)
        raise ConcurrencyError(
            f"an append to conversation {cid!r} found it changed {CHECKED_APPEND_RETRIES.attempts} "
            "times in a row between its tool-pair check and its write"
        )

    # -- the three appends -------------------------------------------------------------------

    def _checked_append_steps(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None
    ) -> RedisSteps[Snapshot]:
        cid = check_conversation_id(conversation_id)

        def write(
            batch: list[Event],
            held: tuple[str, Snapshot] | None,
            condition: str,
            basis: tuple[str, int] | None,
        ) -> RedisSteps[Snapshot]:
            (_, reply), sent = yield from self._append_script_steps(
                cid, batch, "w", held, condition, basis
            )
            return self._snapshot(cid, reply, held, sent)

        return (yield from self._checked_steps(cid, events, check, write))

    def _checked_append_without_window_steps(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None
    ) -> RedisSteps[list[Event]]:
        cid = check_conversation_id(conversation_id)

        def write(
            batch: list[Event],
            held: tuple[str, Snapshot] | None,
            condition: str,
            basis: tuple[str, int] | None,
        ) -> RedisSteps[list[Event]]:
            return (yield from self._stored_batch_steps(cid, batch, held, condition, basis))

        return (yield from self._checked_steps(cid, events, check, write, by_index=True))

    def _append_compacting_steps(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None,
    ) -> RedisSteps[tuple[Snapshot, bool]]:
        """Append, then apply the planner's plan: in the append's script when the held window
        was current (the plan made on it plus the batch), else as a second script."""
        cid = check_conversation_id(conversation_id)

        def write(
            batch: list[Event],
            held: tuple[str, Snapshot] | None,
            condition: str,
            basis: tuple[str, int] | None,
        ) -> RedisSteps[tuple[Snapshot, bool]]:
            predicted = self._predicted(held, batch) if condition != "=" else None
            plan = planner(predicted[0]) if predicted is not None else None
            plan_args: tuple[str, str] | None = None
            if predicted is not None and plan is not None and plan.summary is None:
                cap = (
                    plan.max_archived_events
                    if plan.max_archived_events is not None
                    else self.default_max_archived_events
                )
                plan_args = (
                    f"{plan.expected_version}:{predicted[0].last_seq}:{plan.archive_through_seq}:"
                    f"{'' if cap is None else cap}:{self.compaction_records_kept}",
                    "" if plan.record is None else json.dumps(plan.record),
                )
            found, sent = yield from self._append_script_steps(
                cid, batch, "w", held, condition, basis, plan_args
            )
            reply = found[1]
            exact = (
                predicted is not None
                and _text(reply[8]) == "tail"
                and [int(seq) for seq in reply[5]] == predicted[1]
            )
            if exact:
                assert predicted is not None
                snapshot = self._tail(cid, reply, predicted[0].window)
            else:
                snapshot = self._snapshot(cid, reply, held, sent)
            if plan_args is not None and int(found[2]):
                assert plan is not None
                self._hold(cid, reply[9], _compacted(snapshot, plan, int(found[3])))
                return snapshot, True
            if not exact:  # the plan was made on a window that was not the one appended to
                plan = planner(snapshot)
            return snapshot, plan is not None and (yield from self._apply_steps(cid, plan))

        return (yield from self._checked_steps(cid, events, check, write))

    # -- the window an append will leave -----------------------------------------------------

    @staticmethod
    def _predicted(
        held: tuple[str, Snapshot] | None, batch: list[Event]
    ) -> tuple[Snapshot, list[int]] | None:
        """The snapshot right after appending ``batch`` to the held window, if it is current,
        and the seq each event of ``batch`` gets (0: stored already); None when the append
        may do more than add at the tail (a pinned event may supersede another)."""
        if held is None or any(e.type is EventType.SYSTEM for e in batch):
            return None
        before = held[1]
        window = before.window
        fresh = {e.id for e in unstored(batch, (*window.pinned, *window.active))}
        seqs: list[int] = []
        added: list[Event] = []
        last = before.last_seq
        for event in batch:
            if event.id in fresh:
                fresh.discard(event.id)
                last += 1
                seqs.append(last)
                added.append(replaced(event, {"seq": last, "archived": False, "retracted": False}))
            else:
                seqs.append(0)
        after = dataclasses.replace(
            before,
            version=before.version + (1 if added else 0),
            last_seq=last,
            window=Window(
                pinned=window.pinned, summary=window.summary, active=(*window.active, *added)
            ),
        )
        return after, seqs

    def _tail(self, cid: str, reply: list[Any], window: Window) -> Snapshot:
        """The snapshot of a ``'tail'`` append reply whose seqs are the predicted ones:
        ``window`` (the predicted window) with the reply's bookkeeping, held."""
        error = _text(reply[2])
        snapshot = Snapshot(
            conversation_id=cid,
            version=int(reply[0]),
            last_seq=int(reply[1]),
            window=window,
            archived_count=int(reply[6]),
            compaction_error=error[1:] if error else None,
            compaction_failures=int(reply[7]),
        )
        return self._hold(cid, reply[9], snapshot)


def _compacted(snapshot: Snapshot, plan: CompactionPlan, archived_count: int) -> Snapshot:
    """``snapshot`` after ``plan`` (which has no summary) was applied to it."""
    window = snapshot.window
    return dataclasses.replace(
        snapshot,
        version=snapshot.version + 1,
        window=Window(
            pinned=window.pinned,
            summary=window.summary,
            active=tuple(e for e in window.active if (e.seq or 0) > plan.archive_through_seq),
        ),
        archived_count=archived_count,
        compaction_error=None,
        compaction_failures=0,
    )


__all__ = ["CHECKED_APPEND_RETRIES", "RedisWrites"]
