"""The fork timeline on SQL (``<prefix>conversation_timeline``, schema version 7; docs/sql.md):
its rows as the entries of :mod:`chat_memory.backends.timeline`, the flags of a conversation at
a past seq worked out from those rows and a few small reads (what a fork in the database
needs: :mod:`chat_memory.backends.sql.transfer`), and the entries the migration from version
6 writes for the conversations stored before.

The rows are written by :class:`~chat_memory.backends.sql.operations.SQLOperations` in the
transaction of each change they record (``Statements.add_timeline``: a compaction, a
retraction, the archive cap deleting a superseded pin).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ...errors import InvalidInputError
from ...events import Event, EventType
from ...pins import pin_key
from ..timeline import COMPACTION, DROPPED_PIN, RETRACTION, shown_id

if TYPE_CHECKING:  # the schema's migration runs write_baseline_timelines
    from .schema import Tables

__all__ = ["PastFlags", "TimelineReads", "timeline_entry", "write_baseline_timelines"]

_SYSTEM, _SUMMARY = EventType.SYSTEM.value, EventType.SUMMARY.value
_NOT_REAL = (_SYSTEM, _SUMMARY)
#: Rows per ``executemany`` of the migration.
_BATCH = 500


def timeline_entry(row: Any) -> dict[str, Any]:
    """The timeline entry a row of the timeline table holds."""
    if row.kind == DROPPED_PIN:
        return {"kind": DROPPED_PIN, "seq": row.seq, "key": row.pin_key}
    if row.kind == COMPACTION:
        return {
            "kind": COMPACTION,
            "head": row.head,
            "through": row.through,
            "summary": row.summary_seq,
        }
    return {"kind": RETRACTION, "head": row.head, "seqs": json.loads(row.seqs)}


@dataclass(frozen=True)
class PastFlags:
    """What decides each event's flags at a past seq (as
    :func:`~chat_memory.backends.timeline.state_at` rebuilds them): the largest archived
    ``through`` then, the summary in force then, the seqs retracted by then, the pins in force
    then."""

    through: int
    summary: int | None
    retracted: frozenset[int]
    pins: frozenset[int]

    def archived(self, event: Event) -> bool:
        """Whether ``event`` (not retracted then) was archived then."""
        seq = event.seq or 0
        if event.type is EventType.SUMMARY:
            return seq != self.summary
        if event.type is EventType.SYSTEM:
            return seq not in self.pins
        return seq <= self.through


class TimelineReads:
    """The reads of a conversation's timeline and of what its past flags need, built once
    over ``tables``; ``stored`` wraps the decoding of stored rows (their errors named)."""

    def __init__(self, tables: Tables, stored: Callable[[], AbstractContextManager[None]]) -> None:
        self._stored = stored
        e, r, t = tables.events, tables.retracted, tables.timeline
        ref = sa.bindparam("b_ref", type_=sa.BigInteger())
        at = sa.bindparam("b_at", type_=sa.BigInteger())
        through = sa.bindparam("b_through", type_=sa.BigInteger())
        self._timeline = sa.select(t).where(t.c.conversation_ref == ref).order_by(t.c.n)
        self._systems = sa.union_all(
            sa.select(e.c.seq, e.c.body).where(
                e.c.conversation_ref == ref, e.c.type == _SYSTEM, e.c.seq <= at
            ),
            sa.select(r.c.seq, r.c.body).where(
                r.c.conversation_ref == ref, r.c.type == _SYSTEM, r.c.seq <= at
            ),
        )
        # the seqs still stored (events and retracted ones) after `through` up to `at`, and
        # the summary in force then when it is at or before `through`: counted, not read
        self._stored_count = sa.select(
            sa.select(sa.func.count())
            .where(e.c.conversation_ref == ref, e.c.seq > through, e.c.seq <= at)
            .scalar_subquery(),
            sa.select(sa.func.count())
            .where(e.c.conversation_ref == ref, e.c.seq == sa.bindparam("b_extra"))
            .scalar_subquery(),
            sa.select(sa.func.count())
            .where(r.c.conversation_ref == ref, r.c.seq > through, r.c.seq <= at)
            .scalar_subquery(),
        )
        self._seqs = sa.union_all(
            sa.select(e.c.seq).where(e.c.conversation_ref == ref, e.c.seq <= at),
            sa.select(r.c.seq).where(r.c.conversation_ref == ref, r.c.seq <= at),
        )

    def entries(self, connection: sa.Connection, ref: int) -> list[dict[str, Any]]:
        """Conversation row ``ref``'s timeline, oldest entry first."""
        return [timeline_entry(t) for t in connection.execute(self._timeline, {"b_ref": ref})]

    def flags_at(self, connection: sa.Connection, source: Any, at: int) -> PastFlags:
        """The flags of conversation row ``source`` at ``at``, from its timeline rows and its
        system events up to ``at``; refused (:class:`InvalidInputError` naming ``at``) when
        the archive cap has since deleted an event that window showed."""
        entries = self.entries(connection, source.id)
        recorded = [e for e in entries if e["kind"] != DROPPED_PIN and e["head"] <= at]
        compactions = [e for e in recorded if e["kind"] == COMPACTION]
        through = max((e["through"] for e in compactions), default=0)
        summaries = [e["summary"] for e in compactions if e["summary"] is not None]
        summary = summaries[-1] if summaries else None
        retracted = {s for e in recorded if e["kind"] == RETRACTION for s in e["seqs"]}
        with self._stored():
            known = [
                (seq, pin_key(Event.from_json(body)))
                for seq, body in connection.execute(self._systems, {"b_ref": source.id, "b_at": at})
            ]
        dropped = {
            e["seq"]: e["key"] for e in entries if e["kind"] == DROPPED_PIN and e["seq"] <= at
        }
        newest: dict[str, int] = {}
        for seq, key in sorted([*known, *dropped.items()]):
            newest[key] = seq
        pins = frozenset(newest.values())
        # every seq up to `at` was stored, and retracted events are kept: one missing now was
        # deleted by the archive cap. The window then needed it if it was active then (after
        # `through`), the summary then, or a pin in force then.
        extra = summary if summary is not None and summary <= through else -1
        counts = connection.execute(
            self._stored_count,
            {"b_ref": source.id, "b_through": through, "b_at": at, "b_extra": extra},
        ).one()
        if sum(counts) != at - through + (extra >= 0) or pins & dropped.keys():
            stored = set(connection.execute(self._seqs, {"b_ref": source.id, "b_at": at}).scalars())
            needed = [
                s
                for s in range(1, at + 1)
                if s not in stored and (s > through or s == summary or s in pins)
            ]
            raise InvalidInputError(
                f"at ({at}) is too far back in conversation {shown_id(source.conversation_id)!r}: "
                "the archive cap (max_archived_events) has deleted events its window showed "
                f"(seq {needed[0]}{'…' + str(needed[-1]) if len(needed) > 1 else ''}); "
                "fork at a later seq"
            )
        return PastFlags(through, summary, frozenset(retracted), pins)


