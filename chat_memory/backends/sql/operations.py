"""The SQL store's operations, written once: each is a transaction body that takes a SQLAlchemy
sync :class:`~sqlalchemy.Connection` inside a transaction the caller opened.

:class:`SQLOperations` composes them. This module holds the hot path, what every turn runs:
the window read (:meth:`~SQLOperations.load`) and the appends, each one read of the locked
row and its window and one write (the tool-pair check runs on that read). The rest is in its
siblings, each a part extending :class:`~chat_memory.backends.sql.rows.ConversationRows`
(rows.py: the tables, statements and cache, the steps on a conversation's rows every part
shares): compaction.py (compactions, the archive trim, the compaction records) and
lookups.py (finds by key, search, history, the retracted events, retraction, clearing).

:class:`~chat_memory.backends.sql.SQLStore` runs them in ``engine.begin()``-style transactions;
:class:`~chat_memory.backends.sql.AsyncSQLStore` runs the same bodies with
``await async_connection.run_sync(body, …)`` (SQLAlchemy's asyncio extension drives the sync
code over the async driver through greenlet, without threads). The callers own transactions,
retries and error wrapping; nothing here commits, sleeps or retries.

Each conversation's last window is kept in :attr:`SQLOperations.windows` (window_cache.py):
an append or a load reads the conversation's row, and its window rows only when the row no
longer holds the cached window's validator. A write stages the window it leaves for the
cache; the callers keep it once the transaction has committed
(:meth:`~chat_memory.backends.sql.window_cache.WindowCache.staging`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ...event_checks import found_in_window, tool_call_ids, tool_event_ids
from ...events import Event, EventType, Window
from ...pins import superseded
from ..base import CompactionPlan, Snapshot, ToolPairCheck
from ..bookkeeping import number, unstored
from .compaction import RECORD_TRIM_EVERY, CompactionOperations, compacted, trims_records
from .connections import lock_schema
from .lookups import LookupOperations
from .rows import (
    KEYS_PER_QUERY,
    LockedRow,
    as_stored,
    conversation_key,
    locked_row,
    utc_now,
    validator_of,
)
from .schema import id_key
from .schema_migrations import ensure_schema

__all__ = ["RECORD_TRIM_EVERY", "SQLOperations", "conversation_key", "trims_records"]

#: The reads that are one statement whatever their arguments.
_ONE_STATEMENT_READS = frozenset({"load", "history", "retracted", "compactions", "conversations"})


class SQLOperations(LookupOperations, CompactionOperations):
    """Every store operation over the tables of one prefix, running the statements
    :class:`~chat_memory.backends.sql.statements.Statements` built once (constructing a
    statement costs more than SQLite takes to run it). Writes expect a write transaction (the
    conversation's row is locked with ``SELECT … FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE``
    holds the database lock already); reads expect any transaction. Built with the arguments
    of :class:`~chat_memory.backends.sql.rows.ConversationRows`."""

    def reads_once(self, body: Callable[..., Any], args: Sequence[Any]) -> bool:
        """Whether the read ``body(connection, *args)`` (one of this class's) runs a single
        statement, which SQLite runs atomically without BEGIN (see ``read_options``)."""
        name = getattr(body, "__name__", "")
        if name in ("find_events", "find_tool_events"):  # (cid, [event_ids,] tool_call_ids)
            # counted without iterating: the body still has to read the ids
            id_lists = args[1:]
            return all(isinstance(ids, Collection) for ids in id_lists) and (
                sum(len(ids) for ids in id_lists) <= KEYS_PER_QUERY
            )
        return name in _ONE_STATEMENT_READS

    # -- schema ------------------------------------------------------------------------------

    def ensure_schema(self, connection: sa.Connection) -> None:
        """Create or check and migrate the tables, under the schema lock (a write transaction)."""
        lock_schema(connection, self.tables.meta.name)
        ensure_schema(connection, self.tables)

    # -- reads -------------------------------------------------------------------------------

    def load(self, connection: sa.Connection, cid: str) -> Snapshot:
        """The conversation's row and, unless the window cached for it is still valid, its
        window rows, in one statement (see :meth:`_read_window`)."""
        found = self._read_window(connection, cid, conversation_key(cid), True)
        return Snapshot.empty(cid) if found is None else found[1]

    # -- writes ------------------------------------------------------------------------------

    def _locked(
        self, connection: sa.Connection, cid: str, *, window: bool
    ) -> tuple[LockedRow, Snapshot]:
        """Lock the conversation's row (created at version 0 when missing) and, with ``window``,
        read its window. On SQLite, whose write transactions hold the database lock from
        ``BEGIN IMMEDIATE``, that is one statement; elsewhere ``SELECT … FOR UPDATE`` comes
        first and the window is read after it, so that it sees every write committed before
        the lock was granted (a join locked in one statement would not: PostgreSQL rechecks
        only the locked row). Without ``window`` the snapshot is empty. Either way the
        window rows are read only when the window cached for the conversation no longer
        holds (see :meth:`_read_window`): on SQLite the one statement then returns the row
        alone; elsewhere the locked row is compared with the cached window's validator."""
        key = conversation_key(cid)
        if window and connection.dialect.name == "sqlite":
            found = self._read_window(connection, cid, key, True)
            if found is not None:
                return locked_row(found[0]), found[1]
        else:
            rows = self.driver.rows(connection, self.sql.state_for_update, {"b_key": key})
            if rows:
                state = rows[0]
                locked = locked_row(state)
                if not window:
                    return locked, Snapshot.empty(cid)
                if not locked.version:  # no event was ever written
                    return locked, self._snapshot(cid, state, Window())
                held = self.windows.get(cid, validator_of(state))
                if held is not None:
                    return locked, self._snapshot(cid, state, held)
                # read after the lock: the rows as the last writer committed them
                found = self._read_window(connection, cid, key, False)
                if found is not None:
                    return locked, found[1]
        return self._new_row(connection, cid, key), Snapshot.empty(cid)

    def _new_row(self, connection: sa.Connection, cid: str, key: str) -> LockedRow:
        """Insert the conversation's row at version 0 (locked until the transaction ends), in
        its scope, unless an erasure guards it (see :meth:`LifecycleOperations.new_row`)."""
        now = utc_now()
        ref = self.life.new_row(connection, cid, key, now)
        return LockedRow(ref, 0, 0, 0, self._driver_time(connection, now))

    def _locked_with_ids(
        self, connection: sa.Connection, cid: str, batch: list[Event]
    ) -> tuple[LockedRow, dict[str, Event]]:
        """On SQLite (the write transaction holds the lock since BEGIN): the row, and the
        batch's events already in the window by id, in one statement (see :meth:`_locked`)."""
        key = conversation_key(cid)
        wanted = {e.id for e in batch}
        rows = self.driver.rows(
            connection,
            self.sql.ids_of_writer,
            {"b_key": key, "b_keys": sorted({id_key(i) for i in wanted})},
        )
        if not rows:
            return self._new_row(connection, cid, key), {}
        # by position: id, version, last_seq, archived_count, archived, body
        found = {
            e.id: e
            for e in self._events(row[4:] for row in rows if row[5] is not None)
            if e.id in wanted and not e.archived and e.type is not EventType.SUMMARY
        }
        return LockedRow(*rows[0][:4]), found

    def _bump(self, connection: sa.Connection, row: LockedRow) -> datetime:
        """The append's one UPDATE of the conversation's row: its version and last seq; the
        time it gave ``updated_at``."""
        now = utc_now()
        self.driver.run(
            connection,
            self.sql.bump_row,
            {
                "b_ref": row.ref,
                "b_last_seq": row.last_seq,
                "b_version": row.version,
                "b_now": now,
            },
        )
        return now

    def _checked(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        check: ToolPairCheck,
        window: Window | None,
    ) -> list[Event]:
        """The batch ``check`` returns, given the stored events it needs (see
        :class:`~chat_memory.backends.base.ChecksToolPairs`), inside the append's transaction
        with the row locked: from the ``window`` just read when it holds them all, else by
        the ``event_key`` and ``call_key`` indexes (window and archive)."""
        found = found_in_window(batch, window) if window is not None else None
        if found is None:
            found = self.find_events(connection, cid, tool_event_ids(batch), tool_call_ids(batch))
        return check(found)

    def _appended(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        check: ToolPairCheck | None = None,
    ) -> tuple[LockedRow, Snapshot, bool]:
        """Lock the row, read the window, run ``check`` (if given) and insert the batch's
        events not stored yet (the check, the id check and the insert are one atomic step
        under the lock). Returns the row as the append leaves it, the snapshot right after the
        append (its window as a read of the rows would return it), and whether the row's
        UPDATE is still to be written: the caller writes it, alone or with a compaction's
        changes, and stages the window for the cache (:meth:`_remember_written`)."""
        locked, before = self._locked(connection, cid, window=True)
        window = before.window
        if check is not None:
            batch = self._checked(connection, cid, batch, check, window)
        fresh = unstored(batch, (*window.pinned, *window.active))
        if batch and not fresh:
            return locked, before, False
        numbered = number(fresh, locked.last_seq)
        rows = self._event_rows(locked.ref, numbered) if fresh else []
        if rows:
            self.driver.insert_many(connection, self.sql.insert_events, rows)
        after = replace(locked, version=locked.version + 1, last_seq=locked.last_seq + len(fresh))
        if any(e.type is EventType.SYSTEM for e in numbered):
            # a system event may supersede an older pin: rare, so read the result back (the
            # window read is staged for the cache: see _read_window)
            self._bump(connection, after)
            self._unpin_superseded(connection, locked.ref)
            found = self._read_window(connection, cid, conversation_key(cid), False)
            snapshot = Snapshot.empty(cid) if found is None else found[1]
            return replace(after, archived_count=snapshot.archived_count), snapshot, False
        return (
            after,
            replace(
                before,
                version=after.version,
                last_seq=after.last_seq,
                window=Window(
                    pinned=window.pinned,
                    summary=window.summary,
                    active=(*window.active, *as_stored(numbered, rows)),
                ),
            ),
            True,
        )

    def append(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        check: ToolPairCheck | None = None,
    ) -> Snapshot:
        """Append ``batch`` (idempotent per event id) and return the snapshot right after it;
        ``check``: the engine's tool-pair check, run inside (see :meth:`_checked`)."""
        row, snapshot, unwritten = self._appended(connection, cid, batch, check)
        if unwritten:
            now = self._bump(connection, row)
            self._remember_written(connection, cid, row, now, snapshot.window)
        return snapshot

    def append_without_window(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        check: ToolPairCheck | None = None,
    ) -> list[Event]:
        """Append ``batch`` like :meth:`append` (idempotent per event id against the window, under
        the row lock) and return the stored copy of each of its events, without reading the
        window: the batch's ids are looked up by the ``event_key`` index, and so are the
        stored events ``check`` needs (see :meth:`_checked`)."""
        if connection.dialect.name == "sqlite" and len(batch) <= KEYS_PER_QUERY:
            locked, before = self._locked_with_ids(connection, cid, batch)
        else:
            locked, _ = self._locked(connection, cid, window=False)
            before = (
                self._window_events_by_id(connection, locked.ref, [e.id for e in batch])
                if locked.version
                else {}
            )
        if check is not None:
            # a conversation created by this transaction holds nothing to look up
            batch = (
                self._checked(connection, cid, batch, check, None) if locked.version else check([])
            )
        fresh = [e for e in unstored(batch, ()) if e.id not in before]
        if batch and not fresh:
            return [before[e.id] for e in batch]
        numbered = number(fresh, locked.last_seq)
        if fresh:
            self.driver.insert_many(
                connection, self.sql.insert_events, self._event_rows(locked.ref, numbered)
            )
        self._bump(
            connection,
            replace(locked, version=locked.version + 1, last_seq=locked.last_seq + len(fresh)),
        )
        if any(e.type is EventType.SYSTEM for e in fresh):
            self._unpin_superseded(connection, locked.ref)
        stored = {e.id: e for e in numbered}
        return [before.get(e.id) or stored[e.id] for e in batch]

    def append_compacting(
        self,
        connection: sa.Connection,
        cid: str,
        batch: list[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        """Append (after ``check``, if given: see :meth:`_checked`), then apply the planner's
        plan in the same transaction: the row stays locked since the append, so the
        compare-and-swap cannot lose; the append's and the compaction's changes of the row
        are one UPDATE."""
        row, snapshot, unwritten = self._appended(connection, cid, batch, check)
        plan = planner(snapshot)
        applied = plan is not None and plan.expected_version == row.version
        if plan is not None and applied:
            now, summary = self._compact(connection, row, plan)
            self._remember_written(
                connection,
                cid,
                replace(row, version=row.version + 1),
                now,
                compacted(snapshot.window, plan, summary),
            )
        elif unwritten:
            now = self._bump(connection, row)
            self._remember_written(connection, cid, row, now, snapshot.window)
        return snapshot, applied

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
