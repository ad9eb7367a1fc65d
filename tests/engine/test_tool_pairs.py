"""Tool pairs across turns (docs/tool-pairs.md): late results, pending calls, duplicate ids
and idempotent retries. The store-facing tests run on every backend (the ``store`` fixture);
the property test drives random traffic through every strategy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, EventType, InvalidEventError, MemoryConfig
from chat_memory.backends.base import Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import turn_starts
from chat_memory.strategies import SUPERSEDING_TURNS, strategy_for
from tests.support.helpers import check_cut, fixed_tokens


def memory(store: Store, **config: Any) -> ChatMemory:
    return ChatMemory(store, MemoryConfig(**config), token_counter=fixed_tokens)


def kinds(events: list[Event]) -> list[str]:
    return [e.type.value for e in events]


# -- late results --------------------------------------------------------------------------


def test_an_interrupted_call_keeps_its_turn_until_its_late_result_arrives(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add(
        "c",
        [
            Event.user("where is order 4512?"),
            Event.tool_call("get_order", {"id": 4512}, call_id="c1"),
        ],
    )
    m.add("c", Event.user("hurry up"))  # the call is pending: its turn is not archived
    assert kinds(m.window("c")) == ["user", "tool_call", "user"]
    m.add("c", [Event.tool_result("c1", "shipped"), Event.assistant("It shipped.")])
    assert kinds(m.window("c")) == ["user", "tool_call", "user", "tool_result", "assistant"]
    m.add("c", Event.user("thanks"))  # answered: the pair leaves together
    assert kinds(m.window("c")) == ["user"]
    assert m.stats("c").archived_events == 5


def test_a_superseded_call_is_archived_and_its_late_result_still_accepted(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add("c", [Event.user("start the export"), Event.tool_call("export", {}, call_id="slow")])
    for text in ["anything?", "never mind, tell me a joke"]:
        m.add("c", Event.user(text))
    # two newer turns: the pending call is superseded, its turn archived
    assert [e.content for e in m.window("c")] == ["never mind, tell me a joke"]
    stored = m.add("c", Event.tool_result("slow", "export done"))
    assert stored[0].tool_call_id == "slow" and stored[0].seq == 5
    assert kinds(m.window("c")) == ["user", "tool_result"]


def test_a_result_whose_call_exists_nowhere_is_refused_naming_the_id(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    for i in range(3):
        m.add(
            "c",
            [
                Event.user(f"q{i}"),
                Event.tool_call("t", {}, call_id=f"k{i}"),
                Event.tool_result(f"k{i}", "r"),
            ],
        )
    with pytest.raises(InvalidEventError, match=r"'nope'.*no tool_call in conversation 'c'"):
        m.add("c", Event.tool_result("nope", "orphan"))
    with pytest.raises(
        InvalidEventError, match=r"'later'.*no tool_call"
    ):  # the call must come first
        m.add("c", [Event.tool_result("later", "r"), Event.tool_call("t", {}, call_id="later")])
    assert len(m.history("c")) == 9


def test_a_second_result_for_one_call_is_refused_in_the_list_the_window_and_the_archive(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add(
        "c",
        [Event.user("a"), Event.tool_call("t", {}, call_id="k1"), Event.tool_result("k1", "first")],
    )
    with pytest.raises(
        InvalidEventError, match=r"second tool_result for tool_call_id 'k1'.*in the window"
    ):
        m.add("c", Event.tool_result("k1", "again"))
    with pytest.raises(InvalidEventError, match=r"second tool_result for tool_call_id 'k2'"):
        m.add(
            "c",
            [
                Event.tool_call("t", {}, call_id="k2"),
                Event.tool_result("k2", "x"),
                Event.tool_result("k2", "y"),
            ],
        )
    m.add("c", turn_without_tools("b"))  # archives the first turn
    assert m.window("c")[0].content == "b"
    with pytest.raises(
        InvalidEventError, match=r"second tool_result for tool_call_id 'k1'.*archived"
    ):
        m.add("c", Event.tool_result("k1", "late twin"))
    assert [e.content for e in m.history("c") if e.type is EventType.TOOL_RESULT] == ["first"]


def turn_without_tools(text: str) -> list[Event]:
    return [Event.user(text), Event.assistant(f"reply to {text}")]


def test_results_that_keep_arriving_a_turn_late_cannot_grow_the_window_without_bound(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add("c", [Event.user("u0"), Event.tool_call("t", {}, call_id="k0")])
    for i in range(1, 8):
        m.add("c", Event.user(f"u{i}"))
        m.add(
            "c", [Event.tool_result(f"k{i - 1}", "late"), Event.tool_call("t", {}, call_id=f"k{i}")]
        )
        window = m.window("c")
        # every turn start lies inside a pair: the bound (the newest two turns) wins over pairing
        assert len(turn_starts(window)) <= SUPERSEDING_TURNS
    assert [e.content or e.tool_call_id for e in m.window("c")] == [
        "u6",
        "late",
        "k6",
        "u7",
        "late",
        "k7",
    ]
    assert len(m.history("c")) == 2 + 7 * 3


# -- duplicate call ids --------------------------------------------------------------------


def test_a_tool_call_id_already_in_the_window_is_refused(store):
    m = memory(store)
    m.add(
        "conv-x",
        [Event.user("a"), Event.tool_call("t", {}, call_id="c1"), Event.tool_result("c1", "r")],
    )
    with pytest.raises(
        InvalidEventError, match=r"\('c1'\) is already in the window of conversation 'conv-x'"
    ):
        m.add("conv-x", [Event.user("again"), Event.tool_call("t", {}, call_id="c1")])
    with pytest.raises(InvalidEventError, match=r"\('c2'\) repeats the tool_call of events\[0\]"):
        m.add(
            "conv-x",
            [Event.tool_call("t", {}, call_id="c2"), Event.tool_call("u", {}, call_id="c2")],
        )
    assert len(m.history("conv-x")) == 3


def test_the_same_tool_call_retried_is_not_a_duplicate(store):
    m = memory(store)
    call = Event.tool_call("t", {}, call_id="c1")
    first = m.add("c", [Event.user("a"), call])
    again = m.add("c", call)
    assert again == [first[1]]
    assert len(m.history("c")) == 2


# -- idempotent add ------------------------------------------------------------------------


def test_a_retried_batch_with_tool_events_is_stored_once(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=2)
    batch = [
        Event.user("q"),
        Event.tool_call("t", {}, call_id="c1"),
        Event.tool_result("c1", "r"),
        Event.assistant("a"),
    ]
    first = m.add("c", batch)
    assert m.add("c", batch) == first
    assert [e.seq for e in m.history("c")] == [1, 2, 3, 4]


def test_a_partly_stored_batch_appends_only_the_new_events(store):
    m = memory(store)
    user, reply = Event.user("q"), Event.assistant("a")
    m.add("c", user)
    stored = m.add("c", [user, reply, Event.system("be brief")])
    assert [e.seq for e in stored] == [1, 2, 3]
    assert [e.content for e in m.history("c")] == ["q", "a", "be brief"]


def test_repeated_event_ids_in_one_batch_are_refused(store):
    m = memory(store)
    user = Event.user("q")
    with pytest.raises(
        InvalidEventError, match=rf"events\[1\].id \('{user.id}'\) repeats events\[0\]"
    ):
        m.add("c", [user, user])
    assert m.history("c") == []


# -- random traffic ------------------------------------------------------------------------

STEPS = st.lists(
    st.sampled_from(
        [
            "user",
            "user",
            "assistant",
            "call",
            "call",
            "result",
            "result",
            "pair",
            "chain",
            "retry",
            "bad",
        ]
    ),
    min_size=1,
    max_size=40,
)


@st.composite
def configs(draw: Any) -> MemoryConfig:
    keep = draw(st.integers(1, 6))
    return MemoryConfig(
        compaction_strategy=draw(
            st.sampled_from(
                ["none", "sliding_window", "turn_window", "token_count", "recursive_summarization"]
            )
        ),
        max_events=draw(st.integers(keep + 1, 10)),
        max_turns=draw(st.integers(1, 4)),
        max_tokens=draw(st.integers(5, 60)),
        max_events_to_keep=keep,
        overlap_size=draw(st.integers(0, keep - 1)),
        max_archived_events=100_000,
    )


class Traffic:
    """Drives one conversation and checks every compaction against the rules."""

    def __init__(self, config: MemoryConfig) -> None:
        self.strategy = strategy_for(config)
        self.memory = ChatMemory(
            InMemoryStore(max_archived_events=None),
            config,
            summarizer=lambda p, e, u: "s",
            token_counter=fixed_tokens,
        )
        self.pending: list[str] = []
        self.answered: list[str] = []
        self.last: list[Event] = []
        self.count = 0

    def add(self, batch: list[Event]) -> list[Event]:
        before = [e for e in self.memory.window("c") if e.is_real]
        known = {e.id for e in before}
        stored = self.memory.add("c", batch)
        seen = before + [e for e in stored if e.is_real and e.id not in known]
        after = [e for e in self.memory.window("c") if e.is_real]
        index = len(seen) - len(after)
        assert [e.id for e in seen[index:]] == [e.id for e in after], (
            "the kept window is not a suffix"
        )
        if index:
            check_cut(seen, index, self.strategy)
        # the bound: within the limit, or at most the newest SUPERSEDING_TURNS turns
        window = self.memory.store.load("c").window
        assert self.strategy.plan(window) is None or len(turn_starts(after)) <= SUPERSEDING_TURNS
        return stored

    def step(self, kind: str, pick: int) -> None:
        self.count += 1
        n = self.count
        if kind == "user":
            self.last = [Event.user(f"u{n} word")]
        elif kind == "assistant":
            self.last = [Event.assistant(f"a{n} word word")]
        elif kind == "call":
            self.last = [Event.tool_call("t", {"n": n}, call_id=f"k{n}")]
            self.pending.append(f"k{n}")
        elif kind == "pair":
            self.last = [
                Event.tool_call("t", {}, call_id=f"k{n}"),
                Event.tool_result(f"k{n}", "r word"),
            ]
            self.answered.append(f"k{n}")
        elif kind == "result" and self.pending:
            call_id = self.pending.pop(pick % len(self.pending))
            self.last = [Event.tool_result(call_id, f"late r{n}")]  # accepted wherever its call is
            self.answered.append(call_id)
        elif kind == "chain" and self.pending:
            # the newest call answered a turn late, and a new call made: pairs chain turn to turn
            call_id = self.pending.pop()
            self.last = [
                Event.tool_result(call_id, f"late r{n}"),
                Event.tool_call("t", {}, call_id=f"k{n}"),
            ]
            self.answered.append(call_id)
            self.pending.append(f"k{n}")
        elif kind == "retry" and self.last:
            stored = {e.id: e for e in self.memory.window("c")}
            if all(e.id in stored for e in self.last):
                length = len(self.memory.history("c"))
                assert self.memory.add("c", self.last) == [stored[e.id] for e in self.last]
                assert len(self.memory.history("c")) == length
            return
        elif kind == "bad":
            with pytest.raises(InvalidEventError):
                if self.answered and pick % 2:
                    self.memory.add(
                        "c", Event.tool_result(self.answered[pick % len(self.answered)], "twin")
                    )
                else:
                    self.memory.add("c", Event.tool_result(f"missing{n}", "orphan"))
            return
        else:
            return
        self.add(self.last)


@settings(max_examples=300, deadline=None)
@given(config=configs(), steps=STEPS, picks=st.lists(st.integers(0, 50), min_size=40, max_size=40))
def test_random_traffic_with_late_and_missing_results_follows_the_rules(config, steps, picks):
    traffic = Traffic(config)
    for kind, pick in zip(steps, picks):
        traffic.step(kind, pick)
    history = traffic.memory.history("c")
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    real = [e for e in history if e.type is not EventType.SUMMARY]
    assert len({e.id for e in real}) == len(real), "an event was stored twice"