def write_baseline_timelines(connection: sa.Connection, tables: Tables) -> None:
    """Schema version 6 -> 7: each stored conversation gets the timeline entries that make its
    state at its last seq (its ``timeline_from``) exact: a compaction entry (archived through
    the seq before its first active real event, the summary in force) and a retraction entry
    (every retracted seq), both at ``head = last_seq``. A fork from that seq on rebuilds; one
    before it is refused. Runs in the migration's transaction, after the timeline table is
    created: one statement writes every compaction entry, one read finds the retracted seqs.

    Rows the table already holds are deleted first: they are there only when the tables of
    version 7 outlived the recorded schema version (set back with the newer tables left in
    place). They describe a past before ``timeline_from``, which the migration moves to
    ``last_seq``, so no fork can use them, and an older chat-memory may have changed the
    conversation since without recording it; kept, they would also hold the numbers (``n``
    0 and 1) the baseline takes. The baseline alone is the state at ``last_seq``, numbered
    as on a table created now, and later entries follow it."""
    c, e, r, t = tables.conversations, tables.events, tables.retracted, tables.timeline
    connection.execute(t.delete())
    active = (
        sa.select(sa.func.min(e.c.seq))
        .where(
            e.c.conversation_ref == c.c.id,
            e.c.archived == sa.false(),
            e.c.type.not_in(_NOT_REAL),
        )
        .scalar_subquery()
    )
    through = sa.func.coalesce(active - 1, c.c.last_seq)
    in_force = (
        sa.select(sa.func.max(e.c.seq))
        .where(e.c.conversation_ref == c.c.id, e.c.archived == sa.false(), e.c.type == _SUMMARY)
        .scalar_subquery()
    )
    connection.execute(
        t.insert().from_select(
            [t.c.conversation_ref, t.c.n, t.c.kind, t.c.head, t.c.through, t.c.summary_seq],
            sa.select(
                c.c.id, sa.literal(0), sa.literal(COMPACTION), c.c.last_seq, through, in_force
            ).where(sa.or_(through > 0, in_force.is_not(None))),
        )
    )
    taken: dict[int, list[int]] = {}
    for ref, seq in connection.execute(
        sa.select(r.c.conversation_ref, r.c.seq).order_by(r.c.conversation_ref, r.c.seq)
    ):
        taken.setdefault(ref, []).append(seq)
    rows = [{"b_ref": ref, "b_seqs": json.dumps(seqs)} for ref, seqs in taken.items()]
    retraction = t.insert().from_select(
        [t.c.conversation_ref, t.c.n, t.c.kind, t.c.head, t.c.seqs],
        sa.select(
            c.c.id,
            sa.literal(1),
            sa.literal(RETRACTION),
            c.c.last_seq,
            sa.bindparam("b_seqs", type_=sa.Text()),
        ).where(c.c.id == sa.bindparam("b_ref", type_=sa.BigInteger())),
    )
    for start in range(0, len(rows), _BATCH):
        connection.execute(retraction, rows[start : start + _BATCH])
