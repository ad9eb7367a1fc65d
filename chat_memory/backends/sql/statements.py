"""The SQL store's statements, built once per set of tables with bound parameters: building a
statement (and its cache key) costs more than SQLite takes to run it, while a prebuilt one is
found in SQLAlchemy's compiled cache at once. :class:`~chat_memory.backends.sql.operations.SQLOperations`
runs them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ...events import EventType
from ..timeline import COMPACTION, DROPPED_PIN
from .schema import Tables

_NOT_ACTIVE = (EventType.SYSTEM.value, EventType.SUMMARY.value)


def timeline_params(ref: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of :attr:`Statements.add_timeline` for ``entry`` (an entry of the fork
    timeline, :mod:`chat_memory.backends.timeline`) of conversation row ``ref``: a dropped
    pin's fields in ``seq`` and ``pin_key``, a retraction's seqs as a JSON array."""
    params: dict[str, Any] = {
        "b_ref": ref,
        "b_kind": entry["kind"],
        "b_head": None,
        "b_through": None,
        "b_summary_seq": None,
        "b_seqs": None,
        "b_seq": None,
        "b_pin_key": None,
    }
    if entry["kind"] == DROPPED_PIN:
        params.update(b_seq=entry["seq"], b_pin_key=entry["key"])
    elif entry["kind"] == COMPACTION:
        params.update(b_head=entry["head"], b_through=entry["through"])
        params["b_summary_seq"] = entry["summary"]
    else:
        params.update(b_head=entry["head"], b_seqs=json.dumps(sorted(entry["seqs"])))
    return params


