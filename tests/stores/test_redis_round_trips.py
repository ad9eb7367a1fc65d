"""What a turn costs on the Redis stores, counted (never timed): the commands each operation
sends (one command, one round trip) on the real redis-server and the real Redis Cluster, sync
and async, for the agent-loop turn (add the user message, read the window, add a tool call,
its result and the reply) under every strategy that does not summarise: three, one per add
(its tool-pair check and its compaction in the same script) and one per read; and the events parsed
per turn, now that a store keeps its last window of a conversation and the scripts answer a
read or an append whose window the store holds with its bookkeeping (and the batch's seqs)
instead of the window. The held window is checked by the conversation's epoch and version in
the same script, so another writer's append, compaction, retraction or clear (even one that
brings the version back to the same number) is always seen."""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from chat_memory import AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_aio import AsyncRedisStore
from chat_memory.backends.redis_sansio import ScriptName, lua
from tests.support.helpers import fixed_tokens

#: The strategies that need no summarizer, each with limits a few turns reach.
STRATEGIES = {
    "none": MemoryConfig(compaction_strategy="none"),
    "turn_window": MemoryConfig(compaction_strategy="turn_window", max_turns=3),
    "turn_window at ratio 1.0": MemoryConfig(
        compaction_strategy="turn_window", max_turns=3, compact_to_ratio=1.0
    ),
    "sliding_window": MemoryConfig(compaction_strategy="sliding_window", max_events=10),
    "token_count": MemoryConfig(compaction_strategy="token_count", max_tokens=60),
}
TURNS = 8
SCRIPTS: tuple[ScriptName, ...] = ("append", "apply", "find", "load")
#: Commands per operation, a due compaction included: the append (with the compaction in its
#: script); the window read; the append with the tool-pair check made on the held window (the
#: script refuses it if the window moved) and the compaction in its script.
EXPECTED = {"user": 1, "window": 1, "tools": 1}
#: Events parsed per turn: each of the turn's four new events once (the engine checks that it
#: reads back from JSON; the store takes its stored copy from the event itself), never the
#: window, not even after a compaction (the window read then reuses the events it holds).
PARSED_PER_TURN = 4

BACKENDS = [
    pytest.param("redis_url", marks=pytest.mark.redis, id="server"),
    pytest.param("redis_cluster_url", marks=pytest.mark.redis_cluster, id="cluster"),
]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    """A fresh prefix on the real server, then on the real cluster."""
    return str(request.getfixturevalue(request.param))


def _size(reply: Any) -> int:
    """The bytes of the strings in a reply."""
    if isinstance(reply, (bytes, str)):
        return len(reply)
    if isinstance(reply, (list, tuple)):
        return sum(_size(item) for item in reply)
    return 0


class Commands:
    """The name of every command a redis-py client (sync or asyncio, server or cluster) sends
    (one entry, one round trip), and the bytes of the strings in their replies."""

    def __init__(self, client: Any) -> None:
        self.sent: list[str] = []
        self.received = 0
        original = client.execute_command
        if inspect.iscoroutinefunction(original):

            async def counting_async(*args: Any, **kwargs: Any) -> Any:
                self.sent.append(str(args[0]))
                reply = await original(*args, **kwargs)
                self.received += _size(reply)
                return reply

            client.execute_command = counting_async
        else:

            def counting(*args: Any, **kwargs: Any) -> Any:
                self.sent.append(str(args[0]))
                reply = original(*args, **kwargs)
                self.received += _size(reply)
                return reply

            client.execute_command = counting

    def reset(self) -> None:
        """Forget what was sent and received (the test's own look-ups between operations)."""
        self.sent, self.received = [], 0

    def take(self) -> int:
        """How many commands were sent since the last call (all EVALSHA: one script each)."""
        sent, self.sent = self.sent, []
        assert set(sent) <= {"EVALSHA"}, sent
        return len(sent)


