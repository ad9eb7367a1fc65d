"""The look-ups of :class:`~chat_memory.backends.sql.operations.SQLOperations` and its
writes off the hot path: :class:`LookupOperations`, the finds by the ``event_key`` and
``call_key`` indexes (one statement when the ids fit in one ``IN`` list, else in chunks of
:data:`~chat_memory.backends.sql.rows.KEYS_PER_QUERY`), ``conversation_search``'s ``LIKE``
counted and paged in the database, the history, the retracted events and the stored keys;
then retraction (the rows move to the retracted table under the row lock) and clearing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from ...events import Event, EventType
from ...lifecycle.keys import stored_key
from ...search import RECALL_MARK, MatchMode, SearchQuery, SearchResult
from ..bookkeeping import retracted_copy, retraction_targets
from ..timeline import retraction_entry
from .rows import KEYS_PER_QUERY, TOOL_TYPES, ConversationRows, chunks, conversation_key, utc_now
from .schema import id_key, stored_search_text


class LookupOperations(ConversationRows):
    """The look-ups, retraction and clearing of
    :class:`~chat_memory.backends.sql.operations.SQLOperations`: each takes a connection
    inside a transaction its caller opened (a write transaction for ``retract`` and
    ``clear``)."""

    # -- reads -------------------------------------------------------------------------------

    def _ref(self, cid: str) -> Any:
        conversations = self.tables.conversations
        return (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .scalar_subquery()
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
            or (e.type.value in TOOL_TYPES and e.tool_call_id in tool_call_ids)
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
        if len(wanted_events) + len(wanted_calls) <= KEYS_PER_QUERY:
            return self._events_found(connection, cid, wanted_events, wanted_calls)
        ref = self._conversation_row(connection, cid, lock=False)
        if ref is None:
            return []
        found = {
            e.seq: e for e in self._window_events_by_id(connection, ref.id, event_ids).values()
        }
        events = self.tables.events
        wanted = set(tool_call_ids)
        for keys in chunks(sorted({id_key(i) for i in wanted})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == ref.id, events.c.call_key.in_(keys)
                )
            )
            found.update(
                (e.seq, e)
                for e in self._events(rows)
                if e.type.value in TOOL_TYPES and e.tool_call_id in wanted
            )
        return sorted(found.values(), key=lambda e: e.seq or 0)

    def _window_events_by_id(
        self, connection: sa.Connection, ref: int, event_ids: Collection[str]
    ) -> dict[str, Event]:
        """The pinned and active events (never the summary) whose id is one of ``event_ids``, by id."""
        wanted = set(event_ids)
        found: dict[str, Event] = {}
        for keys in chunks(sorted({id_key(i) for i in wanted})):
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

    def conversations(self, connection: sa.Connection) -> list[str]:
        """Every stored key, scoped ones marked so that they may be passed back (stored_key)."""
        return sorted(
            stored_key(cid)
            for cid in connection.execute(
                sa.select(self.tables.conversations.c.conversation_id)
            ).scalars()
        )

    # -- writes: retraction and clearing (under the row lock) ------------------------------

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
        for keys in chunks(sorted({id_key(i) for i in wanted})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == row.id, events.c.event_key.in_(keys)
                )
            )
            pool.update((e.seq or 0, e) for e in self._events(rows) if e.id in wanted)
        call_ids = {
            e.tool_call_id for e in pool.values() if e.type.value in TOOL_TYPES and e.tool_call_id
        }
        for keys in chunks(sorted({id_key(i) for i in call_ids})):
            rows = connection.execute(
                sa.select(events.c.archived, events.c.body).where(
                    events.c.conversation_ref == row.id, events.c.call_key.in_(keys)
                )
            )
            pool.update((e.seq or 0, e) for e in self._events(rows) if e.tool_call_id in call_ids)
        targets = retraction_targets(sorted(pool.values(), key=lambda e: e.seq or 0), wanted)
        if not targets:
            return []
        now = utc_now()
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
        for i in range(0, len(seqs), KEYS_PER_QUERY):
            connection.execute(
                events.delete().where(
                    events.c.conversation_ref == row.id,
                    events.c.seq.in_(seqs[i : i + KEYS_PER_QUERY]),
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
