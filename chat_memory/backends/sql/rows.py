"""What every part of :class:`~chat_memory.backends.sql.operations.SQLOperations` stands on:
:class:`ConversationRows`, the tables, statements, driver and window cache of one table
prefix, and what every transaction body does with a conversation's rows: find its row by
key, turn events into rows and rows back into events, read the window (through the window
cache, window_cache.py), stage the window a write leaves for the cache, write a fork
timeline row.

The parts of :class:`SQLOperations` each extend it, as s3/'s parts extend
:class:`~chat_memory.backends.s3.objects.ConversationObjects`: lookups.py (finds by key,
search, history, the retracted events, the conversations; retraction and clearing),
compaction.py (compactions, the archive trim, the compaction records and error) and
operations.py, which composes them and holds the hot path: the window read and the appends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ...envelopes import reads_back_alike
from ...errors import ConfigurationError
from ...events import Event, EventType, Window
from ...search import search_text
from ..base import Snapshot
from ..bookkeeping import replaced
from ..failures import stored_data
from .driver import Driver
from .lifecycle import LifecycleOperations
from .schema import build_tables, id_key, stored_search_text
from .statements import Statements, timeline_params
from .window_cache import Validator, WindowCache

TOOL_TYPES = (EventType.TOOL_CALL.value, EventType.TOOL_RESULT.value)
# plain strings: a window row's type is compared with them for every row read
_SYSTEM, _SUMMARY = EventType.SYSTEM.value, EventType.SUMMARY.value
#: Keys per ``IN (…)`` of a look-up by id: far below every database's limit on bound
#: parameters (999 on SQLite before 3.32), however large the batch.
KEYS_PER_QUERY = 500
# the columns of the window statements of the cache, by position (see Statements)
_ID, _VERSION, _LAST_SEQ, _ARCHIVED_COUNT, _ERROR, _FAILURES, _CREATED, _UPDATED = range(8)
_KIND, _BODY, _HELD = 8, 9, 10


def conversation_key(conversation_id: str) -> str:
    """The row key of a conversation: the SHA-256 of its id, so any id is an exact, bounded key."""
    return hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()


def utc_now() -> datetime:
    """The time a write gives ``updated_at`` (and the other times it stores)."""
    return datetime.now(timezone.utc)


def chunks(keys: list[str]) -> list[list[str]]:
    """``keys`` in lists of at most :data:`KEYS_PER_QUERY`, one per ``IN (…)``."""
    return [keys[i : i + KEYS_PER_QUERY] for i in range(0, len(keys), KEYS_PER_QUERY)]


@dataclass(frozen=True)
class LockedRow:
    """The conversation's row as the write transaction that locked it knows it."""

    ref: int
    version: int
    last_seq: int
    archived_count: int
    #: the row's ``created_at`` as the driver returns it (part of a cached window's
    #: validator: see window_cache.py); None where the transaction did not read it
    created_at: Any = None


def locked_row(state: Sequence[Any]) -> LockedRow:
    """The :class:`LockedRow` of a row read by a state statement (see :data:`_ID`…)."""
    return LockedRow(
        state[_ID], state[_VERSION], state[_LAST_SEQ], state[_ARCHIVED_COUNT], state[_CREATED]
    )


def validator_of(state: Sequence[Any]) -> Validator:
    """The validator of a window cached for the row read by a state statement."""
    return (state[_ID], state[_CREATED], state[_UPDATED], state[_VERSION])


def as_stored(numbered: Sequence[Event], rows: Sequence[dict[str, Any]]) -> list[Event]:
    """The events ``rows`` were written from (:meth:`ConversationRows._event_rows`) as reading
    the rows returns them: each event itself when its JSON reads back alike (every event an
    ``add()`` stores: the engine made it so), else its envelope read back (an event given to
    the store directly, holding a tuple where JSON gives a list…). What the window cache keeps
    is then what a read of the rows would give."""
    return [
        event if reads_back_alike(event) else Event.from_json(row["body"])
        for event, row in zip(numbered, rows)
    ]


class ConversationRows:
    """The tables of one prefix, the statements
    :class:`~chat_memory.backends.sql.statements.Statements` built once for them (constructing
    a statement costs more than SQLite takes to run it), and the steps on a conversation's
    rows that every transaction body of
    :class:`~chat_memory.backends.sql.operations.SQLOperations` shares."""

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
                    if stored.type.value in TOOL_TYPES and stored.tool_call_id is not None
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

    # -- the window and its cache ------------------------------------------------------------

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
                if validator_of(state) == entry.validator:
                    return state, self._snapshot(cid, state, entry.window)
                # the database took the values for equal where Python does not: read it all
                rows = self.driver.rows(connection, self.sql.window_with_state, {"b_key": key})
        if not rows:
            return None
        state = rows[0]
        window = self._window_of(rows)
        self.windows.remember(connection, cid, validator_of(state), window)
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
        self, connection: sa.Connection, cid: str, row: LockedRow, now: datetime, window: Window
    ) -> None:
        """Stage ``window`` as the conversation's window once this transaction commits: the
        window of ``row`` as this write left it (its version, and ``now`` the time the
        write gave ``updated_at``)."""
        if row.created_at is not None:
            validator = (row.ref, row.created_at, self._driver_time(connection, now), row.version)
            self.windows.remember(connection, cid, validator, window)

    # -- the fork timeline -------------------------------------------------------------------

    def _add_timeline(self, connection: sa.Connection, ref: int, entry: dict[str, Any]) -> None:
        """Write ``entry`` as the conversation's next fork timeline row, in the transaction of
        the change it records (docs/lifecycle.md, "Fork"; read by sql/transfer.py)."""
        self.driver.run(connection, self.sql.add_timeline, timeline_params(ref, entry))
