"""The per-turn workload on chat-memory and on the memories users would pick instead.

Each subject keeps one conversation. ``fill(n)`` loads ``n`` events of history the fastest
way the library offers; ``turn(i)`` does what an agent does once per turn: append a user
message, a tool call, its result and the assistant's reply, then read what the model will
see (the last 10 turns)."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

WINDOW_TURNS = 10
EVENTS_PER_TURN = 4


def turn_texts(i: int) -> tuple[str, dict[str, Any], str, str]:
    return (
        f"Question {i}: where is order {4000 + i} and what did we decide about Bluefin?",
        {"order_id": 4000 + i},
        f'{{"order": {4000 + i}, "status": "shipped", "carrier": "DHL"}}',
        f"Order {4000 + i} shipped with DHL; the Bluefin decision stands.",
    )


class Subject(ABC):
    """One memory implementation under the workload."""

    name: str

    @abstractmethod
    def fill(self, events: int) -> None:
        """Start a fresh conversation holding ``events`` events of history."""

    @abstractmethod
    def turn(self, i: int) -> int:
        """Append one turn and read the window; returns how many messages the window holds."""

    def close(self) -> None:
        """Release files and connections."""


class ChatMemorySubject(Subject):
    """chat-memory with a turn window of 10 on the store a URL names."""

    def __init__(self, name: str, url_factory: Any) -> None:
        self.name = name
        self.url_factory = url_factory
        self.store: Any = None

    def fill(self, events: int) -> None:
        from chat_memory import ChatMemory, Event, MemoryConfig, open_store

        self.close()
        self.store = open_store(self.url_factory())
        self.memory = ChatMemory(
            self.store,
            MemoryConfig(
                compaction_strategy="turn_window", max_turns=WINDOW_TURNS, compact_to_ratio=1.0
            ),
        )
        self.cid = f"bench-{uuid.uuid4().hex}"
        self.Event = Event
        for i in range(events // EVENTS_PER_TURN):
            self._append(-i - 1)
        self._settle()

    def _settle(self) -> None:
        """On PostgreSQL, do what autovacuum does soon after a burst of compactions (each
        leaves dead index entries in the window's range); bench/bench_sql.py shows the cost
        before it as its "cold" column."""
        engine = getattr(self.store, "engine", None)
        if engine is not None and engine.dialect.name == "postgresql":
            import sqlalchemy as sa

            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(sa.text(f'VACUUM ANALYZE "{self.store.tables.events.name}"'))

    def _append(self, i: int) -> None:
        E = self.Event
        question, args, result, answer = turn_texts(i)
        call = f"c{uuid.uuid4().hex[:12]}"
        self.memory.add(
            self.cid,
            [
                E.user(question),
                E.tool_call("get_order", args, call_id=call),
                E.tool_result(call, result),
                E.assistant(answer),
            ],
        )

    def turn(self, i: int) -> int:
        self._append(i)
        return len(self.memory.window(self.cid))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class LangChainSubject(Subject):
    """LangChain ``SQLChatMessageHistory`` on SQLite + ``trim_messages`` to the last 10 turns."""

    name = "LangChain SQLChatMessageHistory"

    def fill(self, events: int) -> None:
        import warnings

        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.dir = tempfile.TemporaryDirectory()
        self.history = SQLChatMessageHistory(
            session_id="bench", connection=f"sqlite:///{self.dir.name}/lc.db"
        )
        batch = []
        for i in range(events // EVENTS_PER_TURN):
            batch += self._messages(-i - 1)
        if batch:
            self.history.add_messages(batch)

    def _messages(self, i: int) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        question, args, result, answer = turn_texts(i)
        call = f"c{uuid.uuid4().hex[:12]}"
        return [
            HumanMessage(question),
            AIMessage("", tool_calls=[{"name": "get_order", "args": args, "id": call}]),
            ToolMessage(result, tool_call_id=call),
            AIMessage(answer),
        ]

    def turn(self, i: int) -> int:
        from langchain_core.messages import trim_messages

        self.history.add_messages(self._messages(i))
        window = trim_messages(
            self.history.messages,
            max_tokens=WINDOW_TURNS * EVENTS_PER_TURN,
            token_counter=len,
            strategy="last",
            start_on="human",
        )
        return len(window)

    def close(self) -> None:
        self.dir.cleanup()


class LlamaIndexSubject(Subject):
    """LlamaIndex ``Memory`` with its ``SQLAlchemyChatStore`` on SQLite (aiosqlite), its
    token limit set to hold about 10 turns."""

    name = "LlamaIndex Memory (SQL store)"

    def fill(self, events: int) -> None:
        from llama_index.core.memory import Memory

        from chat_memory.tokens import default_token_counter

        count = default_token_counter()
        self.dir = tempfile.TemporaryDirectory()
        history = []
        for i in range(events // EVENTS_PER_TURN):
            history += self._messages(-i - 1)
        self.memory = Memory.from_defaults(
            session_id="bench",
            token_limit=1000,  # about 10 turns of this workload
            tokenizer_fn=lambda text: [0] * count(text),  # its default tokenizer downloads files
            async_database_uri=f"sqlite+aiosqlite:///{self.dir.name}/li.db",
            chat_history=history or None,
        )

    def _messages(self, i: int) -> list[Any]:
        from llama_index.core.base.llms.types import ChatMessage

        question, args, result, answer = turn_texts(i)
        return [
            ChatMessage(role="user", content=question),
            ChatMessage(role="assistant", content=f"get_order({args})"),
            ChatMessage(role="tool", content=result),
            ChatMessage(role="assistant", content=answer),
        ]

    def turn(self, i: int) -> int:
        self.memory.put_messages(self._messages(i))
        return len(self.memory.get())

    def close(self) -> None:
        self.dir.cleanup()


class AgentsSubject(Subject):
    """OpenAI Agents SDK ``SQLiteSession``: ``add_items`` + ``get_items(limit=40)``."""

    name = "OpenAI Agents SQLiteSession"

    def fill(self, events: int) -> None:
        from agents import SQLiteSession

        self.dir = tempfile.TemporaryDirectory()
        self.session = SQLiteSession("bench", db_path=Path(self.dir.name) / "agents.db")
        self.loop = asyncio.new_event_loop()
        items = []
        for i in range(events // EVENTS_PER_TURN):
            items += self._items(-i - 1)
        if items:
            self.loop.run_until_complete(self.session.add_items(items))

    def _items(self, i: int) -> list[dict[str, Any]]:
        import json

        question, args, result, answer = turn_texts(i)
        call = f"c{uuid.uuid4().hex[:12]}"
        return [
            {"role": "user", "content": question},
            {
                "type": "function_call",
                "call_id": call,
                "name": "get_order",
                "arguments": json.dumps(args),
            },
            {"type": "function_call_output", "call_id": call, "output": result},
            {"role": "assistant", "content": answer},
        ]

    def turn(self, i: int) -> int:
        self.loop.run_until_complete(self.session.add_items(self._items(i)))
        return len(
            self.loop.run_until_complete(
                self.session.get_items(limit=WINDOW_TURNS * EVENTS_PER_TURN)
            )
        )

    def close(self) -> None:
        self.session.close()
        self.loop.close()
        self.dir.cleanup()
