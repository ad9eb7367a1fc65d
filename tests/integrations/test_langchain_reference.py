"""ChatMemoryHistory and ChatMemoryMiddleware side by side with LangChain's own references, on
every store: the same call sequences through ``InMemoryChatMessageHistory`` (merged by
LangGraph's ``add_messages`` reducer, as a LangGraph client keeps its messages) and through
ours, and a ``create_agent`` run with a checkpointer with and without our middleware,
comparing what the client sees (types, content, ids, tool calls). The differences left are
listed in docs/integrations.md (LangChain, "Identity")."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from chat_memory import ChatMemory, EventType, InvalidInputError, MemoryConfig
from chat_memory.integrations.langchain import ChatMemoryHistory, ChatMemoryMiddleware
from tests.integrations.test_langchain import ScriptedChatModel, lookup_order, validate
from tests.support import agent_script


class GraphHistory(InMemoryChatMessageHistory):
    """LangChain's in-memory history with its messages merged as LangGraph merges a state's."""

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.messages = add_messages(self.messages, list(messages))


def reference() -> GraphHistory:
    with warnings.catch_warnings():  # deprecated in langchain-core 1.x, still its reference
        warnings.simplefilter("ignore")
        return GraphHistory()


def seen(messages: Sequence[BaseMessage], given: set[str]) -> list[tuple[Any, ...]]:
    """What a client reads of each message. An id the client gave is compared as it is; an
    id given by the history (LangGraph's reducer or ours: a uuid4 each) as the order in which
    it first appears, so that the same message has the same id wherever it is re-sent."""
    assigned: dict[str, str] = {}
    out = []
    for m in messages:
        assert m.id, f"{m!r} came back without an id"
        ident = m.id if m.id in given else assigned.setdefault(m.id, f"<assigned {len(assigned)}>")
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])]
        extra = (m.tool_call_id, m.status, m.name) if isinstance(m, ToolMessage) else ()
        out.append((m.type, m.content, ident, calls, *extra))
    return out


def both(store: Any) -> tuple[GraphHistory, ChatMemoryHistory, ChatMemory]:
    memory = ChatMemory(store)
    return reference(), ChatMemoryHistory(memory, "conv"), memory


def tool_exchange(n: int, ids: bool) -> list[BaseMessage]:
    """A user question, an AIMessage with text and two tool calls, their results (one an
    error), and the answer; with or without message ids."""

    def mid(name: str) -> str | None:
        return f"{name}-{n}" if ids else None

    return [
        HumanMessage(f"Where are orders {n}a and {n}b?", id=mid("h")),
        AIMessage(
            "Checking both.",
            id=mid("a"),
            tool_calls=[
                {"name": "lookup", "args": {"order": f"{n}a"}, "id": f"call-{n}a"},
                {
                    "name": "lookup",
                    "args": {"order": f"{n}b", "deep": {"x": [1, 2]}},
                    "id": f"call-{n}b",
                },
            ],
        ),
        ToolMessage("shipped", tool_call_id=f"call-{n}a", name="lookup", id=mid("t1")),
        ToolMessage(
            "no such order", tool_call_id=f"call-{n}b", name="lookup", status="error", id=mid("t2")
        ),
        AIMessage(f"{n}a shipped; {n}b does not exist.", id=mid("a2")),
    ]


# -- the history ----------------------------------------------------------------------------


def test_a_history_sent_back_three_times_stores_each_message_once(store):
    ref, ours, memory = both(store)
    for turn in range(3):
        for history in (ref, ours):
            history.add_messages(
                history.messages + [HumanMessage(f"q{turn}"), AIMessage(f"r{turn}")]
            )
    assert seen(ours.messages, set()) == seen(ref.messages, set())
    assert [m.content for m in ours.messages] == ["q0", "r0", "q1", "r1", "q2", "r2"]
    assert [e.content for e in memory.history("conv")] == ["q0", "r0", "q1", "r1", "q2", "r2"]


def test_messages_with_and_without_ids_keep_them_across_re_sends(store):
    ref, ours, memory = both(store)
    batches = [
        [SystemMessage("Be brief.", id="sys"), HumanMessage("hi", id="h0"), AIMessage("hello")],
        [HumanMessage("and you?"), AIMessage("fine", id="a1")],
    ]
    given = {"sys", "h0", "a1"}
    for batch in batches:
        for history in (ref, ours):
            history.add_messages([m.model_copy() for m in batch])
        # a client sending it all back, then the last message alone again
        for history in (ref, ours):
            history.add_messages(history.messages)
            history.add_messages(history.messages[-1:])
    assert seen(ours.messages, given) == seen(ref.messages, given)
    assert len(memory.history("conv")) == 5


def test_a_message_without_an_id_takes_the_one_it_is_stored_under(store):
    ref, ours, _ = both(store)
    for history in (ref, ours):
        message = HumanMessage("hi")
        history.add_messages([message])
        assert (
            message.id == history.messages[0].id
        )  # LangGraph's reducer sets it on the message too


def test_tool_calls_and_results_round_trip_with_their_ids(store):
    ref, ours, memory = both(store)
    for n, ids in ((1, True), (2, False)):
        for history in (ref, ours):
            history.add_messages(tool_exchange(n, ids))
    for history in (ref, ours):
        history.add_messages(history.messages)  # the whole transcript again
    given = {f"{k}-1" for k in ("h", "a", "t1", "t2", "a2")}
    assert seen(ours.messages, given) == seen(ref.messages, given)
    validate(ours.messages)
    assert len(memory.history("conv")) == 2 * 7  # user, text, two calls, two results, answer


def test_remove_all_messages_clears_then_adds_what_follows(store):
    ref, ours, memory = both(store)
    for history in (ref, ours):
        history.add_messages(tool_exchange(1, True))
        history.add_messages(
            [
                HumanMessage("dropped"),
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                HumanMessage("anew", id="n"),
            ]
        )
    assert seen(ours.messages, {"n"}) == seen(ref.messages, {"n"}) == [("human", "anew", "n", [])]
    assert [e.content for e in memory.history("conv")] == ["anew"]


def test_a_list_that_would_clear_and_orphan_a_result_clears_nothing(store):
    _, ours, memory = both(store)
    ours.add_messages(tool_exchange(1, True))
    with pytest.raises(
        InvalidInputError,
        match=r"messages\[1\].tool_call_id \('call-1a'\) answers no tool call after REMOVE_ALL",
    ):
        ours.add_messages(
            [RemoveMessage(id=REMOVE_ALL_MESSAGES), ToolMessage("late", tool_call_id="call-1a")]
        )
    assert len(memory.history("conv")) == 7


def test_remove_message_by_id_retracts_the_message_as_the_reducer_removes_it(store):
    ref, ours, memory = both(store)
    given = {"m1", "m2", "m3"}
    for history in (ref, ours):
        history.add_messages([HumanMessage("a", id="m1"), AIMessage("b", id="m2")])
        history.add_messages([HumanMessage("c", id="m3"), RemoveMessage(id="m1")])
    assert seen(ours.messages, given) == seen(ref.messages, given) and [
        m.id for m in ours.messages
    ] == ["m2", "m3"]
    assert [e.id for e in memory.history("conv")] == ["m2", "m3"]
    assert [e.id for e in memory.history("conv", include_retracted=True) if e.retracted] == ["m1"]
    for history in (ref, ours):  # removed and sent again in one list: the last word keeps it
        history.add_messages([RemoveMessage(id="m2"), AIMessage("b", id="m2")])
    assert seen(ours.messages, given) == seen(ref.messages, given)
    with pytest.raises(ValueError, match="doesn't exist"):
        ref.add_messages([RemoveMessage(id="never")])
    with pytest.raises(
        InvalidInputError,
        match=r"messages\[1\] is a RemoveMessage of id 'never', which is not stored",
    ):
        ours.add_messages([HumanMessage("d", id="m4"), RemoveMessage(id="never")])
    ours.add_messages(
        [RemoveMessage(id="m1")]
    )  # retracted already: nothing to do (the reducer would refuse)
    assert [e.id for e in memory.history("conv")] == [
        "m2",
        "m3",
    ]  # nothing of the refused list stored


def test_removing_an_ai_message_takes_its_calls_and_their_results(store):
    """Difference: the reducer leaves the ToolMessages of a removed AIMessage behind, orphaned
    (a request the model API refuses); chat-memory retracts a call with its result."""
    ref, ours, memory = both(store)
    for history in (ref, ours):
        history.add_messages(tool_exchange(1, True))
        history.add_messages([RemoveMessage(id="a-1")])
    given = {"h-1", "a2-1"}
    orphans = {"t1-1", "t2-1"}
    assert seen(ours.messages, given) == seen(
        [m for m in ref.messages if m.id not in orphans], given
    )
    assert {m.id for m in ref.messages} >= orphans
    assert [e.type for e in memory.history("conv", include_retracted=True) if e.retracted] == [
        EventType.ASSISTANT,
        EventType.TOOL_CALL,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.TOOL_RESULT,
    ]
    validate(ours.messages)


def test_a_different_message_under_a_stored_id_replaces_it(store):
    """As the reducer replaces it, with one difference: the new version is appended (a log
    appends), where the reducer keeps the old place; the old one is retracted."""
    ref, ours, memory = both(store)
    given = {"m1", "m2", "m4"}
    for history in (ref, ours):
        history.add_messages([HumanMessage("a", id="m1"), AIMessage("b", id="m2")])
        history.add_messages([AIMessage("b, edited", id="m2")])  # the newest message: same place
        history.add_messages(
            [AIMessage("x", id="m4"), AIMessage("y", id="m4")]
        )  # one id twice: the last word
    assert seen(ours.messages, given) == seen(ref.messages, given)
    assert [m.content for m in ours.messages] == ["a", "b, edited", "y"]
    for history in (ref, ours):
        history.add_messages([HumanMessage("a, edited", id="m1")])
    assert [m.content for m in ref.messages] == ["a, edited", "b, edited", "y"]
    assert [m.content for m in ours.messages] == ["b, edited", "y", "a, edited"]  # moved to the end
    retracted = [e.content for e in memory.history("conv", include_retracted=True) if e.retracted]
    assert retracted == ["a", "b"]


def test_an_ai_message_re_sent_with_a_call_less_replaces_it_and_its_results(store):
    _, ours, memory = both(store)
    exchange = tool_exchange(1, True)
    ours.add_messages(exchange)
    fewer = exchange[1].model_copy(update={"tool_calls": exchange[1].tool_calls[:1]})
    ours.add_messages(
        [fewer, exchange[2]]
    )  # the result of the call it kept is sent again: stored anew
    stored = [(e.type.value, e.id) for e in memory.history("conv")]
    assert stored == [
        ("user", "h-1"),
        ("assistant", "a2-1"),
        ("assistant", "a-1"),
        ("tool_call", "a-1#1"),
        ("tool_result", "t1-1"),
    ]
    validate(ours.messages)


def test_plain_in_memory_history_stores_a_re_sent_copy_again(store):
    """Difference kept on purpose: LangChain's history alone neither gives ids nor merges,
    so sending it back doubles it; ours merges by id as LangGraph's reducer does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = InMemoryChatMessageHistory()
    _, ours, _ = both(store)
    for history in (plain, ours):
        history.add_messages([HumanMessage("q0"), AIMessage("r0")])
        history.add_messages(history.messages + [HumanMessage("q1")])
    assert [m.content for m in plain.messages] == ["q0", "r0", "q0", "r0", "q1"]
    assert [m.id for m in plain.messages] == [None] * 5
    assert [m.content for m in ours.messages] == ["q0", "r0", "q1"]


def test_a_transcript_longer_than_the_window_reads_the_history_once_and_stores_nothing_twice(
    store, monkeypatch
):
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=2))
    ours = ChatMemoryHistory(memory, "conv")
    reads: list[str] = []
    real_history = ChatMemory.history
    monkeypatch.setattr(
        ChatMemory,
        "history",
        lambda self, cid, *rest: reads.append(cid) or real_history(self, cid, *rest),
    )
    transcript: list[BaseMessage] = []
    longer = 0
    for turn in range(6):
        # the requests whose transcript starts with archived messages, before the window's
        longer += any(e.archived for e in real_history(memory, "conv"))
        transcript += [
            HumanMessage(f"q{turn}", id=f"h{turn}"),
            AIMessage(f"r{turn}", id=f"a{turn}"),
        ]
        ours.add_messages(transcript)  # a stateless server sending everything each time
    assert [e.content for e in real_history(memory, "conv")] == [
        f"{k}{t}" for t in range(6) for k in "qr"
    ]
    # the others cost one window read; these one history read each, no more
    assert 3 <= longer == len(reads)
    reads.clear()
    ours.add_messages([HumanMessage("q6", id="h6")])  # new messages alone: the window only
    ours.add_messages(ours.messages)
    assert reads == []


