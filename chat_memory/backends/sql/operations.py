"""The SQL store's operations, written once: each is a transaction body that takes a SQLAlchemy
sync :class:`~sqlalchemy.Connection` inside a transaction the caller opened.

:class:`~chat_memory.backends.sql.SQLStore` runs them in ``engine.begin()``-style transactions;
:class:`~chat_memory.backends.sql.AsyncSQLStore` runs the same bodies with
``await async_connection.run_sync(body, …)`` (SQLAlchemy's asyncio extension drives the sync
code over the async driver through greenlet, without threads). The callers own transactions,
retries and error wrapping; nothing here commits, sleeps or retries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ...errors import ConfigurationError, StorageError
from ...events import Event, EventType, Window
from ...pins import superseded
from ...search import RECALL_MARK, MatchMode, SearchQuery, SearchResult, search_text
from ..base import CompactionPlan, Snapshot
from ..bookkeeping import number, retracted_copy, retraction_targets, split_appended, unstored
from ..failures import stored_data
from .connections import lock_schema
from .schema import build_tables, ensure_schema, row_key, stored_message, stored_search_text

_NOT_ACTIVE = (EventType.SYSTEM.value, EventType.SUMMARY.value)
_TOOL_TYPES = (EventType.TOOL_CALL.value, EventType.TOOL_RESULT.value)
#: Keys per ``IN (…)`` of a look-up by id: far below every database's limit on bound
#: parameters (999 on SQLite before 3.32), however large the batch.
_KEYS_PER_QUERY = 500


def conversation_key(conversation_id: str) -> str:
    """The row key of a conversation: the SHA-256 of its id, so any id is an exact, bounded key."""
    return hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class SQLOperations:
    """Every store operation over the tables of one prefix,
    with the statements of every turn built once (constructing a statement costs more than
    SQLite takes to run it). Writes expect a write transaction (the conversation's row is
    locked with ``SELECT … FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` holds the database
    lock already); reads expect any transaction."""

    def __init__(
        self, table_prefix: str, *, max_archived_events: int | None, compaction_records_kept: int
    ) -> None:
        if max_archived_events is not None and (
            isinstance(max_archived_events, bool)
            or not isinstance(max_archived_events, int)
            or max_archived_events < 0
        ):
            raise ConfigurationError(
                f"max_archived_events ({max_archived_events!r}) must be 0 or more, or None"
            )
        self.tables = tables = build_tables(table_prefix)
        #: The archive cap of a plan that names none (None: unbounded).
        self.max_archived_events = max_archived_events
        self.compaction_records_kept = compaction_records_kept
        conversations, events = tables.conversations, tables.events
        by_key = conversations.c.conversation_key == sa.bindparam("b_key")
        self._row = sa.select(conversations).where(by_key)
        self._row_for_update = self._row.with_for_update()
        self._bump = (
            conversations.update()
            .where(conversations.c.id == sa.bindparam("b_ref"))
            .values(
                last_seq=sa.bindparam("b_last_seq"),
                version=sa.bindparam("b_version"),
                updated_at=sa.bindparam("b_now"),
            )
        )
        self._swap = (
            conversations.update()
            .where(by_key, conversations.c.version == sa.bindparam("expected_version"))
            .values(
                version=conversations.c.version + 1,
                compaction_error=None,
                compaction_failures=0,
                updated_at=sa.bindparam("b_now"),
            )
        )
        self._archive_through = (
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
        self.window = (
            sa.select(
                conversations.c.version,
                conversations.c.last_seq,
                conversations.c.archived_count,
                conversations.c.compaction_error,
                conversations.c.compaction_failures,
                events.c.type,
                events.c.body,
            )
            .select_from(joined)
            .where(by_key)
            .order_by(events.c.seq)
        )

    def _ref(self, cid: str) -> Any:
        conversations = self.tables.conversations
        return (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .scalar_subquery()
        )

    def _conversation_row(self, connection: sa.Connection, cid: str, *, lock: bool) -> Any:
        query = self._row_for_update if lock else self._row
        return connection.execute(query, {"b_key": conversation_key(cid)}).first()

    def _event_rows(
        self, ref: int, events: Sequence[Event], first_seq: int
    ) -> list[dict[str, Any]]:
        rows = []
        for seq, event in enumerate(events, start=first_seq):
            stored = event.model_copy(update={"seq": seq, "archived": False})
            rows.append(
                {
                    "conversation_ref": ref,
                    "seq": seq,
                    "type": stored.type.value,
                    "archived": False,
                    "tokens": stored.tokens,
                    "created_at": stored.created_at,
                    "search_text": stored_search_text(search_text(stored)),
                    "body": stored.to_json(),
                    "event_key": row_key(stored.id),
                    "call_key": row_key(stored.tool_call_id)
                    if stored.type.value in _TOOL_TYPES and stored.tool_call_id is not None
                    else None,
                }
            )
        return rows

    def _stored(self) -> AbstractContextManager[None]:
        """Around the decoding of rows: what cannot be decoded is a SchemaError naming them."""
        return stored_data(f"a row of the {self.tables.prefix!r} tables")

    def _events(self, rows: Any) -> list[Event]:
        with self._stored():
            return [
                Event.from_json(row.body).model_copy(update={"archived": bool(row.archived)})
                for row in rows
            ]

    # -- schema ------------------------------------------------------------------------------

    def ensure_schema(self, connection: sa.Connection) -> None:
        """Create or check and migrate the tables, under the schema lock (a write transaction)."""
        lock_schema(connection, self.tables.meta.name)
        ensure_schema(connection, self.tables)

    # -- reads -------------------------------------------------------------------------------

    def load(self, connection: sa.Connection, cid: str) -> Snapshot:
        """The conversation's row and its window rows in one statement (see :attr:`window`)."""
        rows = connection.execute(self.window, {"b_key": conversation_key(cid)}).all()
        if not rows:
            return Snapshot.empty(cid)
        pinned: list[Event] = []
        active: list[Event] = []
        summary: Event | None = None
        with self._stored():
            for row in rows:
                if row.body is None:
                    continue
                stored = Event.from_json(row.body)
                if row.type == EventType.SYSTEM.value:
                    pinned.append(stored)
                elif row.type == EventType.SUMMARY.value:
                    summary = stored
                else:
                    active.append(stored)
        head = rows[0]
        return Snapshot(
            conversation_id=cid,
            version=head.version,
            last_seq=head.last_seq,
            window=Window(pinned=tuple(pinned), summary=summary, active=tuple(active)),
            archived_count=head.archived_count,
            compaction_error=head.compaction_error,
            compaction_failures=head.compaction_failures,
        )

    def history(self, connection: sa.Connection, cid: str) -> list[Event]:
        events = self.tables.events
        query = sa.select(events.c.archived, events.c.body).where(
            events.c.conversation_ref == self._ref(cid)
        )
        return self._events(connection.execute(query.order_by(events.c.seq)))

    def find_tool_events(
        self, connection: sa.Connection, cid: str, tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the ``(conversation, call_key)`` index, archived rows included; only the rows of
        the ids asked for are read (each checked against its body)."""
        return self.find_events(connection, cid, (), tool_call_ids)

    def find_events(
        self,
        connection: sa.Connection,
        cid: str,
        event_ids: Collection[str],
        tool_call_ids: Collection[str],
    ) -> list[Event]:
        """The window events with one of ``event_ids`` and the tool events (archived included)
        with one of ``tool_call_ids``, by the ``event_key`` and ``call_key`` indexes."""
        ref = self._conversation_row(connection, cid, lock=False)
        if ref is None:
            return []
        found = {
            e.seq: e for e in self._window_events_by_id(connection, ref.id, event_ids).values()
        }
        events = self.tables.events
        wanted = set(tool_call_ids)
        for keys in _chunks(sorted({row_key(i) for i in wanted})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == ref.id, events.c.call_key.in_(keys)
                )
            )
            found.update(
                (e.seq, e)
                for e in self._events(rows)
                if e.type.value in _TOOL_TYPES and e.tool_call_id in wanted
            )
        return sorted(found.values(), key=lambda e: e.seq or 0)

    def _window_events_by_id(
        self, connection: sa.Connection, ref: int, event_ids: Collection[str]
    ) -> dict[str, Event]:
        """The pinned and active events (never the summary) whose id is one of ``event_ids``, by id."""
        events = self.tables.events
        wanted = set(event_ids)
        found: dict[str, Event] = {}
        for keys in _chunks(sorted({row_key(i) for i in wanted})):
            # the archived flag and the type are checked here, not in SQL: a condition on
            # ``archived`` lets a planner without statistics prefer the window index, a scan
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == ref, events.c.event_key.in_(keys)
                )
            )
            found.update(
                (e.id, e)
                for e in self._events(rows)
                if e.id in wanted and not e.archived and e.type is not EventType.SUMMARY
            )
        return found

    def search(self, connection: sa.Connection, cid: str, query: SearchQuery) -> SearchResult:
        """``LIKE`` over the stored case-folded text, counted and paged in the database, for
        every term (NUL is spelled as the column spells it; the query model bounds the terms'
        number and length, so the statement stays within every database's limits); only the
        rows of the page are read."""
        events = self.tables.events
        likes = [
            events.c.search_text.contains(stored_search_text(term), autoescape=True)
            for term in query.terms
        ]
        matched = sa.or_(*likes) if query.match_mode is MatchMode.ANY else sa.and_(*likes)
        where: tuple[Any, ...] = (
            events.c.conversation_ref == self._ref(cid),
            events.c.search_text.is_not(None),
            matched,
        )
        if not query.include_recall_tools:
            where += (sa.not_(events.c.search_text.startswith(RECALL_MARK, autoescape=True)),)
        total = connection.execute(
            sa.select(sa.func.count()).select_from(events).where(*where)
        ).scalar_one()
        found: list[Event] = []
        if total > query.offset:
            found = self._events(
                connection.execute(
                    sa.select(events.c.archived, events.c.body)
                    .where(*where)
                    .order_by(events.c.seq)
                    .offset(query.offset)
                    .limit(
                        min(query.limit, total - query.offset)
                    )  # a huge page size must not overflow LIMIT
                )
            )
        return SearchResult(events=found, total=total)

    def retracted(self, connection: sa.Connection, cid: str) -> list[Event]:
        """The retracted events, oldest first, from their own table."""
        retracted = self.tables.retracted
        query = (
            sa.select(retracted.c.body)
            .where(retracted.c.conversation_ref == self._ref(cid))
            .order_by(retracted.c.seq)
        )
        bodies = connection.execute(query).scalars().all()
        with self._stored():
            return [retracted_copy(Event.from_json(body)) for body in bodies]

    def compactions(self, connection: sa.Connection, cid: str) -> list[dict[str, Any]]:
        compactions = self.tables.compactions
        rows = connection.execute(
            sa.select(compactions.c.record)
            .where(compactions.c.conversation_ref == self._ref(cid))
            .order_by(compactions.c.id)
        ).scalars()
        with self._stored():
            return [json.loads(record) for record in rows.all()]

    def conversations(self, connection: sa.Connection) -> list[str]:
        return sorted(
            connection.execute(sa.select(self.tables.conversations.c.conversation_id)).scalars()
        )

    # -- writes ------------------------------------------------------------------------------

    def _locked_row(self, connection: sa.Connection, cid: str) -> tuple[int, int, int, datetime]:
        """The conversation's row, locked (created at version 0 when missing): (its id, last
        seq, version, now)."""
        row = self._conversation_row(connection, cid, lock=True)
        now = _now()
        if row is not None:
            return row.id, row.last_seq, row.version, now
        conversations = self.tables.conversations
        inserted = connection.execute(
            conversations.insert().values(
                conversation_key=conversation_key(cid),
                conversation_id=cid,
                version=0,
                last_seq=0,
                archived_count=0,
                compaction_failures=0,
                created_at=now,
                updated_at=now,
            )
        ).inserted_primary_key
        if inserted is None:  # SQLAlchemy has it for every single-row INSERT
            raise StorageError(f"the database gave no id to the new row of conversation {cid!r}")
        return inserted[0], 0, 0, now

    def append(self, connection: sa.Connection, cid: str, batch: list[Event]) -> Snapshot:
        """Append ``batch`` (idempotent per event id) and return the snapshot right after it."""
        ref, last_seq, version, now = self._locked_row(connection, cid)
        # read under the row lock: the id check and the insert are one atomic step
        before = self.load(connection, cid) if version else Snapshot.empty(cid)
        window = before.window
        fresh = unstored(batch, (*window.pinned, *window.active))
        if batch and not fresh:
            return before
        if fresh:
            connection.execute(
                self.tables.events.insert(), self._event_rows(ref, fresh, last_seq + 1)
            )
        connection.execute(
            self._bump,
            {
                "b_ref": ref,
                "b_last_seq": last_seq + len(fresh),
                "b_version": version + 1,
                "b_now": now,
            },
        )
        pinned, real = split_appended(number(fresh, last_seq))
        if pinned:  # a system event may supersede an older pin: rare, so read the result back
            self._unpin_superseded(connection, ref)
            return self.load(connection, cid)
        return replace(
            before,
            version=version + 1,
            last_seq=last_seq + len(fresh),
            window=Window(
                pinned=(*window.pinned, *pinned),
                summary=window.summary,
                active=(*window.active, *real),
            ),
        )

    def append_without_window(
        self, connection: sa.Connection, cid: str, batch: list[Event]
    ) -> list[Event]:
        """Append ``batch`` like :meth:`append` (idempotent per event id against the window, under
        the row lock) and return the stored copy of each of its events, without reading the
        window: the batch's ids are looked up by the ``event_key`` index."""
        ref, last_seq, version, now = self._locked_row(connection, cid)
        before = (
            self._window_events_by_id(connection, ref, [e.id for e in batch]) if version else {}
        )
        fresh = [e for e in unstored(batch, ()) if e.id not in before]
        if batch and not fresh:
            return [before[e.id] for e in batch]
        numbered = number(fresh, last_seq)
        if fresh:
            connection.execute(
                self.tables.events.insert(), self._event_rows(ref, fresh, last_seq + 1)
            )
        connection.execute(
            self._bump,
            {
                "b_ref": ref,
                "b_last_seq": last_seq + len(fresh),
                "b_version": version + 1,
                "b_now": now,
            },
        )
        if any(e.type is EventType.SYSTEM for e in fresh):
            self._unpin_superseded(connection, ref)
        stored = {e.id: e for e in numbered}
        return [before.get(e.id) or stored[e.id] for e in batch]

    def append_compacting(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> tuple[Snapshot, bool]:
        """Append, then apply the planner's plan in the same transaction: the row stays locked
        since the append, so the compare-and-swap cannot lose."""
        snapshot = self.append(connection, cid, batch)
        plan = planner(snapshot)
        return snapshot, plan is not None and self.apply(connection, cid, plan)

    def _unpin_superseded(self, connection: sa.Connection, ref: int) -> None:
        """Archive the pinned events a newer one with the same pin key supersedes (the
        conversation's row is locked by the caller)."""
        conversations, events = self.tables.conversations, self.tables.events
        pinned_rows = sa.and_(
            events.c.conversation_ref == ref,
            events.c.archived == sa.false(),
            events.c.type == EventType.SYSTEM.value,
        )
        pinned = [
            Event.from_json(body)
            for body in connection.execute(sa.select(events.c.body).where(pinned_rows)).scalars()
        ]
        gone = [e.seq for e in superseded(pinned)]
        if not gone:
            return
        connection.execute(
            events.update().where(pinned_rows, events.c.seq.in_(gone)).values(archived=True)
        )
        connection.execute(
            conversations.update()
            .where(conversations.c.id == ref)
            .values(archived_count=conversations.c.archived_count + len(gone))
        )

    def apply(self, connection: sa.Connection, cid: str, plan: CompactionPlan) -> bool:
        """A compaction as a compare-and-swap on the version; False (nothing changed) when
        another write got there first."""
        conversations, events = self.tables.conversations, self.tables.events
        cap = (
            plan.max_archived_events
            if plan.max_archived_events is not None
            else self.max_archived_events
        )
        swapped = connection.execute(
            self._swap,
            {
                "b_key": conversation_key(cid),
                "expected_version": plan.expected_version,
                "b_now": _now(),
            },
        )
        if swapped.rowcount != 1:
            return False
        row = self._conversation_row(connection, cid, lock=False)
        of_conversation = events.c.conversation_ref == row.id
        archived = connection.execute(
            self._archive_through, {"b_ref": row.id, "through_seq": plan.archive_through_seq}
        ).rowcount
        last_seq, summary_seq = row.last_seq, row.summary_seq
        if plan.summary is not None:
            archived += connection.execute(
                events.update()
                .where(
                    of_conversation,
                    events.c.archived == sa.false(),
                    events.c.type == EventType.SUMMARY.value,
                )
                .values(archived=True)
            ).rowcount
            last_seq += 1
            summary_seq = last_seq
            connection.execute(events.insert(), self._event_rows(row.id, [plan.summary], last_seq))
        archived_count = row.archived_count + archived
        if cap is not None and archived_count > cap:
            archived_count -= self._trim(connection, row.id, archived_count - cap)
        connection.execute(
            conversations.update()
            .where(conversations.c.id == row.id)
            .values(last_seq=last_seq, summary_seq=summary_seq, archived_count=archived_count)
        )
        if plan.record is not None:
            self._keep_record(connection, row.id, plan.record)
        return True

    def _keep_record(self, connection: sa.Connection, ref: int, record: dict[str, Any]) -> None:
        """Insert a compaction record and drop the conversation's records beyond the newest
        :attr:`compaction_records_kept`."""
        compactions = self.tables.compactions
        connection.execute(
            compactions.insert().values(conversation_ref=ref, record=json.dumps(record))
        )
        oldest_kept = connection.execute(
            sa.select(compactions.c.id)
            .where(compactions.c.conversation_ref == ref)
            .order_by(compactions.c.id.desc())
            .offset(self.compaction_records_kept - 1)
            .limit(1)
        ).scalar_one_or_none()
        if oldest_kept is not None:
            connection.execute(
                compactions.delete().where(
                    compactions.c.conversation_ref == ref, compactions.c.id < oldest_kept
                )
            )

    def _trim(self, connection: sa.Connection, ref: int, excess: int) -> int:
        """Delete the ``excess`` oldest archived events; returns how many were deleted."""
        events = self.tables.events
        archive = sa.and_(events.c.conversation_ref == ref, events.c.archived == sa.true())
        through = connection.execute(
            sa.select(events.c.seq)
            .where(archive)
            .order_by(events.c.seq)
            .offset(excess - 1)
            .limit(1)
        ).scalar_one_or_none()
        if through is None:
            return 0
        return connection.execute(events.delete().where(archive, events.c.seq <= through)).rowcount

    def retract(
        self, connection: sa.Connection, cid: str, event_ids: Collection[str]
    ) -> list[Event]:
        """Move the events with one of ``event_ids`` and their tool partners (found by the
        ``event_key`` and ``call_key`` indexes, window and archive) to the retracted table,
        under the conversation's row lock, in one transaction; bump the version."""
        row = self._conversation_row(connection, cid, lock=True)
        if row is None:
            return []
        events, conversations = self.tables.events, self.tables.conversations
        wanted = set(event_ids)
        pool: dict[int, Event] = {}
        for keys in _chunks(sorted({row_key(i) for i in wanted})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == row.id, events.c.event_key.in_(keys)
                )
            )
            pool.update((e.seq or 0, e) for e in self._events(rows) if e.id in wanted)
        call_ids = {
            e.tool_call_id for e in pool.values() if e.type.value in _TOOL_TYPES and e.tool_call_id
        }
        for keys in _chunks(sorted({row_key(i) for i in call_ids})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == row.id, events.c.call_key.in_(keys)
                )
            )
            pool.update((e.seq or 0, e) for e in self._events(rows) if e.tool_call_id in call_ids)
        targets = retraction_targets(sorted(pool.values(), key=lambda e: e.seq or 0), wanted)
        if not targets:
            return []
        now = _now()
        taken = [retracted_copy(e) for e in targets]
        connection.execute(
            self.tables.retracted.insert(),
            [
                {
                    "conversation_ref": row.id,
                    "seq": e.seq,
                    "type": e.type.value,
                    "body": e.to_json(),
                    "retracted_at": now,
                }
                for e in taken
            ],
        )
        seqs = [e.seq for e in targets]
        for i in range(0, len(seqs), _KEYS_PER_QUERY):
            connection.execute(
                events.delete().where(
                    events.c.conversation_ref == row.id,
                    events.c.seq.in_(seqs[i : i + _KEYS_PER_QUERY]),
                )
            )
        connection.execute(
            conversations.update()
            .where(conversations.c.id == row.id)
            .values(
                version=row.version + 1,
                archived_count=row.archived_count - sum(e.archived for e in targets),
                updated_at=now,
            )
        )
        return taken

    def record_compaction_error(
        self, connection: sa.Connection, cid: str, message: str | None
    ) -> None:
        conversations = self.tables.conversations
        connection.execute(
            conversations.update()
            .where(conversations.c.conversation_key == conversation_key(cid))
            .values(
                compaction_error=stored_message(message),
                # one UPDATE: concurrent failures of several workers all count
                compaction_failures=0
                if message is None
                else conversations.c.compaction_failures + 1,
            )
        )

    def clear(self, connection: sa.Connection, cid: str) -> None:
        conversations, events, compactions = (
            self.tables.conversations,
            self.tables.events,
            self.tables.compactions,
        )
        row = self._conversation_row(connection, cid, lock=True)
        if row is not None:
            connection.execute(events.delete().where(events.c.conversation_ref == row.id))
            connection.execute(
                self.tables.retracted.delete().where(
                    self.tables.retracted.c.conversation_ref == row.id
                )
            )
            connection.execute(compactions.delete().where(compactions.c.conversation_ref == row.id))
            connection.execute(conversations.delete().where(conversations.c.id == row.id))


def _chunks(keys: list[str]) -> list[list[str]]:
    return [keys[i : i + _KEYS_PER_QUERY] for i in range(0, len(keys), _KEYS_PER_QUERY)]
