"""The SQL store's operations, written once: each is a transaction body that takes a SQLAlchemy
sync :class:`~sqlalchemy.Connection` inside a transaction the caller opened.

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

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ...errors import ConfigurationError
from ...event_checks import found_in_window, tool_call_ids, tool_event_ids
from ...events import Event, EventType, Window
from ...lifecycle.keys import stored_key
from ...pins import superseded
from ...search import RECALL_MARK, MatchMode, SearchQuery, SearchResult, search_text
from ..base import CompactionPlan, Snapshot, ToolPairCheck
from ..bookkeeping import (
    number,
    replaced,
    retracted_copy,
    retraction_targets,
    unstored,
)
from ..failures import stored_data
from ..timeline import compaction_entry, dropped_pin_entry, retraction_entry
from .connections import lock_schema
from .driver import Driver
from .lifecycle import LifecycleOperations
from .schema import build_tables, id_key, stored_message, stored_search_text
from .schema_migrations import ensure_schema
from .statements import Statements, timeline_params
from .window_cache import Validator, WindowCache

_TOOL_TYPES = (EventType.TOOL_CALL.value, EventType.TOOL_RESULT.value)
# plain strings: a window row's type is compared with them for every row read
_SYSTEM, _SUMMARY = EventType.SYSTEM.value, EventType.SUMMARY.value
#: Keys per ``IN (…)`` of a look-up by id: far below every database's limit on bound
#: parameters (999 on SQLite before 3.32), however large the batch.
_KEYS_PER_QUERY = 500
#: About one compaction in this many trims the conversation's compaction records (see
#: :meth:`SQLOperations._keep_record`): the others write the record alone.
RECORD_TRIM_EVERY = 8
# the columns of the window statements of the cache, by position (see Statements)
_ID, _VERSION, _LAST_SEQ, _ARCHIVED_COUNT, _ERROR, _FAILURES, _CREATED, _UPDATED = range(8)
_KIND, _BODY, _HELD = 8, 9, 10
#: The reads that are one statement whatever their arguments.
_ONE_STATEMENT_READS = frozenset({"load", "history", "retracted", "compactions", "conversations"})


def trims_records(ref: int, version: int) -> bool:
    """Whether the compaction that takes conversation row ``ref`` to ``version`` trims its
    records: a hash, so that any pattern of writes trims about once in
    :data:`RECORD_TRIM_EVERY` compactions (a rule on the version alone, such as every 8th,
    could be missed forever by a conversation that compacts every 8th write)."""
    digest = hashlib.blake2b(f"{ref}:{version}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % RECORD_TRIM_EVERY == 0


@dataclass(frozen=True)
class _Row:
    """The conversation's row as the write transaction that locked it knows it."""

    ref: int
    version: int
    last_seq: int
    archived_count: int
    #: the row's ``created_at`` as the driver returns it (part of a cached window's
    #: validator: see window_cache.py); None where the transaction did not read it
    created_at: Any = None


def _locked_row(state: Sequence[Any]) -> _Row:
    """The :class:`_Row` of a row read by a state statement (see :data:`_ID`…)."""
    return _Row(
        state[_ID], state[_VERSION], state[_LAST_SEQ], state[_ARCHIVED_COUNT], state[_CREATED]
    )


def _validator(state: Sequence[Any]) -> Validator:
    """The validator of a window cached for the row read by a state statement."""
    return (state[_ID], state[_CREATED], state[_UPDATED], state[_VERSION])


def _as_stored(numbered: Sequence[Event], rows: Sequence[dict[str, Any]]) -> list[Event]:
    """The events ``rows`` were written from (:meth:`SQLOperations._event_rows`) as reading
    the rows returns them: each event itself, or, when it holds metadata or arguments (whose
    JSON may read back otherwise: a tuple as a list), its envelope read back. What the window
    cache keeps is then what a read of the rows would give."""
    return [
        Event.from_json(row["body"]) if event.metadata or event.arguments else event
        for event, row in zip(numbered, rows)
    ]


def _compacted(window: Window, plan: CompactionPlan, summary: Event | None) -> Window:
    """``window`` after :meth:`SQLOperations._compact` applied ``plan`` to its rows: the
    active events up to ``archive_through_seq`` archived, ``summary`` (the one stored, if
    any) in place of the current one; the pins stay (the archive trim deletes archived rows
    only)."""
    through = plan.archive_through_seq
    return Window(
        pinned=window.pinned,
        summary=window.summary if summary is None else summary,
        active=tuple(e for e in window.active if (e.seq or 0) > through),
    )


