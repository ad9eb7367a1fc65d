"""Fork, dump and restore on the SQL stores (the :class:`~chat_memory.backends.base.Forks` and
:class:`~chat_memory.backends.base.Dumps` abilities): transaction bodies, like those of
:class:`~chat_memory.backends.sql.operations.SQLOperations`, that
:class:`~chat_memory.backends.sql.SQLStore` runs in its transactions and
:class:`~chat_memory.backends.sql.AsyncSQLStore` with ``run_sync``.

- **fork**: one write transaction. The source's row is locked (its writers wait), the state
  at ``at`` is worked out from small reads (the source's timeline rows, its system events up
  to ``at``, a count of the seqs still stored up to ``at``), then the rows are copied inside
  the database: ``INSERT … SELECT`` of the events with ``seq ≤ at`` under the new row, each
  archived flag recomputed in SQL (a real event: ``seq ≤`` the largest ``through`` of the
  compactions applied by then; a summary: the one in force then; a system event: a pin in
  force then), of the retracted events of the retractions made by then, and of the timeline
  rows up to ``at``. Only the events retracted *after* ``at`` (back in the window or the
  archive of the fork) and the compaction records pass through Python. The rebuild is the one
  :func:`~chat_memory.backends.timeline.state_at` defines, refused as it refuses.
- **dump**: one read transaction (on PostgreSQL the row is locked ``FOR SHARE`` first, so
  that its statements see one state: every writer of a conversation locks its row).
- **restore**: one write transaction: the row, the events (archived flags and search text as
  an append writes them), the retracted events, the records, the timeline, tags.

The timeline itself (``<prefix>conversation_timeline``, schema version 7) is written by
:class:`SQLOperations` in the transaction of each change it records (a compaction, a
retraction, the archive cap deleting a superseded pin) and read through
:mod:`chat_memory.backends.sql.timeline`. A conversation stored before version 7 gets, from
the migration, the entries that make its state at ``timeline_from`` (its last seq then)
exact; a fork before that seq is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ...errors import InvalidInputError
from ...events import Event, EventType
from ...lifecycle.keys import scope_of_key
from ..base import Snapshot
from ..bookkeeping import replaced, retracted_copy
from ..timeline import COMPACTION, DROPPED_PIN, RETRACTION, ConversationDump, shown_id
from .operations import SQLOperations, conversation_key
from .schema import Tables, row_key, scope_key, stored_message
from .statements import timeline_params
from .timeline import PastFlags, TimelineReads

__all__ = ["SQLTransfer"]

_SYSTEM, _SUMMARY = EventType.SYSTEM.value, EventType.SUMMARY.value
#: Seqs per ``IN (…)`` list and rows per ``executemany``.
_BATCH = 500


def _utc(moment: datetime) -> datetime:
    """An aware UTC time (SQLite gives back naive ones: the store writes UTC)."""
    return (
        moment.replace(tzinfo=timezone.utc)
        if moment.tzinfo is None
        else moment.astimezone(timezone.utc)
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)


class SQLTransfer:
    """The fork, dump and restore bodies over the tables of ``ops`` (statements built once)."""

    def __init__(self, ops: SQLOperations) -> None:
        self.ops = ops
        tables: Tables = ops.tables
        self.timeline = TimelineReads(tables, ops._stored)
        c, e, r = tables.conversations, tables.events, tables.retracted
        t = tables.timeline
        by_key = c.c.conversation_key == sa.bindparam("b_key")
        self._locked = sa.select(c).where(by_key).with_for_update()
        # FOR SHARE on PostgreSQL (writers wait, readers do not); nothing on SQLite, whose read
        # transaction is a snapshot already
        self._shared = sa.select(c).where(by_key).with_for_update(read=True)
        self._exists = sa.select(c.c.id).where(by_key)
        ref = sa.bindparam("b_ref", type_=sa.BigInteger())
        new = sa.bindparam("b_new", type_=sa.BigInteger())
        at = sa.bindparam("b_at", type_=sa.BigInteger())
        through = sa.bindparam("b_through", type_=sa.BigInteger())
        self._events = sa.select(e.c.archived, e.c.body).where(e.c.conversation_ref == ref)
        self._taken = sa.select(r.c.seq, r.c.body).where(r.c.conversation_ref == ref, r.c.seq <= at)
        copied = [
            e.c.conversation_ref,
            e.c.seq,
            e.c.type,
            e.c.archived,
            e.c.tokens,
            e.c.created_at,
            e.c.search_text,
            e.c.body,
            e.c.event_key,
            e.c.call_key,
        ]

        def events_with(archived: Any) -> sa.Insert:
            return e.insert().from_select(
                copied,
                sa.select(new, *copied[1:3], archived, *copied[4:]).where(
                    e.c.conversation_ref == ref, e.c.seq <= at
                ),
            )

        # the flags of the fork as they were at `at` (see PastFlags.archived)
        archived_then = sa.case(
            (e.c.type == _SUMMARY, e.c.seq != sa.bindparam("b_summary")),
            (e.c.type == _SYSTEM, sa.not_(e.c.seq.in_(sa.bindparam("b_pins", expanding=True)))),
            else_=e.c.seq <= through,
        )
        self._copy_events_then = events_with(archived_then)
        self._copy_events_now = events_with(e.c.archived)
        taken = [r.c.conversation_ref, r.c.seq, r.c.type, r.c.body, r.c.retracted_at]
        self._copy_retracted = r.insert().from_select(
            taken,
            sa.select(new, *taken[1:]).where(
                r.c.conversation_ref == ref, r.c.seq.in_(sa.bindparam("b_seqs", expanding=True))
            ),
        )
        self._copy_all_retracted = r.insert().from_select(
            taken, sa.select(new, *taken[1:]).where(r.c.conversation_ref == ref)
        )
        entries = [
            t.c.conversation_ref,
            t.c.n,
            t.c.kind,
            t.c.head,
            t.c.through,
            t.c.summary_seq,
            t.c.seqs,
            t.c.seq,
            t.c.pin_key,
        ]
        self._copy_timeline = t.insert().from_select(
            entries,
            sa.select(new, *entries[1:]).where(
                t.c.conversation_ref == ref,
                sa.or_(
                    sa.and_(t.c.kind != DROPPED_PIN, t.c.head <= at),
                    sa.and_(t.c.kind == DROPPED_PIN, t.c.seq <= at),
                ),
            ),
        )
        self._count_archived = (
            c.update()
            .where(c.c.id == new)
            .values(
                archived_count=sa.select(sa.func.count())
                .where(e.c.conversation_ref == new, e.c.archived == sa.true())
                .scalar_subquery()
            )
        )

    # -- dump --------------------------------------------------------------------------------

    def dump(self, connection: sa.Connection, cid: str) -> ConversationDump | None:
        """The whole conversation ``cid``, None when it is not stored."""
        ops = self.ops
        row = connection.execute(self._shared, {"b_key": conversation_key(cid)}).first()
        if row is None:
            return None
        events = ops._events(connection.execute(self._events, {"b_ref": row.id}))
        with ops._stored():
            taken = [
                retracted_copy(Event.from_json(body))
                for _, body in connection.execute(
                    self._taken, {"b_ref": row.id, "b_at": row.last_seq}
                )
            ]
        timeline = self.timeline.entries(connection, row.id)
        return ConversationDump(
            conversation_id=cid,
            last_seq=row.last_seq,
            events=tuple(sorted([*events, *taken], key=lambda e: e.seq or 0)),
            records=tuple(ops.compactions(connection, cid)),
            timeline=tuple(timeline),
            compaction_error=row.compaction_error,
            compaction_failures=row.compaction_failures,
            metadata=_metadata_of(row),
            version=row.version,
            timeline_from=row.timeline_from,
        )

    # -- restore -----------------------------------------------------------------------------

    def restore(self, connection: sa.Connection, dump: ConversationDump) -> None:
        """Store ``dump`` as conversation ``dump.conversation_id``, refused (nothing written)
        when that id is stored already, is being erased, or the dump is not one conversation."""
        cid = dump.conversation_id
        _check_dump(dump)
        self._refuse_taken(connection, cid)
        kept = [e for e in dump.events if not e.retracted]
        in_force = [e.seq for e in kept if e.type is EventType.SUMMARY and not e.archived]
        now = _now()
        metadata = dump.metadata
        ref = self._insert_row(
            connection,
            cid,
            {
                "version": max(dump.version, 1),
                "last_seq": dump.last_seq,
                "archived_count": sum(e.archived for e in kept),
                "summary_seq": in_force[0] if in_force else None,
                "compaction_error": stored_message(dump.compaction_error),
                "compaction_failures": dump.compaction_failures,
                "timeline_from": dump.timeline_from,
                "created_at": _moment(metadata.get("created_at"), now),
                "updated_at": _moment(metadata.get("last_active_at"), now),
            },
            metadata,
        )
        self._insert_events(connection, ref, kept)
        self._insert_retracted(connection, ref, [e for e in dump.events if e.retracted], now)
        self._insert_records(connection, ref, dump.records)
        tables = self.ops.tables
        rows = [
            {**_renamed(timeline_params(ref, entry)), "n": n}
            for n, entry in enumerate(dump.timeline)
        ]
        for start in range(0, len(rows), _BATCH):
            connection.execute(tables.timeline.insert(), rows[start : start + _BATCH])

    def _refuse_taken(self, connection: sa.Connection, cid: str) -> None:
        """Refuse a new conversation ``cid`` that is stored already, or is being erased
        (:class:`~chat_memory.errors.ConcurrencyError`, as an append that would create it)."""
        if connection.execute(self._exists, {"b_key": conversation_key(cid)}).first() is not None:
            raise InvalidInputError(f"conversation_id ({shown_id(cid)!r}) is stored already")
        self.ops.life.admit(connection, cid, _now())

    def _insert_row(
        self,
        connection: sa.Connection,
        cid: str,
        values: dict[str, Any],
        metadata: Mapping[str, Any],
    ) -> int:
        """Insert the conversation's row with ``values`` and the lifecycle fields of
        ``metadata`` (title, tags, values; its tag rows too); the row's id."""
        tables = self.ops.tables
        tags = sorted(set(metadata.get("tags") or ()))
        scope = scope_key(scope_of_key(cid))
        inserted = connection.execute(
            tables.conversations.insert().values(
                conversation_key=conversation_key(cid),
                conversation_id=cid,
                scope_key=scope,
                title=metadata.get("title"),
                tags=json.dumps(tags) if tags else None,
                meta=json.dumps(dict(metadata["values"])) if metadata.get("values") else None,
                **values,
            )
        ).inserted_primary_key
        assert inserted is not None  # SQLAlchemy has it for every single-row INSERT
        ref: int = inserted[0]
        if tags:
            connection.execute(
                tables.conversation_tags.insert(),
                [
                    {"conversation_ref": ref, "tag_key": row_key(t), "scope_key": scope}
                    for t in tags
                ],
            )
        return ref

    def _insert_events(self, connection: sa.Connection, ref: int, events: Sequence[Event]) -> None:
        """The event rows, as an append writes them (envelope without flags, search text,
        id keys), each with its archived flag."""
        ops = self.ops
        for start in range(0, len(events), _BATCH):
            batch = events[start : start + _BATCH]
            rows = ops._event_rows(
                ref, [replaced(e, {"archived": False, "retracted": False}) for e in batch]
            )
            for row, event in zip(rows, batch):
                row["archived"] = event.archived
            ops.driver.insert_many(connection, ops.sql.insert_events, rows)

    def _insert_retracted(
        self, connection: sa.Connection, ref: int, events: Sequence[Event], now: datetime
    ) -> None:
        rows = [
            {
                "conversation_ref": ref,
                "seq": e.seq,
                "type": e.type.value,
                "body": retracted_copy(e).to_json(),
                "retracted_at": now,
            }
            for e in events
        ]
        for start in range(0, len(rows), _BATCH):
            connection.execute(self.ops.tables.retracted.insert(), rows[start : start + _BATCH])

    def _insert_records(
        self, connection: sa.Connection, ref: int, records: Iterable[Mapping[str, Any]]
    ) -> None:
        rows = [{"conversation_ref": ref, "record": json.dumps(dict(r))} for r in records]
        if rows:
            connection.execute(self.ops.tables.compactions.insert(), rows)

    # -- fork --------------------------------------------------------------------------------

    def fork(self, connection: sa.Connection, cid: str, new_cid: str, at: int | None) -> Snapshot:
        """``new_cid`` as ``cid`` was at seq ``at`` (None: now), in the database (see the
        module docstring); its snapshot. Refused, writing nothing, as
        :func:`~chat_memory.backends.timeline.state_at` refuses."""
        source = connection.execute(self._locked, {"b_key": conversation_key(cid)}).first()
        if source is None:
            raise InvalidInputError(
                f"conversation_id ({shown_id(cid)!r}) is not a stored conversation"
            )
        self._refuse_taken(connection, new_cid)
        last = source.last_seq
        at = last if at is None else at
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= last:
            raise InvalidInputError(
                f"at ({at!r}) must be a seq of conversation {shown_id(cid)!r}: "
                f"a whole number from 0 to {last}"
            )
        if at < last and at < source.timeline_from:
            raise InvalidInputError(
                f"at ({at}) is before conversation {shown_id(cid)!r} kept the timeline a fork "
                f"needs (from seq {source.timeline_from}); fork at a later seq"
            )
        then = None if at == last else self.timeline.flags_at(connection, source, at)
        now = _now()
        values = {
            "version": 1,
            "last_seq": at,
            "archived_count": source.archived_count if then is None else 0,
            "summary_seq": source.summary_seq if then is None else then.summary,
            "compaction_error": source.compaction_error if then is None else None,
            "compaction_failures": source.compaction_failures if then is None else 0,
            "timeline_from": source.timeline_from,
            "created_at": now,
            "updated_at": now,
        }
        # a new conversation: the title, tags and values come along, its clock starts now
        ref = self._insert_row(connection, new_cid, values, _metadata_of(source))
        copy = {"b_ref": source.id, "b_new": ref, "b_at": at}
        records = self.ops.compactions(connection, cid)
        if then is None:
            connection.execute(self._copy_events_now, copy)
            connection.execute(self._copy_all_retracted, copy)
        else:
            connection.execute(
                self._copy_events_then,
                {
                    **copy,
                    "b_through": then.through,
                    "b_summary": -1 if then.summary is None else then.summary,
                    "b_pins": sorted(then.pins),
                },
            )
            self._copy_taken_then(connection, source.id, ref, at, then)
            records = [r for r in records if int(r.get("archived_through_seq", 0)) <= then.through]
            connection.execute(self._count_archived, {"b_new": ref})
        connection.execute(self._copy_timeline, copy)
        self._insert_records(connection, ref, records)
        return self.ops.load(connection, new_cid)

    def _copy_taken_then(
        self, connection: sa.Connection, source: int, ref: int, at: int, then: PastFlags
    ) -> None:
        """The events with seq ≤ ``at`` retracted by then stay retracted in the fork (copied
        in the database); those retracted since come back, with their flags then."""
        with self.ops._stored():
            later = [
                Event.from_json(body)
                for seq, body in connection.execute(self._taken, {"b_ref": source, "b_at": at})
                if seq not in then.retracted
            ]
        self._insert_events(
            connection, ref, [replaced(e, {"archived": then.archived(e)}) for e in later]
        )
        seqs = sorted(then.retracted)
        for start in range(0, len(seqs), _BATCH):
            connection.execute(
                self._copy_retracted,
                {"b_ref": source, "b_new": ref, "b_seqs": seqs[start : start + _BATCH]},
            )