def test_a_transcript_older_than_the_archive_cap_keeps_is_not_stored_again(store):
    """The oldest messages of a re-sent transcript were erased by the archive cap: found
    nowhere, before the first message found, they are not appended again."""
    memory = ChatMemory(
        store, MemoryConfig(compaction_strategy="turn_window", max_turns=2, max_archived_events=4)
    )
    ours = ChatMemoryHistory(memory, "conv")
    transcript: list[BaseMessage] = []
    for turn in range(8):
        transcript += [
            HumanMessage(f"q{turn}", id=f"h{turn}"),
            AIMessage(f"r{turn}", id=f"a{turn}"),
        ]
        ours.add_messages(transcript)
    contents = [e.content for e in memory.history("conv")]
    assert contents == [f"{k}{t}" for t in range(8 - len(contents) // 2, 8) for k in "qr"]


def test_a_system_prompt_re_sent_without_an_id_is_not_stored_again(store):
    """Difference: LangGraph's reducer appends an id-less message again on every request (a
    new uuid each time); a SystemMessage saying what a pinned event says is kept once here."""
    ref, ours, memory = both(store)
    for turn in range(3):
        for history in (ref, ours):
            past = [m for m in history.messages if m.type != "system"]
            history.add_messages(
                [SystemMessage("Be brief."), *past, HumanMessage(f"q{turn}", id=f"h{turn}")]
            )
    assert [m.content for m in ref.messages].count("Be brief.") == 3
    assert [(m.type, m.content) for m in ours.messages] == [
        ("system", "Be brief."),
        ("human", "q0"),
        ("human", "q1"),
        ("human", "q2"),
    ]
    ours.add_messages(
        [SystemMessage("Be very brief.")]
    )  # a new instruction is stored (and replaces the pinned one)
    assert [m.content for m in ours.messages if m.type == "system"] == ["Be very brief."]


def test_what_only_the_rendering_adds_is_not_stored_when_sent_back(store):
    """The summary, the stand-in result of an unanswered call and the note of a result whose
    call was archived come back under ``chat-memory:`` ids; sending them back stores nothing."""
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=2))
    ours = ChatMemoryHistory(memory, "conv")
    ours.add_messages(
        [
            HumanMessage("go", id="h0"),
            AIMessage("", id="a0", tool_calls=[{"name": "slow", "args": {}, "id": "c0"}]),
        ]
    )
    for turn in range(1, 4):
        ours.add_messages(
            [HumanMessage(f"q{turn}", id=f"h{turn}"), AIMessage(f"r{turn}", id=f"a{turn}")]
        )
    ours.add_messages(
        [ToolMessage("late", tool_call_id="c0", id="t0")]
    )  # its call is archived by now
    ours.add_messages(
        [AIMessage("", id="a9", tool_calls=[{"name": "slow", "args": {}, "id": "c9"}])]
    )
    shown = ours.messages
    rendered = [m.id for m in shown if m.id.startswith("chat-memory:")]
    assert rendered == ["chat-memory:note:t0", "chat-memory:missing-result:c9"]
    before = len(memory.history("conv"))
    ours.add_messages(shown)
    assert len(memory.history("conv")) == before
    ours.add_messages(
        [ToolMessage("done", tool_call_id="c9", id="t9")]
    )  # the real result still goes in
    assert seen(ours.messages[-2:], {"a9", "t9"})[-1] == (
        "tool",
        "done",
        "t9",
        [],
        "c9",
        "success",
        "slow",
    )