class _DriverValue(sa.types.UserDefinedType[Any]):
    """A bind parameter given a value as the driver returned it (a cached row's
    ``created_at``): no bind processing, no cast, whatever the column's type."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        # only DDL asks for it: a column declared with this type is a mistake, said as one
        raise TypeError(f"{type(self).__name__} types bind parameters only: no column can be of it")


class Statements:
    """The statements of every turn (and of the reads) over ``tables``. Parameters are named
    ``b_…``; ``IN`` lists are expanding parameters."""

    def __init__(self, tables: Tables, *, compaction_records_kept: int) -> None:
        conversations, events = tables.conversations, tables.events
        by_key = conversations.c.conversation_key == sa.bindparam("b_key")
        self.row = sa.select(conversations).where(by_key)
        self.row_for_update = self.row.with_for_update()
        self.bump_row = (
            conversations.update()
            .where(conversations.c.id == sa.bindparam("b_ref"))
            .values(
                last_seq=sa.bindparam("b_last_seq"),
                version=sa.bindparam("b_version"),
                updated_at=sa.bindparam("b_now"),
            )
        )
        self.archive_through = (
            events.update()
            .where(
                events.c.conversation_ref == sa.bindparam("b_ref"),
                events.c.archived == sa.false(),
                events.c.seq <= sa.bindparam("through_seq"),
                events.c.type.not_in(_NOT_ACTIVE),
            )
            .values(archived=True)
        )
        joined = conversations.outerjoin(
            events,
            sa.and_(
                events.c.conversation_ref == conversations.c.id, events.c.archived == sa.false()
            ),
        )
        window_columns = (
            conversations.c.version,
            conversations.c.last_seq,
            conversations.c.archived_count,
            conversations.c.compaction_error,
            conversations.c.compaction_failures,
            events.c.type,
            events.c.body,
        )
        self.window = (
            sa.select(*window_columns).select_from(joined).where(by_key).order_by(events.c.seq)
        )
        # an append that does not read the window reads the row and the batch's ids in one
        # statement (where the write transaction holds the lock since BEGIN: SQLite)
        with_ids = conversations.outerjoin(
            events,
            sa.and_(
                events.c.conversation_ref == conversations.c.id,
                events.c.event_key.in_(sa.bindparam("b_keys", expanding=True)),
            ),
        )
        self.ids_of_writer = (
            sa.select(
                conversations.c.id,
                conversations.c.version,
                conversations.c.last_seq,
                conversations.c.archived_count,
                events.c.archived,
                events.c.body,
            )
            .select_from(with_ids)
            .where(by_key)
        )
        compactions, retracted = tables.compactions, tables.retracted
        of_key = (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == sa.bindparam("b_key"))
            .scalar_subquery()
        )
        self.new_conversation = conversations.insert().values(
            conversation_key=sa.bindparam("b_key"),
            conversation_id=sa.bindparam("b_cid"),
            version=0,
            last_seq=0,
            archived_count=0,
            compaction_failures=0,
            created_at=sa.bindparam("b_now"),
            updated_at=sa.bindparam("b_now"),
            scope_key=sa.bindparam("b_scope"),
        )
        self.insert_events = events.insert()
        compacted: dict[str, Any] = {
            "version": sa.bindparam("b_version"),
            "last_seq": sa.bindparam("b_last_seq"),
            "archived_count": sa.bindparam("b_archived_count"),
            "compaction_error": None,
            "compaction_failures": 0,
            "updated_at": sa.bindparam("b_now"),
        }
        by_ref = conversations.c.id == sa.bindparam("b_ref")
        # a compaction's one UPDATE of the row: the version, counters and error together
        self.compacted = conversations.update().where(by_ref).values(**compacted)
        self.compacted_with_summary = (
            conversations.update()
            .where(by_ref)
            .values(**compacted, summary_seq=sa.bindparam("b_summary_seq"))
        )
        of_ref = events.c.conversation_ref == sa.bindparam("b_ref")
        self.archive_summary = (
            events.update()
            .where(
                of_ref,
                events.c.archived == sa.false(),
                events.c.type == EventType.SUMMARY.value,
            )
            .values(archived=True)
        )
        archive = sa.and_(of_ref, events.c.archived == sa.true())
        # the oldest archived rows the archive cap deletes: their seqs, and the body of each
        # system event among them (a superseded pin: its deletion goes in the fork timeline)
        self.oldest_archived = (
            sa.select(
                events.c.seq,
                sa.case((events.c.type == EventType.SYSTEM.value, events.c.body), else_=sa.null()),
            )
            .where(archive)
            .order_by(events.c.seq)
            .limit(sa.bindparam("b_count"))
        )
        self.drop_archived = events.delete().where(archive, events.c.seq <= sa.bindparam("b_seq"))
        of_record_ref = compactions.c.conversation_ref == sa.bindparam("b_ref")
        self.insert_record = compactions.insert().values(
            conversation_ref=sa.bindparam("b_ref"), record=sa.bindparam("b_record")
        )
        self.oldest_kept_record = (
            sa.select(compactions.c.id)
            .where(of_record_ref)
            .order_by(compactions.c.id.desc())
            .offset(compaction_records_kept - 1)
            .limit(1)
        )
        self.drop_records = compactions.delete().where(
            of_record_ref, compactions.c.id < sa.bindparam("b_id")
        )
        # the newest records only: the table may hold a few more between two trims
        self.records = (
            sa.select(compactions.c.record)
            .where(compactions.c.conversation_ref == of_key)
            .order_by(compactions.c.id.desc())
            .limit(compaction_records_kept)
        )
        self.by_event_key = sa.select(events.c.archived, events.c.body).where(
            of_ref, events.c.event_key.in_(sa.bindparam("b_keys", expanding=True))
        )
        # the tool-pair check's look-up: the batch's ids and call ids in one statement (a
        # UNION ALL, not an OR: each half is an index search, where SQLite would scan the
        # conversation's rows for the OR)
        self.events_by_keys = sa.union_all(
            sa.select(events.c.archived, events.c.body).where(
                events.c.conversation_ref == of_key,
                events.c.event_key.in_(sa.bindparam("b_event_keys", expanding=True)),
            ),
            sa.select(events.c.archived, events.c.body).where(
                events.c.conversation_ref == of_key,
                events.c.call_key.in_(sa.bindparam("b_call_keys", expanding=True)),
            ),
        )
        self.history = (
            sa.select(events.c.archived, events.c.body)
            .where(events.c.conversation_ref == of_key)
            .order_by(events.c.seq)
        )
        self.retracted = (
            sa.select(retracted.c.body)
            .where(retracted.c.conversation_ref == of_key)
            .order_by(retracted.c.seq)
        )
        timeline = tables.timeline
        # an entry of the fork timeline (docs/lifecycle.md, "Fork"), numbered after the
        # conversation's last one in the same statement (the writer holds the row lock): an
        # INSERT … SELECT of one aggregate row, which every database takes on its own table
        columns = ("n", "kind", "head", "through", "summary_seq", "seqs", "seq", "pin_key")
        of_timeline = sa.bindparam("b_ref", type_=timeline.c.conversation_ref.type)
        self.add_timeline = timeline.insert().from_select(
            ["conversation_ref", *columns],
            sa.select(
                of_timeline,
                sa.func.coalesce(sa.func.max(timeline.c.n), -1) + 1,
                *(sa.bindparam(f"b_{name}", type_=timeline.c[name].type) for name in columns[1:]),
            ).where(timeline.c.conversation_ref == of_timeline),
        )
        # -- the window cache (window_cache.py) -------------------------------------------
        # the row's state, by position: id, version, last_seq, archived_count,
        # compaction_error, compaction_failures, created_at, updated_at (the validator of a
        # cached window is the id, created_at, updated_at and version)
        state = (
            conversations.c.id,
            conversations.c.version,
            conversations.c.last_seq,
            conversations.c.archived_count,
            conversations.c.compaction_error,
            conversations.c.compaction_failures,
            conversations.c.created_at,
            conversations.c.updated_at,
        )
        # FOR UPDATE is nothing on SQLite, whose write transaction holds the lock since BEGIN
        self.state_for_update = sa.select(*state).where(by_key).with_for_update()
        # the state and the window rows (type, body) in one statement
        self.window_with_state = (
            sa.select(*state, events.c.type, events.c.body)
            .select_from(joined)
            .where(by_key)
            .order_by(events.c.seq)
        )
        # the same, with the window rows only if the row no longer holds the validator
        # given (the cached window's), and whether it does (a last column): one statement
        # either way. The values given are the driver's own, passed back as they are (see
        # _DriverValue), and the join's key is NULL when the row holds them, so that the
        # window index is not even entered
        raw = _DriverValue()
        holds = sa.and_(
            conversations.c.id == sa.bindparam("b_ref", type_=conversations.c.id.type),
            conversations.c.version == sa.bindparam("b_version", type_=sa.BigInteger()),
            conversations.c.created_at == sa.bindparam("b_created", type_=raw),
            conversations.c.updated_at == sa.bindparam("b_updated", type_=raw),
        )
        unless_held = conversations.outerjoin(
            events,
            sa.and_(
                events.c.conversation_ref == sa.case((holds, sa.null()), else_=conversations.c.id),
                events.c.archived == sa.false(),
            ),
        )
        self.window_unless_cached = (
            sa.select(
                *state,
                events.c.type,
                events.c.body,
                sa.case((holds, sa.literal_column("1")), else_=sa.literal_column("0")),
            )
            .select_from(unless_held)
            .where(by_key)
            .order_by(events.c.seq)
        )
