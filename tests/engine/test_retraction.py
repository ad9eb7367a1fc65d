"""Retraction through the engine: ``memory.retract``, ``memory.rewind`` and
``history(include_retracted=True)``, sync and async, and a property over random traffic mixed
with random retractions and rewinds (on the memory store, and a few examples on every store)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, Event, EventType, MemoryConfig
from chat_memory.backends.base import Retracts
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import ConfigurationError, InvalidInputError
from tests.support.helpers import fixed_tokens
from tests.support.validators import validate_anthropic_request


def summarize(previous, events, upcoming):
    return f"{previous or ''}|{len(events)}"


def _memory(store=None, **settings_) -> ChatMemory:
    config = MemoryConfig(
        **{"compaction_strategy": "none", "max_archived_events": None, **settings_}
    )
    return ChatMemory(
        store or InMemoryStore(max_archived_events=None),
        config,
        summarizer=summarize,
        token_counter=fixed_tokens,
    )


def _turn(i: int, call: bool = False) -> list[Event]:
    events = [Event.user(f"question {i}")]
    if call:
        c = Event.tool_call("lookup", {"q": i}, call_id=f"call-{i}")
        events += [c, Event.tool_result(c.tool_call_id, f"result {i}")]
    return events + [Event.assistant(f"answer {i}")]


def test_retract_returns_what_it_took_and_the_reads_leave_it_out():
    memory = _memory()
    stored = memory.add("c", _turn(1, call=True) + _turn(2))
    taken = memory.retract("c", [stored[2].id])  # the result: its call goes too
    assert [e.seq for e in taken] == [2, 3] and all(e.retracted for e in taken)
    assert [e.seq for e in memory.window("c")] == [1, 4, 5, 6]
    assert [e.seq for e in memory.history("c")] == [1, 4, 5, 6]
    marked = memory.history("c", include_retracted=True)
    assert [(e.seq, e.retracted) for e in marked] == [
        (1, False),
        (2, True),
        (3, True),
        (4, False),
        (5, False),
        (6, False),
    ]
    assert (
        memory.search("c", "result").total == 0 and memory.fetch_tool_result("c", "call-1") is None
    )
    stats = memory.stats("c")
    assert stats.active_events == 4 and stats.archived_events == 0
    validate_anthropic_request(*memory.to_anthropic("c"))


def test_rewind_reaches_into_the_archive_and_keeps_pairs_whole():
    memory = _memory(compaction_strategy="turn_window", max_turns=2)
    for i in range(1, 6):
        memory.add("c", _turn(i, call=i == 2))
    assert memory.stats("c").archived_events > 0
    # seq 4 is turn 2's tool call, answered at seq 5: rewinding to 4 takes the result and so the call
    taken = memory.rewind("c", 4)
    assert [e.seq for e in taken][:2] == [4, 5] and all(e.seq > 3 for e in taken)
    assert max(e.seq for e in memory.history("c") if e.is_real) == 3
    again = memory.add("c", [Event.user("again")])[0]
    assert again.seq > max(
        e.seq for e in memory.history("c", include_retracted=True) if e.retracted
    )
    assert [e.seq for e in memory.rewind("c", 0)] == [1, 2, 3, again.seq]
    assert [e for e in memory.history("c") if e.is_real] == []


def test_a_retracted_message_may_be_added_again_with_its_id():
    memory = _memory()
    question = Event.user("what is 2+2?", id="m1")
    memory.add("c", [question, Event.assistant("5")])
    memory.retract("c", ["m1"])
    again = memory.add("c", [Event.user("what is 2+3?", id="m1")])
    assert again[0].seq == 3 and again[0].content == "what is 2+3?"
    assert [e.content for e in memory.window("c")] == ["5", "what is 2+3?"]


def test_bad_arguments_are_refused_before_anything_is_written():
    memory = _memory()
    memory.add("c", [Event.system("rules", id="pin"), *_turn(1)])
    version = memory.stats("c").version
    for bad in ("m1", None, 3, [3], [""]):
        with pytest.raises(InvalidInputError, match="event_ids"):
            memory.retract("c", bad)
    for bad_seq in (-1, True, "3", 1.5):
        with pytest.raises(InvalidInputError, match=r"seq \("):
            memory.rewind("c", bad_seq)
    with pytest.raises(InvalidInputError, match="'pin' names a system event"):
        memory.retract("c", [memory.window("c")[1].id, "pin"])
    with pytest.raises(InvalidInputError, match="include_retracted"):
        memory.history("c", include_retracted="yes")
    assert memory.stats("c").version == version and memory.retract("c", []) == []


def test_a_store_without_the_ability_is_named():
    class NoRetraction(InMemoryStore):
        retract = None  # type: ignore[assignment]

    memory = _memory(NoRetraction())
    with pytest.raises(ConfigurationError, match="Retracts"):
        memory.retract("c", ["x"])
    assert memory.history("c", include_retracted=True) == []


def test_the_async_memory_retracts_and_rewinds():
    async def scenario():
        memory = AsyncChatMemory(InMemoryStore(), {"compaction_strategy": "none"})
        stored = await memory.add("c", _turn(1, call=True))
        assert [e.seq for e in await memory.retract("c", [stored[1].id])] == [2, 3]
        assert [e.seq for e in await memory.rewind("c", 0)] == [1, 4]
        assert [e.retracted for e in await memory.history("c", include_retracted=True)] == [
            True
        ] * 4
        await memory.aclose()

    asyncio.run(scenario())


# -- the property ---------------------------------------------------------------------------


@dataclass
class Model:
    """What the conversation should hold: every stored event by seq, and whether it is live."""

    events: dict[int, Event] = field(default_factory=dict)
    live: dict[int, bool] = field(default_factory=dict)
    results_of: dict[str, int] = field(default_factory=dict)

    def stored(self, events: list[Event]) -> None:
        for event in events:
            self.events[event.seq or 0], self.live[event.seq or 0] = event, True
            if event.type is EventType.TOOL_RESULT and event.tool_call_id:
                self.results_of[event.tool_call_id] = event.seq or 0

    def retracted(self, events: list[Event]) -> None:
        for event in events:
            assert self.live[event.seq or 0] and self.events[event.seq or 0].id == event.id
            self.live[event.seq or 0] = False

    def expected(self, ids: set[str], after_seq: int | None = None) -> list[int]:
        """What a retraction of ``ids`` (or a rewind after ``after_seq``) takes: every live
        copy of those ids (an id re-added after its first copy was archived has two), and the
        tool partners of them."""
        if after_seq is not None:
            ids = ids | {
                e.id for s, e in self.events.items() if self.live[s] and e.is_real and s > after_seq
            }
        chosen = {s for s, e in self.events.items() if self.live[s] and e.id in ids}
        calls = {
            self.events[s].tool_call_id
            for s in chosen
            if self.events[s].type in (EventType.TOOL_CALL, EventType.TOOL_RESULT)
        }
        chosen |= {
            s
            for s, e in self.events.items()
            if self.live[s] and e.tool_call_id in calls and e.is_real
        }
        return sorted(chosen)


CONFIGS = st.sampled_from(
    [
        {"compaction_strategy": "none"},
        {"compaction_strategy": "turn_window", "max_turns": 2},
        {"compaction_strategy": "sliding_window", "max_events": 5, "max_events_to_keep": 2},
        {
            "compaction_strategy": "recursive_summarization",
            "max_events": 6,
            "max_events_to_keep": 3,
        },
    ]
)


def traffic(memory: ChatMemory, cid: str, data: st.DataObject, steps: int) -> None:
    model, open_call, n = Model(), None, 0
    for _ in range(steps):
        op = data.draw(st.sampled_from(["add", "add", "add", "retract", "rewind", "readd"]))
        if op == "add":
            n += 1
            batch: list[Event] = []
            if open_call is not None and model.live.get(open_call.seq or 0):
                batch.append(Event.tool_result(open_call.tool_call_id, f"word late {n}"))
            open_call = None
            batch.append(Event.user(f"word user {n}"))
            for k in range(data.draw(st.integers(0, 2))):
                call = Event.tool_call("lookup", {"q": f"word {n}.{k}"})
                batch.append(call)
                if data.draw(st.booleans()):
                    batch.append(Event.tool_result(call.tool_call_id, f"word result {n}.{k}"))
                else:
                    open_call = call
                    break
            if open_call is None and data.draw(st.booleans()):
                batch.append(Event.assistant(f"word reply {n}"))
            stored = memory.add(cid, batch)
            model.stored(stored)
            open_call = next(
                (e for e in stored if open_call is not None and e.id == open_call.id), None
            )
        elif op == "retract":
            live = [s for s, ok in model.live.items() if ok]
            if not live:
                continue
            picked = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
            ids = {model.events[s].id for s in picked} | {"unknown-id"}
            expected = model.expected(ids)
            taken = memory.retract(cid, sorted(ids))
            assert [e.seq for e in taken] == expected and all(e.retracted for e in taken)
            model.retracted(taken)
        elif op == "rewind":
            last = max(model.events, default=0)
            point = data.draw(st.integers(0, max(last, 0)))
            expected = model.expected(set(), after_seq=point)
            taken = memory.rewind(cid, point)
            assert [e.seq for e in taken] == expected
            model.retracted(taken)
        elif open_call is None or not model.live.get(open_call.seq or 0):
            # (never between a call and its late result: a user message there starts a turn
            # that compaction may keep while it archives the call, as without retraction)
            gone = [
                e for s, e in model.events.items() if not model.live[s] and e.type is EventType.USER
            ]
            if gone:
                chosen = data.draw(st.sampled_from(gone))
                model.stored(memory.add(cid, [chosen]))
        check(memory, cid, model)


def check(memory: ChatMemory, cid: str, model: Model) -> None:
    everything = memory.history(cid, include_retracted=True)
    assert [e.seq for e in everything] == list(
        range(1, len(everything) + 1)
    )  # seq gap-free, never reused
    real = [e for e in everything if e.is_real]
    assert [(e.seq, e.retracted) for e in real] == [
        (s, not model.live[s]) for s in sorted(model.events)
    ]
    live = [e for e in memory.history(cid) if e.is_real]
    assert not any(e.retracted for e in memory.history(cid))
    # pairs stay whole: a call and its (added) result are live together
    for event in live:
        if event.type is EventType.TOOL_CALL and event.tool_call_id in model.results_of:
            assert model.live[model.results_of[event.tool_call_id]], (
                "an answered call lost its result"
            )
        if event.type is EventType.TOOL_RESULT:
            assert any(
                e.type is EventType.TOOL_CALL and e.tool_call_id == event.tool_call_id for e in live
            )
    window = [e for e in memory.window(cid) if e.is_real]
    calls = set()
    for event in window:
        assert not event.retracted
        if event.type is EventType.TOOL_CALL:
            calls.add(event.tool_call_id)
        elif event.type is EventType.TOOL_RESULT:
            assert event.tool_call_id in calls, "orphaned tool result in the window"
    system, messages = memory.to_anthropic(cid)
    if messages:  # an empty conversation renders no message at all: nothing to send yet
        validate_anthropic_request(system, messages)
    assert memory.search(cid, "word", page_size=1000).total == len(live)
    stats = memory.stats(cid)
    assert stats.active_events + stats.archived_events == len(live)


@settings(max_examples=150, deadline=None)
@given(config=CONFIGS, data=st.data())
def test_random_traffic_with_retractions_keeps_the_invariants(config, data):
    traffic(_memory(**config), "c", data, 14)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=CONFIGS, data=st.data())
def test_random_traffic_with_retractions_on_every_store(store, config, data):
    if not isinstance(store, Retracts):
        pytest.skip(f"{type(store).__name__} does not declare Retracts")
    traffic(_memory(store, **config), f"prop-{uuid.uuid4().hex}", data, 10)


def test_a_version_4_sql_database_gets_the_retracted_table_in_place(sqlite_url):
    import sqlalchemy as sa

    from chat_memory.backends.sql import SQLStore

    with SQLStore.from_url(sqlite_url) as old:
        old.append("c", [Event.user("before", tokens=1), Event.assistant("reply", tokens=1)])
        with old.engine.begin() as connection:  # the tables as schema version 4 left them
            old.tables.retracted.drop(connection)
            meta = old.tables.meta
            connection.execute(
                meta.update().where(meta.c.name == "schema_version").values(value="4")
            )
    with SQLStore.from_url(sqlite_url) as store:
        reply = store.history("c")[1]
        assert [e.seq for e in store.retract("c", [reply.id])] == [2]
        assert [e.content for e in store.retracted("c")] == ["reply"]
        with store.engine.connect() as connection:
            recorded = dict(
                connection.execute(
                    sa.select(store.tables.meta.c.name, store.tables.meta.c.value)
                ).all()
            )
        assert recorded["schema_version"] == "8" and recorded["migrated_to_5"].endswith(
            "retracted events table"
        )
