"""SQLStore: conversations in SQL tables through SQLAlchemy Core (SQLite, PostgreSQL, MySQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from chat_memory.backoff import Backoff

from ...errors import ConfigurationError
from ...events import Event
from ...search import SearchQuery, SearchResult
from ..base import (
    AppendsWithoutWindow,
    ChecksToolPairs,
    CompactionPlan,
    CompactsWhileAppending,
    Retracts,
    Snapshot,
    Store,
    ToolPairCheck,
    check_conversation_id,
)
from ..declarations import ConnectionField, StoreNode, StoreOption
from .connections import (
    SQL_DRIVER_ERRORS,
    Attempts,
    Transactions,
    adopt_engine,
    create_store_engine,
    is_conflict,
    is_schema_conflict,
    shown_url,
    split_url_options,
    url_query,
)
from .forks import SQLForksAndDumps
from .keeps_lifecycle import SQLLifecycle
from .operations import SQLOperations, conversation_key
from .schema import DEFAULT_TABLE_PREFIX, Tables

T = TypeVar("T")


class SQLStore(
    SQLLifecycle,
    SQLForksAndDumps,
    AppendsWithoutWindow,
    ChecksToolPairs,
    CompactsWhileAppending,
    Retracts,
    Store,
):
    """Conversations in SQL tables, for the embedded SQLite default and for database servers.

    >>> store = SQLStore("sqlite:///chat.db")                      # or open_store("sqlite:///chat.db")
    >>> store = SQLStore("postgresql+psycopg://user@host/db?table_prefix=bot_")
    >>> store = SQLStore(engine)                                   # a ready engine stays the caller's

    Appends and compactions are single transactions that lock the conversation's row
    (``SELECT … FOR UPDATE``; ``BEGIN IMMEDIATE`` on SQLite); a compaction is a compare-and-swap
    on the version. Conflicts reported by the database are retried with bounded backoff and
    end in :class:`ConcurrencyError`. Search runs in the database as ``LIKE`` over stored
    case-folded text. Events are indexed by id and by ``tool_call_id`` (schema version 4), so
    :meth:`append_without_window`, :meth:`find_events` and :meth:`find_tool_events` read the
    rows of the ids asked for, not the window. The last window of each recent conversation is
    kept in memory and validated by the conversation's row at every read and append, so its
    rows are read and parsed again only when a write (of any process) changed them.
    """

    schemes = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "mssql", "oracle")
    async_twin = "chat_memory.backends.sql.aio:AsyncSQLStore"
    long_term = "chat_memory.longterm.sql:SQLFiles"
    url_options = (
        StoreOption("table_prefix"),
        StoreOption("max_archived_events", int, minimum=0, nullable=True),
    )
    passes_query_to_driver = True
    driver_errors = SQL_DRIVER_ERRORS
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
                placeholder="postgresql+psycopg://user@localhost:5432/chat",
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
            adopt_engine(engine, engine_options)
            self._owns_engine = False
            self.engine = engine
        else:
            raise ConfigurationError(f"engine ({engine!r}) must be a SQLAlchemy URL or Engine")
        self.ops = SQLOperations(
            table_prefix,
            max_archived_events=max_archived_events,
            compaction_records_kept=self.compaction_records_kept,
        )
        self.tables: Tables = self.ops.tables
        self.default_max_archived_events = self.ops.max_archived_events
        self.retry = retry or Backoff()
        self._tx = Transactions(self.engine, keeps_connections=self._owns_engine)
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLStore:
        """Open a store from a SQLAlchemy URL; ``table_prefix`` and ``max_archived_events`` may
        be given in the query string (other query options go to the driver). ``postgres://``
        and ``postgresql://`` mean PostgreSQL through psycopg 3."""
        settings, _ = cls.url_settings(url_query(url), options)
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

    def __repr__(self) -> str:
        return f"SQLStore({shown_url(self.engine)}, table_prefix={self.tables.prefix!r})"

    # -- plumbing ----------------------------------------------------------------------------

    def _ready(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if not self._schema_ready:
                self._write(
                    self.ops.ensure_schema, what="creating the schema", races=is_schema_conflict
                )
                self._schema_ready = True

    def _retrying(
        self,
        operation: Callable[[], T],
        what: str,
        races: Callable[[BaseException], bool] = is_conflict,
    ) -> T:
        """Run a whole transaction again while the database reports a lost race (``races``
        tells which errors are)."""
        attempts = Attempts(self.retry, what)
        for delay in attempts:
            try:
                return operation()
            except sa.exc.DBAPIError as exc:
                if not races(exc):
                    raise
                attempts.last = exc
            time.sleep(delay)
        raise AssertionError("unreachable: Attempts raises when it runs out")

    def _write(
        self,
        body: Callable[..., T],
        *args: Any,
        what: str,
        races: Callable[[BaseException], bool] = is_conflict,
    ) -> T:
        """Run an operation of :class:`SQLOperations` in a write transaction, retried; the
        windows it staged for the cache are kept once it has committed."""
        windows = self.ops.windows

        def attempt() -> T:
            with self._tx.write() as connection, windows.staging(connection) as staged:
                result = body(connection, *args)
            windows.publish(staged)
            return result

        return self._retrying(attempt, what, races)

    def _read(self, body: Callable[..., T], *args: Any) -> T:
        self._ready()
        with self._tx.read(one_statement=self.ops.reads_once(body, args)) as connection:
            return body(connection, *args)

    def window_query(self, conversation_id: str) -> sa.Select[Any]:
        """The one statement that reads a conversation's row and its window rows (archived =
        false, by seq): consistent even under READ COMMITTED, and served by the
        (conversation, archived, seq) index, so it never visits the archive."""
        return self.ops.window.params(b_key=conversation_key(conversation_id))

    # -- writes ------------------------------------------------------------------------------

    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        """Append in one transaction (``check``, if given, inside it: see
        :class:`~chat_memory.backends.base.ChecksToolPairs`)."""
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(
            self.ops.append, cid, list(events), check, what=f"append to conversation {cid!r}"
        )

    def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        """Append in one transaction, looking the batch's ids up by index (see
        :meth:`SQLOperations.append_without_window`); the stored copies of ``events``."""
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(
            self.ops.append_without_window,
            cid,
            list(events),
            check,
            what=f"append to conversation {cid!r}",
        )

    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(
            self.ops.append_compacting,
            cid,
            list(events),
            planner,
            check,
            what=f"append to conversation {cid!r}",
        )

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(self.ops.apply, cid, plan, what=f"compaction of conversation {cid!r}")

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        self._ready()
        self._write(
            self.ops.record_compaction_error,
            cid,
            message,
            what=f"recording the compaction error of {cid!r}",
        )

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """One transaction: the rows move to the retracted table (see :meth:`SQLOperations.retract`)."""
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(
            self.ops.retract, cid, list(event_ids), what=f"retraction in conversation {cid!r}"
        )

    def retracted(self, conversation_id: str) -> list[Event]:
        return self._read(self.ops.retracted, check_conversation_id(conversation_id))

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        self._ready()
        self._write(self.ops.clear, cid, what=f"clearing conversation {cid!r}")

    # -- reads -------------------------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        return self._read(self.ops.load, check_conversation_id(conversation_id))

    def history(self, conversation_id: str) -> list[Event]:
        return self._read(self.ops.history, check_conversation_id(conversation_id))

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        """The rows of the ids asked for, by the ``call_key`` index (see
        :meth:`SQLOperations.find_tool_events`)."""
        return self._read(
            self.ops.find_tool_events, check_conversation_id(conversation_id), tool_call_ids
        )

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """By the ``event_key`` and ``call_key`` indexes (see :meth:`SQLOperations.find_events`)."""
        return self._read(
            self.ops.find_events, check_conversation_id(conversation_id), event_ids, tool_call_ids
        )

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        return self._read(self.ops.search, check_conversation_id(conversation_id), query)

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        return self._read(self.ops.compactions, check_conversation_id(conversation_id))

    def conversations(self) -> list[str]:
        return self._read(self.ops.conversations)