# -- create_agent with a checkpointer, with and without the middleware --------------------


def agent_for(memory: ChatMemory | None, checkpointer: bool) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(requests=[], calls=itertools.count(1))
    middleware = (
        [ChatMemoryMiddleware(memory, conversation_id="conv")] if memory is not None else []
    )
    saver = InMemorySaver() if checkpointer else None
    return create_agent(
        model, tools=[lookup_order], middleware=middleware, checkpointer=saver
    ), model


TURNS = 6  # turns 1 and 5 look an order up: a call and its result in the state


def message_count(history: Sequence[Any]) -> int:
    """How many LangChain messages a history of events holds (an AIMessage's calls are
    stored as ``<id>#k`` events of it)."""
    return sum("#" not in e.id for e in history)


@pytest.mark.parametrize("checkpointer", [True, False], ids=["checkpointer", "stateless"])
def test_an_agent_sent_its_whole_history_each_turn_sees_and_stores_each_message_once(
    store, checkpointer
):
    """Each turn the client sends back everything it has (``state["messages"] + [new]``);
    with a checkpointer LangGraph's reducer merges it by id, without one it is the whole
    input. The client must see the same state with and without the middleware, and the
    memory must hold each of its messages once, under the state's ids."""
    memory = ChatMemory(store)
    config = {"configurable": {"thread_id": "t"}}
    results = {}
    for name, mem in (("reference", None), ("ours", memory)):
        agent, model = agent_for(mem, checkpointer)
        messages: list[BaseMessage] = []
        for turn in range(TURNS):
            state = agent.invoke(
                {"messages": messages + [HumanMessage(agent_script.user_line(turn))]}, config
            )
            messages = state["messages"]
        results[name] = (messages, model.requests)
    (ref_messages, ref_requests), (our_messages, our_requests) = (
        results["reference"],
        results["ours"],
    )
    assert seen(our_messages, set()) == seen(ref_messages, set())
    # the model was shown the same conversation (ours has the window; nothing compacts here)
    said = [[(m.type, m.content) for m in request] for request in our_requests]
    assert said == [[(m.type, m.content) for m in request] for request in ref_requests]
    history = memory.history("conv")
    assert sum(e.type is EventType.USER for e in history) == TURNS
    assert message_count(history) == len(our_messages)
    assert [e.id for e in history if "#" not in e.id] == [m.id for m in our_messages]