def _renamed(params: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`timeline_params` as column values (``b_head`` -> ``head``…)."""
    return {"conversation_ref" if k == "b_ref" else k[2:]: v for k, v in params.items()}


def _moment(text: Any, default: datetime) -> datetime:
    return _utc(datetime.fromisoformat(text)) if isinstance(text, str) and text else default


def _metadata_of(row: Any) -> dict[str, Any]:
    """The lifecycle fields of a conversation row, as every store's dump carries them."""
    return {
        "title": row.title,
        "tags": sorted(json.loads(row.tags)) if row.tags else [],
        "values": json.loads(row.meta) if row.meta else {},
        "created_at": _utc(row.created_at).isoformat(),
        "last_active_at": _utc(row.updated_at).isoformat(),
    }


def _check_dump(dump: ConversationDump) -> None:
    """Refuse a dump that is not one conversation: a seq outside 1..last_seq or repeated, two
    summaries in force, a timeline entry of an unknown kind."""
    cid = shown_id(dump.conversation_id)
    seen: set[int] = set()
    in_force: list[int] = []
    for event in dump.events:
        seq = event.seq or 0
        if not 0 < seq <= dump.last_seq or seq in seen:
            raise InvalidInputError(
                f"dump of {cid!r}: event {event.id!r} has seq {event.seq!r}, not a seq of its "
                f"own from 1 to last_seq ({dump.last_seq})"
            )
        seen.add(seq)
        if event.type is EventType.SUMMARY and not event.archived and not event.retracted:
            in_force.append(seq)
    if len(in_force) > 1:
        raise InvalidInputError(
            f"dump of {cid!r}: two summaries in force (seq {in_force[0]} and {in_force[1]}); "
            "archive all but one"
        )
    for entry in dump.timeline:
        if entry.get("kind") not in (COMPACTION, RETRACTION, DROPPED_PIN):
            raise InvalidInputError(
                f"dump of {cid!r}: timeline entry ({entry!r}) is of no known kind"
            )
