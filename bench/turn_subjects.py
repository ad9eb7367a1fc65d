"""The agent-loop turn on each subject of ``bench/bench_turn.py``, and the counters it reads.

A turn is what an agent loop does with its memory once per model call: add the user message,
read the window, add the tool call, its result and the reply. Every subject builds its history
with that same turn, once per size, into a file that each round copies (``build``/``open``);
the subjects that have no file (memory://, Redis) rebuild it at every ``open``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.peers import EVENTS_PER_TURN, WINDOW_TURNS, AgentsSubject, turn_texts

WINDOW_ITEMS = WINDOW_TURNS * EVENTS_PER_TURN
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def durability(journal_mode: Any, synchronous: Any) -> str:
    """``WAL + NORMAL`` from what ``PRAGMA journal_mode`` and ``PRAGMA synchronous`` return."""
    return f"{str(journal_mode).upper()} + {SYNCHRONOUS.get(int(synchronous), synchronous)}"


def agent_turn(memory: Any, cid: str, i: int) -> int:
    """One turn on a ``ChatMemory``; returns how many events the window it read holds."""
    from chat_memory import Event

    question, args, result, answer = turn_texts(i)
    call = f"c{uuid.uuid4().hex[:12]}"
    memory.add(cid, Event.user(question))
    seen = len(memory.window(cid))
    memory.add(
        cid,
        [
            Event.tool_call("get_order", args, call_id=call),
            Event.tool_result(call, result),
            Event.assistant(answer),
        ],
    )
    return seen


def copy_database(source: Path, target: Path) -> None:
    """A closed SQLite database and whatever WAL it left, under a new name."""
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")


class TurnSubject:
    """One memory under the turn. ``build`` makes the history of ``events`` events at
    ``path``; ``open`` starts a round on a copy of it (a subject with no file builds a fresh
    history of ``events`` events there)."""

    name: str
    durability = "-"
    fsyncs = False  # True when every commit waits for the disk

    def build(self, path: Path, events: int) -> None:
        raise NotImplementedError

    def open(self, path: Path, events: int) -> None:
        raise NotImplementedError

    def turn(self, i: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class OursSubject(TurnSubject):
    """chat-memory: ``turn_window`` with ``max_turns=10``, the rest at its defaults unless
    ``ratio`` sets ``compact_to_ratio``. ``url_for`` gives the store URL for a database path
    (memory:// and Redis ignore it and build the history at every ``open``)."""

    def __init__(self, name: str, url_for: Callable[[Path], str], ratio: float | None = None):
        self.name = name
        self.url_for = url_for
        self.ratio = ratio
        self.has_file = url_for(Path("x")).startswith("sqlite")
        self.store: Any = None

    def _start(self, path: Path) -> None:
        from chat_memory import ChatMemory, MemoryConfig, open_store

        ratio = {} if self.ratio is None else {"compact_to_ratio": self.ratio}
        config = MemoryConfig(compaction_strategy="turn_window", max_turns=WINDOW_TURNS, **ratio)
        self.store = open_store(self.url_for(path))
        self.memory = ChatMemory(self.store, config)

    def _fill(self, events: int) -> None:
        for i in range(events // EVENTS_PER_TURN):
            agent_turn(self.memory, "bench", -i - 1)

    def build(self, path: Path, events: int) -> None:
        if self.has_file:
            self._start(path)
            self._fill(events)
            self.close()

    def open(self, path: Path, events: int) -> None:
        self._start(path)
        if not self.has_file:
            self._fill(events)
        engine = getattr(self.store, "engine", None)
        if engine is not None and self.durability == "-":
            with engine.connect() as connection:
                mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
                sync = connection.exec_driver_sql("PRAGMA synchronous").scalar()
            self.durability = durability(mode, sync)

    def turn(self, i: int) -> int:
        return agent_turn(self.memory, "bench", i)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class AgentsTurnSubject(AgentsSubject, TurnSubject):
    """The OpenAI Agents SDK's ``SQLiteSession``: ``add_items`` the user message,
    ``get_items(limit=40)``, ``add_items`` the call, its output and the reply. At its default
    the session puts each connection in WAL and leaves ``synchronous`` at SQLite's FULL (an
    fsync per commit); ``equal`` also sets ``synchronous=NORMAL`` where the session configures
    each connection it opens (``_configure_connection``: one per worker thread)."""

    session: Any  # an SQLiteSession; its items' type is the SDK's union of TypedDicts

    def __init__(self, equal: bool) -> None:
        self.equal = equal
        self.fsyncs = not equal
        self.name = "Agents SDK SQLiteSession · " + ("WAL + NORMAL" if equal else "default")

    def _session(self, path: Path) -> Any:
        from agents import SQLiteSession

        if not self.equal:
            return SQLiteSession("bench", db_path=path)

        class NormalSyncSession(SQLiteSession):
            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute("PRAGMA synchronous=NORMAL")

        return NormalSyncSession("bench", db_path=path)

    def build(self, path: Path, events: int) -> None:
        self.open(path, events)
        items = [item for i in range(events // EVENTS_PER_TURN) for item in self._items(-i - 1)]
        if items:
            self.loop.run_until_complete(self.session.add_items(items))
        self.close()

    def open(self, path: Path, events: int) -> None:
        self.session = self._session(path)
        self.loop = asyncio.new_event_loop()

    def turn(self, i: int) -> int:
        items = self._items(i)
        run = self.loop.run_until_complete
        run(self.session.add_items(items[:1]))
        seen = len(run(self.session.get_items(limit=WINDOW_ITEMS)))
        run(self.session.add_items(items[1:]))
        return seen

    def close(self) -> None:
        connections = list(getattr(self.session, "_connections", ()))
        if connections and self.durability == "-":
            conn = connections[0]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            self.durability = durability(mode, conn.execute("PRAGMA synchronous").fetchone()[0])
        self.session.close()
        self.loop.close()


class RawSQLiteSubject(TurnSubject):
    """The floor: ``sqlite3`` and ``json`` doing the same work, in WAL with ``synchronous`` at
    NORMAL (or FULL: what an fsync per commit costs on this disk), one transaction per add,
    the last 40 rows read back and parsed."""

    def __init__(self, synchronous: str = "NORMAL") -> None:
        self.synchronous = synchronous
        self.fsyncs = synchronous == "FULL"
        self.name = f"raw sqlite3 + json · WAL + {synchronous}"
        self.items = AgentsSubject()._items  # the SDK's items: the same JSON to store

    def open(self, path: Path, events: int) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        self.db.execute(f"PRAGMA synchronous={self.synchronous}")
        self.durability = durability(mode, self.db.execute("PRAGMA synchronous").fetchone()[0])
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS events"
            " (cid TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (cid, seq))"
        )
        last = self.db.execute("SELECT max(seq) FROM events WHERE cid = 'bench'").fetchone()[0]
        self.seq = last or 0

    def build(self, path: Path, events: int) -> None:
        self.open(path, events)
        for i in range(events // EVENTS_PER_TURN):
            self.turn(-i - 1)
        self.close()

    def _add(self, items: list[dict[str, Any]]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        rows = []
        for item in items:
            self.seq += 1
            rows.append(("bench", self.seq, json.dumps(item)))
        self.db.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
        self.db.execute("COMMIT")

    def turn(self, i: int) -> int:
        items = self.items(i)
        self._add(items[:1])
        rows = self.db.execute(
            "SELECT body FROM events WHERE cid = 'bench' ORDER BY seq DESC LIMIT ?",
            (WINDOW_ITEMS,),
        ).fetchall()
        seen = len([json.loads(body) for (body,) in reversed(rows)])
        self._add(items[1:])
        return seen

    def close(self) -> None:
        self.db.close()


class _CountingValidator:
    """Stands in for ``Event.__pydantic_validator__``: counts JSON parses by any path."""

    def __init__(self, validator: Any, counts: Counter[str]) -> None:
        self._validator = validator
        self._counts = counts

    def validate_json(self, *args: Any, **options: Any) -> Any:
        self._counts["Event JSON parses"] += 1
        return self._validator.validate_json(*args, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._validator, name)


@contextlib.contextmanager
def counting() -> Iterator[Counter[str]]:
    """Count, while inside: SQL statements sent to a cursor (``before_cursor_execute``, BEGIN
    apart), COMMITs and transactions of every SQLAlchemy engine; ``Event.from_json`` calls and
    Event JSON parses by any path; Redis commands and round trips of every sync redis-py
    client (a pipeline is one round trip of several commands)."""
    import sqlalchemy as sa

    from chat_memory import Event

    counts: Counter[str] = Counter()

    def on_execute(*args: Any) -> None:
        statement = str(args[2]).lstrip().upper()
        counts["BEGIN" if statement.startswith("BEGIN") else "SQL statements"] += 1

    listeners: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", on_execute),
        ("begin", lambda *_: counts.update(["transactions"])),
        ("commit", lambda *_: counts.update(["COMMITs"])),
        ("rollback", lambda *_: counts.update(["ROLLBACKs"])),
    ]
    for name, listener in listeners:
        sa.event.listen(sa.engine.Engine, name, listener)
    from_json = Event.__dict__["from_json"]
    validator = Event.__pydantic_validator__

    def counted_from_json(cls: type[Event], data: str | bytes) -> Event:
        counts["Event.from_json"] += 1
        return from_json.__func__(cls, data)  # type: ignore[no-any-return]  # classmethod

    Event.from_json = classmethod(counted_from_json)  # type: ignore[method-assign,assignment]  # restored below
    Event.__pydantic_validator__ = _CountingValidator(validator, counts)  # type: ignore[assignment]  # restored below
    restore_redis = _count_redis(counts)
    try:
        yield counts
    finally:
        restore_redis()
        Event.__pydantic_validator__ = validator
        Event.from_json = from_json  # type: ignore[method-assign]  # the original classmethod
        for name, listener in listeners:
            sa.event.remove(sa.engine.Engine, name, listener)


def _count_redis(counts: Counter[str]) -> Callable[[], None]:
    try:
        import redis
        import redis.client
    except ImportError:
        return lambda: None
    execute: Callable[..., Any] = redis.Redis.execute_command
    pipeline_execute: Callable[..., Any] = redis.client.Pipeline.execute

    def counted_execute(self: Any, *args: Any, **options: Any) -> Any:
        counts.update(["Redis commands", "Redis round trips", f"Redis {args[0]}"])
        return execute(self, *args, **options)

    def counted_pipeline(self: Any, *args: Any, **options: Any) -> Any:
        names = [f"Redis {command[0][0]}" for command in self.command_stack]
        counts.update(names)
        counts.update(["Redis round trips"])
        counts["Redis commands"] += len(names)
        return pipeline_execute(self, *args, **options)

    redis.Redis.execute_command = counted_execute  # type: ignore[method-assign]  # restored below
    redis.client.Pipeline.execute = counted_pipeline  # type: ignore[method-assign]  # restored below

    def restore() -> None:
        redis.Redis.execute_command = execute  # type: ignore[method-assign]
        redis.client.Pipeline.execute = pipeline_execute  # type: ignore[method-assign]

    return restore