def test_an_agent_fed_a_chat_memory_history_stores_only_the_new_message(store):
    """A stateless server: the transcript comes from ChatMemoryHistory each time
    (``agent.invoke({"messages": history.messages + [new]})``)."""
    memory = ChatMemory(store)
    history = ChatMemoryHistory(memory, "conv")
    ours, _ = agent_for(memory, checkpointer=False)
    reference, _ = agent_for(None, checkpointer=False)
    ref_messages: list[BaseMessage] = []
    for turn in range(TURNS):
        new = HumanMessage(agent_script.user_line(turn))
        state = ours.invoke({"messages": history.messages + [new.model_copy()]})
        ref_messages = reference.invoke({"messages": ref_messages + [new.model_copy()]})["messages"]
        assert seen(history.messages, set()) == seen(state["messages"], set())
    assert seen(history.messages, set()) == seen(ref_messages, set())
    events = memory.history("conv")
    assert sum(e.type is EventType.USER for e in events) == TURNS
    assert message_count(events) == len(ref_messages)
    validate(history.messages)


def test_the_middleware_replaces_an_edited_copy_of_a_stored_message(store):
    memory = ChatMemory(store)
    agent, _ = agent_for(memory, checkpointer=False)
    state = agent.invoke({"messages": [HumanMessage("Remember: project 1 has code K1.", id="u1")]})
    edited = [
        state["messages"][0].model_copy(update={"content": "Remember: project 1 has code K2."})
    ]
    agent.invoke({"messages": edited + state["messages"][1:] + [HumanMessage("next")]})
    contents = [e.content for e in memory.history("conv")]
    assert contents[:3] == ["Noted.", "Remember: project 1 has code K2.", "next"]
    assert [e.content for e in memory.history("conv", include_retracted=True) if e.retracted] == [
        "Remember: project 1 has code K1."
    ]