class Parses:
    """Counts ``Event.from_json`` calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = Event.from_json

        def from_json(cls: type[Event], data: Any) -> Event:
            self.count += 1
            return original(data)

        monkeypatch.setattr(Event, "from_json", classmethod(from_json))

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


def tool_batch(i: int) -> list[Event]:
    call_id = f"call-{i}"
    return [
        Event.tool_call("lookup", {"order": i}, call_id=call_id),
        Event.tool_result(call_id, f"order {i} shipped"),
        Event.assistant(f"Order {i} shipped on day {i}."),
    ]


def user(i: int) -> Event:
    return Event.user(f"question {i}: where is order {i}?")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_an_agent_loop_turn_costs_one_command_per_store_call(
    url: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(url)
    try:
        memory = ChatMemory(store, STRATEGIES[strategy], token_counter=fixed_tokens)
        for name in SCRIPTS:  # as after their first use (else a first use adds an EVAL)
            store.client.script_load(lua(name).script)
        memory.add("loop", user(0))  # a cluster registers a conversation at its first append
        memory.window("loop")  # from here on the store holds the window
        commands, parses = Commands(store.client), Parses(monkeypatch)
        seen: Counter[str] = Counter()
        for i in range(1, TURNS + 1):
            commands.reset()
            memory.add("loop", user(i))
            seen["user"] += commands.take()
            commands.reset()
            memory.window("loop")
            seen["window"] += commands.take()
            memory.add("loop", tool_batch(i))
            seen["tools"] += commands.take()
            assert parses.take() <= PARSED_PER_TURN, i
        assert dict(seen) == {name: TURNS * count for name, count in EXPECTED.items()}
        compacted = len(store.compactions("loop"))
        assert compacted > 0 or strategy == "none"
    finally:
        store.close()


@pytest.mark.parametrize("strategy", ["none", "turn_window"])
def test_a_turn_parses_its_own_events_and_never_the_window(
    url: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(url)
    try:
        memory = ChatMemory(
            store,
            MemoryConfig(compaction_strategy=strategy, max_turns=50),
            token_counter=fixed_tokens,
        )
        for i in range(10):
            memory.add("long", [user(i), *tool_batch(i)])
        window = memory.window("long")
        parses = Parses(monkeypatch)
        memory.add("long", user(10))
        assert parses.take() <= 2
        assert memory.window("long")[:-1] == window
        assert parses.take() == 0
        memory.add("long", tool_batch(10))
        assert parses.take() <= 6
        assert len(memory.window("long")) == len(window) + 4
        assert parses.take() == 0
    finally:
        store.close()


def test_the_async_store_sends_as_few_commands(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> Counter[str]:
        store = AsyncRedisStore.from_url(url)
        try:
            memory = AsyncChatMemory(store, STRATEGIES["turn_window"], token_counter=fixed_tokens)
            for name in SCRIPTS:
                await store.client.script_load(lua(name).script)
            await memory.add("loop", user(0))
            await memory.window("loop")
            commands, parses = Commands(store.client), Parses(monkeypatch)
            seen: Counter[str] = Counter()
            for i in range(1, TURNS + 1):
                commands.reset()
                await memory.add("loop", user(i))
                seen["user"] += commands.take()
                commands.reset()
                await memory.window("loop")
                seen["window"] += commands.take()
                await memory.add("loop", tool_batch(i))
                seen["tools"] += commands.take()
                assert parses.take() <= PARSED_PER_TURN, i
            assert len(await store.compactions("loop")) > 0
            return seen
        finally:
            await store.aclose()

    seen = asyncio.run(run())
    assert dict(seen) == {name: TURNS * count for name, count in EXPECTED.items()}


def test_a_window_read_after_an_add_or_a_compaction_receives_no_window(url: str) -> None:
    store = RedisStore.from_url(url)
    try:
        memory = ChatMemory(
            store,
            MemoryConfig(compaction_strategy="turn_window", max_turns=5, compact_to_ratio=1.0),
            token_counter=fixed_tokens,
        )
        for i in range(5):
            memory.add("c", [user(i), *tool_batch(i)])
        window = memory.window("c")
        assert sum(len(e.to_json()) for e in window) > 2000
        commands = Commands(store.client)
        memory.add("c", user(5))  # a sixth turn: compacted at once (ratio 1.0)
        assert len(store.compactions("c")) == 1
        newest = memory.history("c")[-1]
        commands.reset()
        assert memory.window("c") == [*window[4:], newest]
        assert commands.take() == 1 and commands.received < 200, commands.received
        memory.add("c", tool_batch(5))  # the append sends back the batch's seqs, not the window
        assert commands.received < 400, commands.received
        commands.reset()
        assert len(memory.window("c")) == len(window)  # turns 1 to 5
        assert commands.received < 200, commands.received
    finally:
        store.close()


# -- the held window is never stale -----------------------------------------------------------


def _contents(events: Sequence[Event]) -> list[str]:
    return [e.content if isinstance(e.content, str) else str(e.content) for e in events]


def test_another_writers_append_compaction_and_retraction_are_seen(url: str) -> None:
    mine, theirs = RedisStore.from_url(url), RedisStore.from_url(url)
    try:
        mine.append("c", [user(1), Event.assistant("one")])
        assert _contents(mine.load("c").window.active) == [user(1).content, "one"]
        theirs.append("c", [user(2), Event.assistant("two")])
        after = mine.append("c", [user(3)])  # held copy is behind: the whole window comes back
        assert [e.seq for e in after.window.active] == [1, 2, 3, 4, 5]
        snapshot = theirs.load("c")
        assert theirs.apply("c", CompactionPlan(snapshot.version, 2))
        assert [e.seq for e in mine.load("c").window.active] == [3, 4, 5]
        retracted = theirs.retract("c", [after.window.active[-1].id])
        assert [e.seq for e in retracted] == [5]
        assert [e.seq for e in mine.load("c").window.active] == [3, 4]
        theirs.record_compaction_error("c", "summarizer down")  # no new version: still seen
        assert mine.load("c").compaction_error == "summarizer down"
    finally:
        mine.close()
        theirs.close()


def test_a_conversation_cleared_and_refilled_to_the_same_version_is_read_anew(url: str) -> None:
    mine, theirs = RedisStore.from_url(url), RedisStore.from_url(url)
    try:
        mine.append("c", [user(1)])
        held = mine.load("c")
        theirs.clear("c")
        theirs.append("c", [Event.user("someone else's question")])
        again = mine.load("c")
        assert again.version == held.version  # same version, other content: the epoch tells
        assert _contents(again.window.active) == ["someone else's question"]
        assert _contents(mine.append("c", [Event.assistant("ok")]).window.active) == [
            "someone else's question",
            "ok",
        ]
    finally:
        mine.close()
        theirs.close()


def test_a_compaction_this_store_applied_reads_back_as_another_store_reads_it(url: str) -> None:
    mine, theirs = RedisStore.from_url(url), RedisStore.from_url(url)
    try:
        mine.append("c", [user(1), Event.assistant("one"), user(2), Event.assistant("two")])
        for summary in (None, Event.summary("the gist"), Event.summary("the gist, again")):
            snapshot = mine.load("c")
            through = snapshot.window.active[0].seq or 0
            assert mine.apply("c", CompactionPlan(snapshot.version, through, summary=summary))
            held, fresh = mine.load("c"), theirs.load("c")
            assert (held.version, held.last_seq) == (fresh.version, fresh.last_seq)
            assert held.window == fresh.window
            assert held.window.summary == (fresh.window.summary if summary else None)
            mine.append("c", [user(3)])
            assert mine.load("c").window == theirs.load("c").window
    finally:
        mine.close()
        theirs.close()


def test_a_pinned_event_that_supersedes_another_returns_the_whole_window(url: str) -> None:
    store = RedisStore.from_url(url)
    try:
        store.append("c", [Event.system("old rules"), user(1)])
        store.load("c")
        snapshot = store.append("c", [Event.system("new rules")])
        assert _contents(snapshot.window.pinned) == ["new rules"]
        assert _contents(store.load("c").window.pinned) == ["new rules"]
        assert snapshot.archived_count == 1
    finally:
        store.close()
