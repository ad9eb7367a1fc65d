"""How :class:`~chat_memory.backends.sql.operations.SQLOperations` compacts a conversation:
:class:`CompactionOperations`, the compare-and-swap of a plan on the locked row
(:meth:`~CompactionOperations.apply`, and the compaction half of an appending compaction,
``SQLOperations.append_compacting``), the archive trim under the cap, the compaction records
(kept with an amortised trim: :func:`trims_records`) and the compaction error on the row.

A compaction archives the active rows up to the plan's seq, stores the summary, trims the
archive, writes the conversation's row once and keeps the record, without reading anything
back (the row is locked); the window it leaves is derived from the one the plan was made on
(:func:`compacted`) and staged for the window cache.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ...events import Event, Window
from ..base import CompactionPlan
from ..bookkeeping import number
from ..timeline import compaction_entry, dropped_pin_entry
from .rows import (
    ConversationRows,
    LockedRow,
    as_stored,
    conversation_key,
    locked_row,
    utc_now,
    validator_of,
)
from .schema import stored_message

#: About one compaction in this many trims the conversation's compaction records (see
#: :meth:`CompactionOperations._keep_record`): the others write the record alone.
RECORD_TRIM_EVERY = 8


def trims_records(ref: int, version: int) -> bool:
    """Whether the compaction that takes conversation row ``ref`` to ``version`` trims its
    records: a hash, so that any pattern of writes trims about once in
    :data:`RECORD_TRIM_EVERY` compactions (a rule on the version alone, such as every 8th,
    could be missed forever by a conversation that compacts every 8th write)."""
    digest = hashlib.blake2b(f"{ref}:{version}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % RECORD_TRIM_EVERY == 0


def compacted(window: Window, plan: CompactionPlan, summary: Event | None) -> Window:
    """``window`` after :meth:`CompactionOperations._compact` applied ``plan`` to its rows: the
    active events up to ``archive_through_seq`` archived, ``summary`` (the one stored, if
    any) in place of the current one; the pins stay (the archive trim deletes archived rows
    only)."""
    through = plan.archive_through_seq
    return Window(
        pinned=window.pinned,
        summary=window.summary if summary is None else summary,
        active=tuple(e for e in window.active if (e.seq or 0) > through),
    )


class CompactionOperations(ConversationRows):
    """The compaction bodies of :class:`~chat_memory.backends.sql.operations.SQLOperations`:
    each takes a connection inside a write transaction its caller opened (``compactions``,
    a read, any transaction)."""

    def apply(self, connection: sa.Connection, cid: str, plan: CompactionPlan) -> bool:
        """A compaction as a compare-and-swap on the version, checked on the locked row; False
        (nothing changed) when another write got there first."""
        found = self.driver.rows(
            connection, self.sql.state_for_update, {"b_key": conversation_key(cid)}
        )
        if not found:
            return False
        state = found[0]
        row = locked_row(state)
        if row.version != plan.expected_version:
            return False
        # the window the plan was made on, if cached: the window after it is derived
        window = self.windows.get(cid, validator_of(state))
        now, summary = self._compact(connection, row, plan)
        if window is not None:
            after = replace(row, version=row.version + 1)
            self._remember_written(connection, cid, after, now, compacted(window, plan, summary))
        return True

    def _compact(
        self, connection: sa.Connection, row: LockedRow, plan: CompactionPlan
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
            stored = as_stored(summary, rows)[0]
        archived_count = row.archived_count + archived
        if cap is not None and archived_count > cap:
            dropped, pins = self._trim(connection, ref, archived_count - cap)
            archived_count -= dropped
            for pin in pins:  # a superseded pin deleted: a fork of a window it was in refuses
                self._add_timeline(connection, ref, dropped_pin_entry(pin))
        now = utc_now()
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

    # -- the records and the error ------------------------------------------------------------

    def compactions(self, connection: sa.Connection, cid: str) -> list[dict[str, Any]]:
        """The newest :attr:`compaction_records_kept` records, oldest first (the table may hold
        a few older ones between two trims: see :meth:`_keep_record`)."""
        newest = self.driver.rows(connection, self.sql.records, {"b_key": conversation_key(cid)})
        with self._stored():
            return [json.loads(record) for (record,) in reversed(newest)]

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
