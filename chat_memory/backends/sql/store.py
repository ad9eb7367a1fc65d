"""SQLStore: conversations in SQL tables through SQLAlchemy Core (SQLite, PostgreSQL, MySQL)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import urlsplit

import sqlalchemy as sa

from ...errors import ConcurrencyError, ConfigurationError
from ...events import Event, EventType, Window
from ...pins import superseded
from ...search import RECALL_MARK, MatchMode, SearchQuery, SearchResult, search_events, search_text
from ..base import (
    Backoff,
    CompactionPlan,
    CompactsWhileAppending,
    ConnectionField,
    Snapshot,
    Store,
    StoreNode,
    StoreOption,
    check_conversation_id,
    number,
    split_appended,
    tool_call_fragment,
    unstored,
)
from .engine import Transactions, create_store_engine, is_conflict, prepare_sqlite_engine, split_url_options
from .schema import (
    DEFAULT_TABLE_PREFIX,
    Tables,
    build_tables,
    ensure_schema,
    pushes_down,
    stored_message,
    stored_search_text,
)

T = TypeVar("T")
_NOT_ACTIVE = (EventType.SYSTEM.value, EventType.SUMMARY.value)


def conversation_key(conversation_id: str) -> str:
    """The row key of a conversation: the SHA-256 of its id, so any id is an exact, bounded key."""
    return hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class SQLStore(CompactsWhileAppending, Store):
    """Conversations in SQL tables, for the embedded SQLite default and for database servers.

    >>> store = SQLStore("sqlite:///chat.db")                      # or open_store("sqlite:///chat.db")
    >>> store = SQLStore("postgresql+psycopg://user@host/db?table_prefix=bot_")
    >>> store = SQLStore(engine)                                   # a ready engine stays the caller's

    Appends and compactions are single transactions that lock the conversation's row
    (``SELECT … FOR UPDATE``; ``BEGIN IMMEDIATE`` on SQLite); a compaction is a compare-and-swap
    on the version. Conflicts reported by the database are retried with bounded backoff and
    end in :class:`ConcurrencyError`. Search runs in the database as ``LIKE`` over stored
    case-folded text.
    """

    schemes = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "mssql", "oracle")
    url_options = (StoreOption("table_prefix"), StoreOption("max_archived_events", int, minimum=0, nullable=True))
    passes_query_to_driver = True
    node = StoreNode(
        "jdbcChatMemory",
        "JDBC Chat Memory",
        "Chat memory in a SQL database (PostgreSQL, MySQL, SQLite…).",
        "jdbc",
        fields=(
            ConnectionField(
                "url",
                "Database URL",
                "SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db or sqlite:///chat.db.",
                required=True,
                placeholder="postgresql+psycopg://user:password@localhost:5432/chat",
            ),
            ConnectionField(
                "tablePrefix",
                "Table prefix",
                "Prefix of the tables chat-memory creates.",
                default=DEFAULT_TABLE_PREFIX,
                advanced=True,
            ),
        ),
        order=10,
    )
    default_max_archived_events = None

    def __init__(
        self,
        engine: sa.Engine | str,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        max_archived_events: int | None = None,
        retry: Backoff | None = None,
        **engine_options: Any,
    ) -> None:
        if isinstance(engine, str):
            url, options = split_url_options(engine, {option.name for option in self.url_options})
            self._owns_engine = True
            self.engine = create_store_engine(url, **engine_options)
        elif isinstance(engine, sa.Engine):
            if engine_options:
                raise ConfigurationError(f"engine options ({', '.join(engine_options)}) apply only when given a URL")
            self._owns_engine = False
            self.engine = engine
            if engine.dialect.name == "sqlite":
                prepare_sqlite_engine(engine, wal=engine.url.database not in (None, "", ":memory:"))
        else:
            raise ConfigurationError(f"engine ({engine!r}) must be a SQLAlchemy URL or Engine")
        if max_archived_events is not None and (isinstance(max_archived_events, bool) or max_archived_events < 0):
            raise ConfigurationError(f"max_archived_events ({max_archived_events!r}) must be 0 or more, or None")
        self.default_max_archived_events = max_archived_events
        self.tables: Tables = build_tables(table_prefix)
        self.retry = retry or Backoff()
        self._tx = Transactions(self.engine)
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._build_statements()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLStore:
        """Open a store from a SQLAlchemy URL; ``table_prefix`` and ``max_archived_events`` may
        be given in the query string (other query options go to the driver). ``postgres://``
        and ``postgresql://`` mean PostgreSQL through psycopg 3."""
        settings, _ = cls.url_settings(urlsplit(url).query, options)
        return cls(url, **{**options, **settings})

    @classmethod
    def extra_for(cls, scheme: str) -> str | None:
        return "postgres" if scheme.split("+", 1)[0] in ("postgresql", "postgres") else None

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        prefix = connection.get("tablePrefix")
        return connection["url"], ({"table_prefix": prefix} if prefix else {})

    def close(self) -> None:
        """Dispose of the engine's connections when this store created the engine."""
        if self._owns_engine:
            self.engine.dispose()

    # -- plumbing ----------------------------------------------------------------------------

    def _ready(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if not self._schema_ready:
                def create() -> None:
                    with self._tx.write() as connection:
                        self._tx.lock_schema(connection, self.tables.meta.name)
                        ensure_schema(connection, self.tables)
                self._retrying(create, "creating the schema")
                self._schema_ready = True

    def _retrying(self, operation: Callable[[], T], what: str) -> T:
        """Run a whole transaction again while the database reports a lost race."""
        last: BaseException | None = None
        for delay in self.retry.delays():
            try:
                return operation()
            except sa.exc.DBAPIError as exc:
                if not is_conflict(exc):
                    raise
                last = exc
            time.sleep(delay)
        raise ConcurrencyError(f"{what} lost {self.retry.attempts} races with concurrent writers; giving up") from last

    def _conversation_row(self, connection: sa.Connection, cid: str, *, lock: bool) -> Any:
        query = self._row_for_update if lock else self._row
        return connection.execute(query, {"b_key": conversation_key(cid)}).first()

    def _build_statements(self) -> None:
        """The statements of every turn, built once: constructing a statement costs more than
        SQLite takes to run it."""
        conversations, events = self.tables.conversations, self.tables.events
        by_key = conversations.c.conversation_key == sa.bindparam("b_key")
        self._row = sa.select(conversations).where(by_key)
        self._bump = (
            conversations.update()
            .where(conversations.c.id == sa.bindparam("b_ref"))
            .values(last_seq=sa.bindparam("b_last_seq"), version=sa.bindparam("b_version"), updated_at=sa.bindparam("b_now"))
        )
        self._swap = (
            conversations.update()
            .where(by_key, conversations.c.version == sa.bindparam("expected_version"))
            .values(version=conversations.c.version + 1, compaction_error=None, updated_at=sa.bindparam("b_now"))
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
        self._row_for_update = self._row.with_for_update()
        joined = conversations.outerjoin(
            events, sa.and_(events.c.conversation_ref == conversations.c.id, events.c.archived == sa.false())
        )
        self._window = (
            sa.select(
                conversations.c.version,
                conversations.c.last_seq,
                conversations.c.archived_count,
                conversations.c.compaction_error,
                events.c.type,
                events.c.body,
            )
            .select_from(joined)
            .where(by_key)
            .order_by(events.c.seq)
        )

    def window_query(self, conversation_id: str) -> sa.Select[Any]:
        """The one statement that reads a conversation's row and its window rows (archived =
        false, by seq): consistent even under READ COMMITTED, and served by the
        (conversation, archived, seq) index, so it never visits the archive."""
        return self._window.params(b_key=conversation_key(conversation_id))

    def _read_window(self, connection: sa.Connection, cid: str) -> Snapshot:
        rows = connection.execute(self._window, {"b_key": conversation_key(cid)}).all()
        if not rows:
            return Snapshot.empty(cid)
        pinned: list[Event] = []
        active: list[Event] = []
        summary: Event | None = None
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
        )

    def _event_rows(self, ref: int, events: Sequence[Event], first_seq: int) -> list[dict[str, Any]]:
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
                }
            )
        return rows

    # -- writes ------------------------------------------------------------------------------

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        self._ready()
        batch = list(events)

        def attempt() -> Snapshot:
            with self._tx.write() as connection:
                return self._append_in(connection, cid, batch)

        return self._retrying(attempt, f"append to conversation {cid!r}")

    def append_compacting(
        self, conversation_id: str, events: Sequence[Event], planner: Callable[[Snapshot], CompactionPlan | None]
    ) -> tuple[Snapshot, bool]:
        cid = check_conversation_id(conversation_id)
        self._ready()
        batch = list(events)

        def attempt() -> tuple[Snapshot, bool]:
            with self._tx.write() as connection:
                snapshot = self._append_in(connection, cid, batch)
                plan = planner(snapshot)
                # the row stays locked since the append, so the compare-and-swap cannot lose
                return snapshot, plan is not None and self._apply_in(connection, cid, plan)

        return self._retrying(attempt, f"append to conversation {cid!r}")

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        self._ready()

        def attempt() -> bool:
            with self._tx.write() as connection:
                return self._apply_in(connection, cid, plan)

        return self._retrying(attempt, f"compaction of conversation {cid!r}")

    def _append_in(self, connection: sa.Connection, cid: str, batch: list[Event]) -> Snapshot:
        """The statements of an append, inside the caller's write transaction."""
        conversations = self.tables.conversations
        row = self._conversation_row(connection, cid, lock=True)
        now = _now()
        if row is None:
            ref = connection.execute(
                conversations.insert().values(
                    conversation_key=conversation_key(cid),
                    conversation_id=cid,
                    version=0,
                    last_seq=0,
                    archived_count=0,
                    created_at=now,
                    updated_at=now,
                )
            ).inserted_primary_key[0]
            last_seq, version = 0, 0
            before = Snapshot.empty(cid)
        else:
            ref, last_seq, version = row.id, row.last_seq, row.version
            # read under the row lock: the id check and the insert are one atomic step
            before = self._read_window(connection, cid)
        window = before.window
        fresh = unstored(batch, (*window.pinned, *window.active))
        if batch and not fresh:
            return before
        if fresh:
            connection.execute(self.tables.events.insert(), self._event_rows(ref, fresh, last_seq + 1))
        connection.execute(self._bump, {"b_ref": ref, "b_last_seq": last_seq + len(fresh), "b_version": version + 1, "b_now": now})
        pinned, real = split_appended(number(fresh, last_seq))
        if pinned:  # a system event may supersede an older pin: rare, so read the result back
            self._unpin_superseded(connection, ref)
            return self._read_window(connection, cid)
        return replace(
            before,
            version=version + 1,
            last_seq=last_seq + len(fresh),
            window=Window(pinned=(*window.pinned, *pinned), summary=window.summary, active=(*window.active, *real)),
        )

    def _unpin_superseded(self, connection: sa.Connection, ref: int) -> None:
        """Archive the pinned events a newer one with the same pin key supersedes (the
        conversation's row is locked by the caller)."""
        conversations, events = self.tables.conversations, self.tables.events
        pinned_rows = sa.and_(
            events.c.conversation_ref == ref, events.c.archived == sa.false(), events.c.type == EventType.SYSTEM.value
        )
        pinned = [Event.from_json(body) for body in connection.execute(sa.select(events.c.body).where(pinned_rows)).scalars()]
        gone = [e.seq for e in superseded(pinned)]
        if not gone:
            return
        connection.execute(events.update().where(pinned_rows, events.c.seq.in_(gone)).values(archived=True))
        connection.execute(
            conversations.update()
            .where(conversations.c.id == ref)
            .values(archived_count=conversations.c.archived_count + len(gone))
        )

    def _apply_in(self, connection: sa.Connection, cid: str, plan: CompactionPlan) -> bool:
        """The statements of a compaction, inside the caller's write transaction."""
        conversations, events = self.tables.conversations, self.tables.events
        cap = self.archive_cap(plan)
        swapped = connection.execute(
            self._swap,
            {"b_key": conversation_key(cid), "expected_version": plan.expected_version, "b_now": _now()},
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
                .where(of_conversation, events.c.archived == sa.false(), events.c.type == EventType.SUMMARY.value)
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
        connection.execute(compactions.insert().values(conversation_ref=ref, record=json.dumps(record)))
        oldest_kept = connection.execute(
            sa.select(compactions.c.id)
            .where(compactions.c.conversation_ref == ref)
            .order_by(compactions.c.id.desc())
            .offset(self.compaction_records_kept - 1)
            .limit(1)
        ).scalar_one_or_none()
        if oldest_kept is not None:
            connection.execute(
                compactions.delete().where(compactions.c.conversation_ref == ref, compactions.c.id < oldest_kept)
            )

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        cid = check_conversation_id(conversation_id)
        self._ready()
        conversations, compactions = self.tables.conversations, self.tables.compactions
        with self._tx.read() as connection:
            rows = connection.execute(
                sa.select(compactions.c.record)
                .join(conversations, conversations.c.id == compactions.c.conversation_ref)
                .where(conversations.c.conversation_key == conversation_key(cid))
                .order_by(compactions.c.id)
            ).scalars()
            return [json.loads(record) for record in rows]

    def _trim(self, connection: sa.Connection, ref: int, excess: int) -> int:
        """Delete the ``excess`` oldest archived events; returns how many were deleted."""
        events = self.tables.events
        archive = sa.and_(events.c.conversation_ref == ref, events.c.archived == sa.true())
        through = connection.execute(
            sa.select(events.c.seq).where(archive).order_by(events.c.seq).offset(excess - 1).limit(1)
        ).scalar_one_or_none()
        if through is None:
            return 0
        return connection.execute(events.delete().where(archive, events.c.seq <= through)).rowcount

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        self._ready()
        conversations = self.tables.conversations

        def attempt() -> None:
            with self._tx.write() as connection:
                connection.execute(
                    conversations.update()
                    .where(conversations.c.conversation_key == conversation_key(cid))
                    .values(compaction_error=stored_message(message))
                )

        self._retrying(attempt, f"recording the compaction error of {cid!r}")

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        self._ready()
        conversations, events = self.tables.conversations, self.tables.events

        def attempt() -> None:
            with self._tx.write() as connection:
                row = self._conversation_row(connection, cid, lock=True)
                if row is not None:
                    connection.execute(events.delete().where(events.c.conversation_ref == row.id))
                    compactions = self.tables.compactions
                    connection.execute(compactions.delete().where(compactions.c.conversation_ref == row.id))
                    connection.execute(conversations.delete().where(conversations.c.id == row.id))

        self._retrying(attempt, f"clearing conversation {cid!r}")

    # -- reads -------------------------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        self._ready()
        with self._tx.read() as connection:
            return self._read_window(connection, cid)

    def history(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)
        self._ready()
        conversations, events = self.tables.conversations, self.tables.events
        query = (
            sa.select(events.c.archived, events.c.body)
            .join(conversations, events.c.conversation_ref == conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .order_by(events.c.seq)
        )
        with self._tx.read() as connection:
            rows = connection.execute(query).all()
        return [Event.from_json(row.body).model_copy(update={"archived": bool(row.archived)}) for row in rows]

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """One query in the database over the conversation's rows: ``body LIKE`` the ids'
        ``"tool_call_id":<id>`` fragment of the envelope (no column to index without a schema
        change; the engine asks only for late results of archived calls), then an exact
        check on the few rows it returns."""
        cid = check_conversation_id(conversation_id)
        self._ready()
        wanted = set(tool_call_ids)
        fragments = [tool_call_fragment(i) for i in wanted]
        if not wanted or not all(pushes_down(f) for f in fragments):
            return super().find_tool_events(cid, wanted)
        conversations, events = self.tables.conversations, self.tables.events
        ref = (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .scalar_subquery()
        )
        query = (
            sa.select(events.c.archived, events.c.body)
            .where(
                events.c.conversation_ref == ref,
                events.c.type.in_((EventType.TOOL_CALL.value, EventType.TOOL_RESULT.value)),
                sa.or_(*(events.c.body.contains(f, autoescape=True) for f in fragments)),
            )
            .order_by(events.c.seq)
        )
        with self._tx.read() as connection:
            rows = connection.execute(query).all()
        found = [Event.from_json(row.body).model_copy(update={"archived": bool(row.archived)}) for row in rows]
        return [e for e in found if e.tool_call_id in wanted]

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        cid = check_conversation_id(conversation_id)
        self._ready()
        if not all(pushes_down(term) for term in query.terms):
            return search_events(self.history(cid), query)
        conversations, events = self.tables.conversations, self.tables.events
        likes = [events.c.search_text.contains(term, autoescape=True) for term in query.terms]
        matched = sa.or_(*likes) if query.match_mode is MatchMode.ANY else sa.and_(*likes)
        ref = (
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == conversation_key(cid))
            .scalar_subquery()
        )
        where: tuple[Any, ...] = (events.c.conversation_ref == ref, events.c.search_text.is_not(None), matched)
        if not query.include_recall_tools:
            where += (sa.not_(events.c.search_text.startswith(RECALL_MARK, autoescape=True)),)
        with self._tx.read() as connection:
            total = connection.execute(sa.select(sa.func.count()).select_from(events).where(*where)).scalar_one()
            rows = []
            if total > query.offset:
                rows = connection.execute(
                    sa.select(events.c.archived, events.c.body)
                    .where(*where)
                    .order_by(events.c.seq)
                    .offset(query.offset)
                    .limit(min(query.limit, total - query.offset))  # a huge page size must not overflow LIMIT
                ).all()
        found = [Event.from_json(row.body).model_copy(update={"archived": bool(row.archived)}) for row in rows]
        return SearchResult(events=found, total=total)

    def conversations(self) -> list[str]:
        self._ready()
        with self._tx.read() as connection:
            ids = connection.execute(sa.select(self.tables.conversations.c.conversation_id)).scalars().all()
        return sorted(ids)