def test_a_remove_message_reaches_the_state_but_not_the_memory(store):
    """Difference (documented): LangGraph applies a RemoveMessage to the state before any
    middleware hook sees it, so the memory keeps the message and the model is still shown it."""
    memory = ChatMemory(store)
    config = {"configurable": {"thread_id": "t"}}
    states = {}
    for name, mem in (("reference", None), ("ours", memory)):
        agent, model = agent_for(mem, checkpointer=True)
        first = agent.invoke(
            {"messages": [HumanMessage("Remember: project 1 has code K1.", id="u1")]}, config
        )
        states[name] = agent.invoke(
            {"messages": [RemoveMessage(id="u1"), HumanMessage("next", id="u2")]}, config
        )
        assert "u1" not in [m.id for m in states[name]["messages"]] and len(first["messages"]) == 2
        states[name + " saw"] = [m.content for m in model.requests[-1]]
    assert seen(states["ours"]["messages"], {"u2"}) == seen(states["reference"]["messages"], {"u2"})
    assert "Remember: project 1 has code K1." not in states["reference saw"]
    assert "Remember: project 1 has code K1." in states["ours saw"]  # still in the memory's window
    assert [e.id for e in memory.history("conv")][0] == "u1"
    agent, _ = agent_for(memory, checkpointer=False)
    with pytest.raises(
        InvalidInputError, match=r"is a RemoveMessage \(id 'u2'\), which is not a message to store"
    ):
        agent.invoke(
            {
                "messages": [
                    RemoveMessage(id=REMOVE_ALL_MESSAGES),
                    HumanMessage("x"),
                    RemoveMessage(id="u2"),
                ]
            }
        )