def conversation_key(conversation_id: str) -> str:
    """The row key of a conversation: the SHA-256 of its id, so any id is an exact, bounded key."""
    return hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class SQLOperations:
    """Every store operation over the tables of one prefix, running the statements
    :class:`~chat_memory.backends.sql.statements.Statements` built once (constructing a
    statement costs more than SQLite takes to run it). Writes expect a write transaction (the conversation's row is
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
        self.sql = Statements(tables, compaction_records_kept=compaction_records_kept)
        #: The lifecycle's transaction bodies (metadata, listing, sweep, erasure, guards).
        self.life = LifecycleOperations(tables, self.sql.new_conversation)
        #: Runs the statements of the hot path on the driver's cursor (see driver.py).
        self.driver = Driver()
        #: The one statement that reads a conversation's row and its window rows.
        self.window = self.sql.window
        #: The last window of each recent conversation, read again only when its row changed.
        self.windows = WindowCache()
        # the bind processor of a DateTime column, by dialect: what the driver stores
        self._time_binds: dict[str, Callable[[Any], Any] | None] = {}

    def _ref(self, cid: str) -> Any:
        conversations = self.tables.conversations
        return (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .scalar_subquery()
        )

    def _conversation_row(self, connection: sa.Connection, cid: str, *, lock: bool) -> Any:
        query = self.sql.row_for_update if lock else self.sql.row
        return connection.execute(query, {"b_key": conversation_key(cid)}).first()

    def _event_rows(self, ref: int, numbered: Sequence[Event]) -> list[dict[str, Any]]:
        """The rows of ``numbered``, the stored copies (see :func:`number`): each serialised
        once, and the copy the caller returns keeps its envelope."""
        rows = []
        for stored in numbered:
            rows.append(
                {
                    "conversation_ref": ref,
                    "seq": stored.seq,
                    "type": stored.type.value,
                    "archived": False,
                    "tokens": stored.tokens,
                    "created_at": stored.created_at,
                    "search_text": stored_search_text(search_text(stored)),
                    "body": stored.to_json(),
                    "event_key": id_key(stored.id),
                    "call_key": id_key(stored.tool_call_id)
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
            return [replaced(Event.from_json(row[1]), {"archived": bool(row[0])}) for row in rows]

    def reads_once(self, body: Callable[..., Any], args: Sequence[Any]) -> bool:
        """Whether the read ``body(connection, *args)`` (one of this class's) runs a single
        statement, which SQLite runs atomically without BEGIN (see ``read_options``)."""
        name = getattr(body, "__name__", "")
        if name in ("find_events", "find_tool_events"):  # (cid, [event_ids,] tool_call_ids)
            # counted without iterating: the body still has to read the ids
            id_lists = args[1:]
            return all(isinstance(ids, Collection) for ids in id_lists) and (
                sum(len(ids) for ids in id_lists) <= _KEYS_PER_QUERY
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

    def _read_window(
        self, connection: sa.Connection, cid: str, key: str, cached: bool
    ) -> tuple[Sequence[Any], Snapshot] | None:
        """The row's state and the conversation's snapshot, None when it has no row. With
        ``cached``, and a window cached for ``cid``, the statement reads the window rows only
        if the row no longer holds that window's validator (the window is then taken from
        the cache); a window read is kept (:meth:`WindowCache.remember`). The row fields of
        the snapshot always come from the row just read."""
        entry = self.windows.peek(cid) if cached else None
        if entry is None:
            rows = self.driver.rows(connection, self.sql.window_with_state, {"b_key": key})
        else:
            ref, created, updated, version = entry.validator
            rows = self.driver.rows(
                connection,
                self.sql.window_unless_cached,
                {
                    "b_key": key,
                    "b_ref": ref,
                    "b_version": version,
                    "b_created": created,
                    "b_updated": updated,
                },
            )
            if rows and rows[0][_HELD]:
                state = rows[0]
                if _validator(state) == entry.validator:
                    return state, self._snapshot(cid, state, entry.window)
                # the database took the values for equal where Python does not: read it all
                rows = self.driver.rows(connection, self.sql.window_with_state, {"b_key": key})
        if not rows:
            return None
        state = rows[0]
        window = self._window_of(rows)
        self.windows.remember(connection, cid, _validator(state), window)
        return state, self._snapshot(cid, state, window)

    def _window_of(self, rows: Sequence[Any]) -> Window:
        """The window of the rows of a window statement (type and body by position)."""
        pinned: list[Event] = []
        active: list[Event] = []
        summary: Event | None = None
        parse = Event.from_json  # its own cache returns a window read again without parsing
        with self._stored():
            for row in rows:
                data = row[_BODY]
                if data is None:
                    continue
                stored = parse(data)
                kind = row[_KIND]
                if kind == _SYSTEM:
                    pinned.append(stored)
                elif kind == _SUMMARY:
                    summary = stored
                else:
                    active.append(stored)
        return Window(pinned=tuple(pinned), summary=summary, active=tuple(active))

    @staticmethod
    def _snapshot(cid: str, state: Sequence[Any], window: Window) -> Snapshot:
        """The snapshot of the row read by a state statement, with ``window``."""
        return Snapshot(
            conversation_id=cid,
            version=state[_VERSION],
            last_seq=state[_LAST_SEQ],
            window=window,
            archived_count=state[_ARCHIVED_COUNT],
            compaction_error=state[_ERROR],
            compaction_failures=state[_FAILURES],
        )

    def history(self, connection: sa.Connection, cid: str) -> list[Event]:
        return self._events(
            self.driver.rows(connection, self.sql.history, {"b_key": conversation_key(cid)})
        )

    def find_tool_events(
        self, connection: sa.Connection, cid: str, tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the ``(conversation, call_key)`` index, archived rows included; only the rows of
        the ids asked for are read (each checked against its body)."""
        return self.find_events(connection, cid, (), tool_call_ids)

    def _events_found(
        self, connection: sa.Connection, cid: str, event_ids: set[str], tool_call_ids: set[str]
    ) -> list[Event]:
        """:meth:`find_events` in one statement (the ids fit in one ``IN`` list)."""
        rows = self.driver.rows(
            connection,
            self.sql.events_by_keys,
            {
                "b_key": conversation_key(cid),
                "b_event_keys": sorted({id_key(i) for i in event_ids}),
                "b_call_keys": sorted({id_key(i) for i in tool_call_ids}),
            },
        )
        # each row is checked against its body, as the two look-ups of find_events check it;
        # a tool event may come from both halves
        found = {
            e.seq: e
            for e in self._events(rows)
            if (e.id in event_ids and not e.archived and e.type is not EventType.SUMMARY)
            or (e.type.value in _TOOL_TYPES and e.tool_call_id in tool_call_ids)
        }
        return sorted(found.values(), key=lambda e: e.seq or 0)

    def find_events(
        self,
        connection: sa.Connection,
        cid: str,
        event_ids: Collection[str],
        tool_call_ids: Collection[str],
    ) -> list[Event]:
        """The window events with one of ``event_ids`` and the tool events (archived included)
        with one of ``tool_call_ids``, by the ``event_key`` and ``call_key`` indexes."""
        wanted_events, wanted_calls = set(event_ids), set(tool_call_ids)
        if not wanted_events and not wanted_calls:
            return []
        if len(wanted_events) + len(wanted_calls) <= _KEYS_PER_QUERY:
            return self._events_found(connection, cid, wanted_events, wanted_calls)
        ref = self._conversation_row(connection, cid, lock=False)
        if ref is None:
            return []
        found = {
            e.seq: e for e in self._window_events_by_id(connection, ref.id, event_ids).values()
        }
        events = self.tables.events
        wanted = set(tool_call_ids)
        for keys in _chunks(sorted({id_key(i) for i in wanted})):
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
        wanted = set(event_ids)
        found: dict[str, Event] = {}
        for keys in _chunks(sorted({id_key(i) for i in wanted})):
            # the archived flag and the type are checked here, not in SQL: a condition on
            # ``archived`` lets a planner without statistics prefer the window index, a scan
            rows = self.driver.rows(
                connection, self.sql.by_event_key, {"b_ref": ref, "b_keys": keys}
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
        rows = self.driver.rows(connection, self.sql.retracted, {"b_key": conversation_key(cid)})
        with self._stored():
            return [retracted_copy(Event.from_json(body)) for (body,) in rows]

    def compactions(self, connection: sa.Connection, cid: str) -> list[dict[str, Any]]:
        """The newest :attr:`compaction_records_kept` records, oldest first (the table may hold
        a few older ones between two trims: see :meth:`_keep_record`)."""
        newest = self.driver.rows(connection, self.sql.records, {"b_key": conversation_key(cid)})
        with self._stored():
            return [json.loads(record) for (record,) in reversed(newest)]

    def conversations(self, connection: sa.Connection) -> list[str]:
        """Every stored key, scoped ones marked so that they may be passed back (stored_key)."""
        return sorted(
            stored_key(cid)
            for cid in connection.execute(
                sa.select(self.tables.conversations.c.conversation_id)
            ).scalars()
        )

    # -- writes ------------------------------------------------------------------------------

    def _locked(
        self, connection: sa.Connection, cid: str, *, window: bool
    ) -> tuple[_Row, Snapshot]:
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
                return _locked_row(found[0]), found[1]
        else:
            rows = self.driver.rows(connection, self.sql.state_for_update, {"b_key": key})
            if rows:
                state = rows[0]
                locked = _locked_row(state)
                if not window:
                    return locked, Snapshot.empty(cid)
                if not locked.version:  # no event was ever written
                    return locked, self._snapshot(cid, state, Window())
                held = self.windows.get(cid, _validator(state))
                if held is not None:
                    return locked, self._snapshot(cid, state, held)
                # read after the lock: the rows as the last writer committed them
                found = self._read_window(connection, cid, key, False)
                if found is not None:
                    return locked, found[1]
        return self._new_row(connection, cid, key), Snapshot.empty(cid)

    def _new_row(self, connection: sa.Connection, cid: str, key: str) -> _Row:
        """Insert the conversation's row at version 0 (locked until the transaction ends), in
        its scope, unless an erasure guards it (see :meth:`LifecycleOperations.new_row`)."""
        now = _now()
        ref = self.life.new_row(connection, cid, key, now)
        return _Row(ref, 0, 0, 0, self._driver_time(connection, now))

    def _driver_time(self, connection: sa.Connection, moment: datetime) -> Any:
        """``moment`` as the driver stores it in a DateTime column (and so returns it): a
        string on SQLite, the datetime itself on PostgreSQL."""
        dialect = connection.dialect
        if dialect.name not in self._time_binds:
            column_type = self.tables.conversations.c.updated_at.type
            self._time_binds[dialect.name] = column_type.dialect_impl(dialect).bind_processor(
                dialect
            )
        process = self._time_binds[dialect.name]
        return moment if process is None else process(moment)

    def _remember_written(
        self, connection: sa.Connection, cid: str, row: _Row, now: datetime, window: Window
    ) -> None:
        """Stage ``window`` as the conversation's window once this transaction commits: the
        window of ``row`` as this write left it (its version, and ``now`` the time the
        write gave ``updated_at``)."""
        if row.created_at is not None:
            validator = (row.ref, row.created_at, self._driver_time(connection, now), row.version)
            self.windows.remember(connection, cid, validator, window)

    def _locked_with_ids(
        self, connection: sa.Connection, cid: str, batch: list[Event]
    ) -> tuple[_Row, dict[str, Event]]:
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
        return _Row(*rows[0][:4]), found

    def _bump(self, connection: sa.Connection, row: _Row) -> datetime:
        """The append's one UPDATE of the conversation's row: its version and last seq; the
        time it gave ``updated_at``."""
        now = _now()
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
    ) -> tuple[_Row, Snapshot, bool]:
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
                    active=(*window.active, *_as_stored(numbered, rows)),
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
        if connection.dialect.name == "sqlite" and len(batch) <= _KEYS_PER_QUERY:
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
                _compacted(snapshot.window, plan, summary),
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

    def apply(self, connection: sa.Connection, cid: str, plan: CompactionPlan) -> bool:
        """A compaction as a compare-and-swap on the version, checked on the locked row; False
        (nothing changed) when another write got there first."""
        found = self.driver.rows(
            connection, self.sql.state_for_update, {"b_key": conversation_key(cid)}
        )
        if not found or found[0][_VERSION] != plan.expected_version:
            return False
        state = found[0]
        row = _locked_row(state)
        # the window the plan was made on, if cached: the window after it is derived
        window = self.windows.get(cid, _validator(state))
        now, summary = self._compact(connection, row, plan)
        if window is not None:
            after = replace(row, version=row.version + 1)
            self._remember_written(connection, cid, after, now, _compacted(window, plan, summary))
        return True

    def _compact(
        self, connection: sa.Connection, row: _Row, plan: CompactionPlan
    ) -> tuple[datetime, Event | None]:
        """Apply ``plan`` to the locked ``row`` (whose version it expects): archive, store the
        summary, trim the archive, write the row once (the next version, the counters, no
        compaction error) and keep the record. Nothing is read back: the row is locked.
        Returns the time written as ``updated_at`` and the summary stored (as its row reads
        back), if any."""
        cap = (
            plan.max_archived_events
            if plan.max_archived_events is not None
            else self.max_archived_events
        )
        ref, last_seq = row.ref, row.last_seq
        run = self.driver.run
        archived = run(
            connection,
            self.sql.archive_through,
            {"b_ref": ref, "through_seq": plan.archive_through_seq},
        )
        stored: Event | None = None
        if plan.summary is not None:
            archived += run(connection, self.sql.archive_summary, {"b_ref": ref})
            last_seq += 1
            summary = number([plan.summary], row.last_seq)
            rows = self._event_rows(ref, summary)
            self.driver.insert_many(connection, self.sql.insert_events, rows)
            stored = _as_stored(summary, rows)[0]
        archived_count = row.archived_count + archived
        if cap is not None and archived_count > cap:
            dropped, pins = self._trim(connection, ref, archived_count - cap)
            archived_count -= dropped
            for pin in pins:  # a superseded pin deleted: a fork of a window it was in refuses
                self._add_timeline(connection, ref, dropped_pin_entry(pin))
        now = _now()
        values = {
            "b_ref": ref,
            "b_version": row.version + 1,
            "b_last_seq": last_seq,
            "b_archived_count": archived_count,
            "b_now": now,
        }
        if plan.summary is None:
            run(connection, self.sql.compacted, values)
        else:
            run(connection, self.sql.compacted_with_summary, {**values, "b_summary_seq": last_seq})
        if plan.record is not None:
            self._keep_record(connection, ref, row.version + 1, plan.record)
        self._add_timeline(
            connection,
            ref,
            compaction_entry(
                last_seq, plan.archive_through_seq, None if plan.summary is None else last_seq
            ),
        )
        return now, stored

    def _add_timeline(self, connection: sa.Connection, ref: int, entry: dict[str, Any]) -> None:
        """Write ``entry`` as the conversation's next fork timeline row, in the transaction of
        the change it records (docs/lifecycle.md, "Fork"; read by sql/transfer.py)."""
        self.driver.run(connection, self.sql.add_timeline, timeline_params(ref, entry))

    def _keep_record(
        self, connection: sa.Connection, ref: int, version: int, record: dict[str, Any]
    ) -> None:
        """Insert a compaction record and, about once in :data:`RECORD_TRIM_EVERY` writes, drop
        the conversation's records beyond the newest :attr:`compaction_records_kept`.
        :meth:`compactions` reads only the newest ones, so what it returns keeps the bound;
        the table holds a few more between two trims. Which writes trim is a hash of the row
        and the version: deterministic, yet no regular pattern of writes can avoid it."""
        run = self.driver.run
        run(connection, self.sql.insert_record, {"b_ref": ref, "b_record": json.dumps(record)})
        if not trims_records(ref, version):
            return
        oldest_kept = self.driver.rows(connection, self.sql.oldest_kept_record, {"b_ref": ref})
        if oldest_kept:
            run(connection, self.sql.drop_records, {"b_ref": ref, "b_id": oldest_kept[0][0]})

    def _trim(self, connection: sa.Connection, ref: int, excess: int) -> tuple[int, list[Event]]:
        """Delete the ``excess`` oldest archived events; returns how many were deleted and the
        system events (superseded pins) among them."""
        oldest = self.driver.rows(
            connection, self.sql.oldest_archived, {"b_ref": ref, "b_count": excess}
        )
        if not oldest:
            return 0, []
        deleted = self.driver.run(
            connection, self.sql.drop_archived, {"b_ref": ref, "b_seq": oldest[-1][0]}
        )
        with self._stored():
            pins = [Event.from_json(body) for _, body in oldest if body is not None]
        return deleted, pins

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
        for keys in _chunks(sorted({id_key(i) for i in wanted})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == row.id, events.c.event_key.in_(keys)
                )
            )
            pool.update((e.seq or 0, e) for e in self._events(rows) if e.id in wanted)
        call_ids = {
            e.tool_call_id for e in pool.values() if e.type.value in _TOOL_TYPES and e.tool_call_id
        }
        for keys in _chunks(sorted({id_key(i) for i in call_ids})):
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
        self._add_timeline(
            connection, row.id, retraction_entry(row.last_seq, (e.seq or 0 for e in targets))
        )
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
        self.windows.discard(cid)  # no longer valid (the version moved on): memory back
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
            timeline = self.tables.timeline
            connection.execute(timeline.delete().where(timeline.c.conversation_ref == row.id))
            connection.execute(conversations.delete().where(conversations.c.id == row.id))
            self.windows.discard(cid)  # no longer valid (the row is gone): memory back


def _chunks(keys: list[str]) -> list[list[str]]:
    return [keys[i : i + _KEYS_PER_QUERY] for i in range(0, len(keys), _KEYS_PER_QUERY)]
