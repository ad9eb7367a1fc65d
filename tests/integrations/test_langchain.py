"""The LangChain adapter against the real langchain-core and langchain: the chat history,
the tools, and a ``create_agent`` run through ChatMemoryMiddleware with a stand-in chat model."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from chat_memory import (
    AsyncChatMemory,
    ChatMemory,
    ConfigurationError,
    EventType,
    InvalidInputError,
    MemoryConfig,
)
from chat_memory.integrations.langchain import (
    ChatMemoryHistory,
    ChatMemoryMiddleware,
    events_from_messages,
    messages_from_window,
    search_tools,
)
from chat_memory.render.plan import MISSING_RESULT_TEXT, SUMMARY_PREFACE
from tests.support import agent_script
from tests.support.adapter_memory import kind, memory_of, view  # noqa: F401
from tests.support.validators import validate_openai_messages


def check_pairs(messages: list[BaseMessage]) -> None:
    """LangChain's pairing expectation (what provider integrations require): every
    AIMessage tool call is answered by the ToolMessages right after it, and no ToolMessage
    answers anything else."""
    pending: list[str] = []
    for i, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            assert pending and message.tool_call_id == pending.pop(0), (
                f"messages[{i}] is an orphan ToolMessage"
            )
            continue
        assert not pending, f"messages[{i}]: tool calls {pending} unanswered"
        if isinstance(message, AIMessage):
            pending = [c["id"] for c in message.tool_calls]
    assert not pending, f"tool calls {pending} unanswered at the end"


def as_openai(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """Chat Completions messages as langchain-openai sends them: ``content`` null on an
    assistant message with tool calls and no text, no ``name`` on tool messages."""
    out = []
    for message in convert_to_openai_messages(messages):
        if (
            message["role"] == "assistant"
            and message.get("tool_calls")
            and not message.get("content")
        ):
            message["content"] = None
        if message["role"] == "tool":
            message.pop("name", None)
        out.append(message)
    return out


def validate(messages: list[BaseMessage]) -> None:
    check_pairs(messages)
    validate_openai_messages(as_openai(messages))


def memory_on(store, kind: str = "sync", **config: Any) -> ChatMemory | AsyncChatMemory:
    return memory_of(kind, store, **config)


def invoke_all(
    runnable: Any, kind: str, inputs: list[Any], config: Any = None, close: Any = None
) -> list[Any]:
    """``invoke`` each input in turn with a ChatMemory, ``ainvoke`` on one loop with an AsyncChatMemory."""
    if kind == "sync":
        return [runnable.invoke(i, config) for i in inputs]

    async def go() -> list[Any]:
        answers = [await runnable.ainvoke(i, config) for i in inputs]
        if close is not None:
            await close()  # a native store's connections belong to this loop
        return answers

    return asyncio.run(go())


def turns(*lines: str) -> list[dict[str, Any]]:
    return [{"messages": [HumanMessage(line)]} for line in lines]


# -- the history ----------------------------------------------------------------------------


def test_messages_map_to_events_with_their_ids():
    events = events_from_messages(
        [
            SystemMessage("Answer in French.", id="s1"),
            HumanMessage("Where is order 7?", id="h1"),
            AIMessage(
                "Let me check.",
                id="a1",
                tool_calls=[
                    {"name": "lookup", "args": {"id": 7}, "id": "c1"},
                    {"name": "lookup", "args": {"id": 8}, "id": "c2"},
                ],
            ),
            ToolMessage("shipped", tool_call_id="c1", id="t1"),
            ToolMessage("not found", tool_call_id="c2", status="error", id="t2"),
            AIMessage([{"type": "text", "text": "Order 7 shipped."}], id="a2"),
        ]
    )
    assert [(e.type.value, e.id) for e in events] == [
        ("system", "s1"),
        ("user", "h1"),
        ("assistant", "a1"),
        ("tool_call", "a1#1"),
        ("tool_call", "a1#2"),
        ("tool_result", "t1"),
        ("tool_result", "t2"),
        ("assistant", "a2"),
    ]
    assert events[3].arguments == {"id": 7} and events[3].tool_call_id == "c1"
    assert [e.is_error for e in events[5:7]] == [False, True]
    assert events[7].content == "Order 7 shipped."
    assert all(len(e.metadata["langchain_digest"]) == 32 for e in events)


def test_a_message_without_an_id_is_given_a_uuid_like_langgraph_gives_it():
    import uuid

    message = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}])
    [event] = events_from_messages([message])
    assert str(uuid.UUID(message.id)) == message.id == event.id
    assert events_from_messages([AIMessage("")])[0].content == ""  # an empty reply is kept


def test_unknown_message_types_are_refused_by_index():
    from langchain_core.messages import FunctionMessage

    with pytest.raises(InvalidInputError, match=r"messages\[1\] has type 'function'"):
        events_from_messages([HumanMessage("hi"), FunctionMessage("x", name="f")])


def test_history_round_trip_is_idempotent_and_valid(sqlite_store):
    memory = memory_on(sqlite_store)
    history = ChatMemoryHistory(memory, "conv")
    batch = [
        SystemMessage("Be brief.", id="s1"),
        HumanMessage("Where is order 7?", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"id": 7}, "id": "c1"}]),
        ToolMessage("timeout", tool_call_id="c1", status="error", id="t1"),
        AIMessage("The lookup failed.", id="a2"),
    ]
    history.add_messages(batch)
    history.add_messages(batch)  # a retry: every id is in the window already
    assert len(memory.history("conv")) == 5
    messages = history.messages
    validate(messages)
    assert isinstance(messages[0], SystemMessage) and messages[0].content == "Be brief."
    assert [type(m) for m in messages[1:]] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert messages[3].status == "error" and messages[3].content == "timeout"
    history.clear()
    assert history.messages == []


def test_an_unanswered_call_gets_a_synthetic_error_result(memory_store):
    memory = memory_on(memory_store)
    history = ChatMemoryHistory(memory, "conv")
    history.add_messages(
        [HumanMessage("go"), AIMessage("", tool_calls=[{"name": "slow", "args": {}, "id": "c9"}])]
    )
    messages = history.messages
    validate(messages)
    assert isinstance(messages[-1], ToolMessage) and messages[-1].status == "error"
    assert messages[-1].content == MISSING_RESULT_TEXT


@pytest.mark.parametrize(
    "placement, kind", [("user_message", HumanMessage), ("system_prompt", SystemMessage)]
)
def test_the_summary_leads_as_the_placement_says(memory_store, placement, kind):
    memory = ChatMemory(
        memory_store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=1,
            summary_placement=placement,
        ),
        summarizer=lambda previous, events, upcoming: f"{len(events)} events about orders",
    )
    history = ChatMemoryHistory(memory, "conv")
    for i in range(4):
        history.add_messages([HumanMessage(f"question {i}"), AIMessage(f"answer {i}")])
    messages = history.messages
    validate(messages)
    assert isinstance(messages[0], kind) and SUMMARY_PREFACE in messages[0].content
    assert "events about orders" in messages[0].content
    assert isinstance(messages[1], HumanMessage) and SUMMARY_PREFACE not in messages[1].content
    assert messages[0].id.startswith("chat-memory:summary:")
    stored = len(memory.history("conv"))
    history.add_messages(messages)  # sent back, summary included: nothing new
    assert len(memory.history("conv")) == stored


@pytest.mark.parametrize(
    "store_fixture", ["sqlite_store", pytest.param("redis_store", marks=pytest.mark.redis)]
)
def test_async_methods(request, store_fixture, kind):
    memory = memory_on(request.getfixturevalue(store_fixture), kind)
    history = ChatMemoryHistory(memory, "conv")
    batch = [
        HumanMessage("Where is order 7?", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"id": 7}, "id": "c1"}]),
        ToolMessage("shipped", tool_call_id="c1", id="t1"),
        AIMessage("It shipped.", id="a2"),
    ]

    async def run() -> list[BaseMessage]:
        await history.aadd_messages(batch)
        await history.aadd_messages(batch)  # a retry stores nothing twice
        got = await history.aget_messages()
        assert len(view(memory).history("conv")) == 4
        await history.aclear()
        assert await history.aget_messages() == []
        return got

    got = asyncio.run(run())
    validate(got)
    assert [m.content for m in got] == ["Where is order 7?", "", "shipped", "It shipped."]


def test_sync_paths_refuse_an_async_memory_and_name_the_async_method(memory_store):
    memory = AsyncChatMemory(memory_store)
    history = ChatMemoryHistory(memory, "conv")
    with pytest.raises(
        ConfigurationError,
        match=r"messages is synchronous .* AsyncChatMemory: use await history.aget_messages\(\)",
    ):
        _ = history.messages
    with pytest.raises(
        ConfigurationError,
        match=r"use await history.aadd_messages\(\) instead, or pass a ChatMemory",
    ):
        history.add_messages([HumanMessage("hi")])
    with pytest.raises(ConfigurationError, match=r"use await history.aclear\(\)"):
        history.clear()
    search, _ = search_tools(memory, "conv")
    with pytest.raises(
        ConfigurationError, match=r"conversation_search tool's invoke\(\) .* use await tool.ainvoke"
    ):
        search.invoke({"keyword": "hi"})
    agent = create_agent(
        new_model(), tools=[], middleware=[ChatMemoryMiddleware(memory, conversation_id="c")]
    )
    with pytest.raises(
        ConfigurationError,
        match=r"agent.invoke\(\) is synchronous .* use agent.ainvoke\(\) or agent.astream\(\)",
    ):
        agent.invoke({"messages": [HumanMessage("hi")]})
    assert ChatMemory(memory_store).history("conv") == []  # nothing half-done
    with pytest.raises(
        ConfigurationError,
        match=r"ChatMemoryHistory: memory \(None\) must be a ChatMemory or an AsyncChatMemory",
    ):
        ChatMemoryHistory(None, "conv")  # type: ignore[arg-type]


def test_search_tools_find_archived_messages_and_flag_errors(memory_store, kind):
    memory = memory_on(memory_store, kind, compaction_strategy="turn_window", max_turns=1)
    history = ChatMemoryHistory(view(memory), "conv")
    history.add_messages([HumanMessage("Our service is code-named Bluefin."), AIMessage("Noted.")])
    history.add_messages([HumanMessage("Something else."), AIMessage("Sure.")])
    search, fetch = search_tools(memory, "conv")
    assert (search.name, fetch.name) == ("conversation_search", "fetch_tool_result")
    found, answer = invoke_all(
        search,
        kind,
        [
            {"keyword": "bluefin"},
            {
                "name": "conversation_search",
                "args": {"keyword": " "},
                "id": "x1",
                "type": "tool_call",
            },
        ],
    )
    assert "Bluefin" in found and "archived" in found
    assert (
        isinstance(answer, ToolMessage) and answer.status == "error" and "keyword" in answer.content
    )
    [fetched] = invoke_all(
        fetch,
        kind,
        [
            {
                "name": "fetch_tool_result",
                "args": {"tool_call_id": "nope"},
                "id": "x2",
                "type": "tool_call",
            }
        ],
    )
    assert "no tool result" in fetched.content


def test_messages_from_window_puts_the_system_prompt_first(memory_store):
    memory = memory_on(memory_store)
    ChatMemoryHistory(memory, "conv").add_messages([SystemMessage("pinned"), HumanMessage("hi")])
    messages = messages_from_window(memory.window("conv"), system_prompt="You are terse.")
    assert messages[0].content == "You are terse.\n\npinned" and isinstance(
        messages[1], HumanMessage
    )


# -- create_agent with the middleware -------------------------------------------------------


class ScriptedChatModel(BaseChatModel):
    """A chat model that follows tests/support/agent_script.py and records every request."""

    requests: list[list[BaseMessage]] = []
    calls: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.requests.append(list(messages))
        last = messages[-1]
        move = agent_script.decide(
            "tool" if isinstance(last, ToolMessage) else "user", str(last.text)
        )
        if move.tool:
            message = AIMessage(
                "",
                tool_calls=[
                    {"name": move.tool, "args": move.arguments, "id": f"call_{next(self.calls)}"}
                ],
            )
        else:
            message = AIMessage(move.text)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup_order(order_id: int) -> str:
    """Look up an order by its number."""
    return agent_script.lookup_order(order_id)


def new_model() -> ScriptedChatModel:
    return ScriptedChatModel(requests=[], calls=itertools.count(1))


@pytest.mark.parametrize("kind", ["sync", "async", "native"], indirect=True)
@pytest.mark.parametrize(
    "store_fixture", ["sqlite_store", pytest.param("redis_store", marks=pytest.mark.redis)]
)
def test_a_create_agent_conversation_of_50_turns(request, store_fixture, kind):
    memory = memory_on(
        request.getfixturevalue(store_fixture), kind, compaction_strategy="turn_window", max_turns=4
    )
    model = new_model()
    agent = create_agent(
        model,
        tools=[lookup_order, *search_tools(memory, "conv", fetch=False)],
        system_prompt="Your visible history is short; search it for earlier things.",
        middleware=[ChatMemoryMiddleware(memory, conversation_id="conv")],
    )
    close = memory.aclose if kind == "native" else None
    states = invoke_all(
        agent, kind, turns(*map(agent_script.user_line, range(agent_script.TURNS))), close=close
    )
    recalled = {turn: states[turn]["messages"][-1].content for turn in agent_script.RECALL}
    memory = view(memory)
    for sent in model.requests:
        validate(sent)
        assert isinstance(sent[0], SystemMessage) and sent[0].content.startswith(
            "Your visible history"
        )
        assert (
            sum(isinstance(m, HumanMessage) for m in sent) <= 4 + 1
        )  # max_turns, plus the turn being answered
    assert memory.stats("conv").archived_events > 0
    for turn, earlier in agent_script.RECALL.items():
        assert agent_script.code(earlier) in recalled[turn] and "archived" in recalled[turn]
    history = memory.history("conv")
    assert sum(e.type is EventType.USER for e in history) == agent_script.TURNS
    assert len({e.id for e in history}) == len(history)
    lookups = sum(
        1 for t in range(agent_script.TURNS) if agent_script.user_line(t).startswith("Please")
    )
    calls = len(agent_script.RECALL) + lookups
    assert (
        len(history) == agent_script.TURNS * 2 + calls * 2
    )  # user + answer per turn, call + result per tool use


def test_the_middleware_follows_the_thread_id_and_stores_each_message_once(memory_store, kind):
    memory = memory_on(memory_store, kind, compaction_strategy="turn_window", max_turns=2)
    model = new_model()
    agent = create_agent(
        model,
        tools=[lookup_order],
        middleware=[ChatMemoryMiddleware(memory)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "thread-7"}}
    state = invoke_all(agent, kind, turns(*map(agent_script.user_line, range(6))), config)[-1]
    memory = view(memory)
    assert len(state["messages"]) > len(
        model.requests[-1]
    )  # the state keeps everything; the model sees the window
    history = memory.history("thread-7")
    assert sum(e.type is EventType.USER for e in history) == 6
    assert len(history) == 6 * 2 + 2 * 2  # turns 1 and 5 look an order up
    assert memory.stats("thread-7").archived_events > 0
    for sent in model.requests:
        validate(sent)


def test_the_async_agent_path(memory_store, kind):
    """``ainvoke`` with either memory: a ChatMemory in a worker thread, an AsyncChatMemory awaited."""
    memory = memory_on(memory_store, kind, compaction_strategy="turn_window", max_turns=2)
    model = new_model()
    agent = create_agent(
        model, tools=[lookup_order], middleware=[ChatMemoryMiddleware(memory, conversation_id="c")]
    )

    async def run() -> None:
        for turn in range(4):
            await agent.ainvoke({"messages": [HumanMessage(agent_script.user_line(turn))]})

    asyncio.run(run())
    assert sum(e.type is EventType.USER for e in view(memory).history("c")) == 4
    for sent in model.requests:
        validate(sent)


def test_without_a_conversation_id_or_thread_id_the_error_says_what_to_pass(memory_store):
    from chat_memory import ConfigurationError

    agent = create_agent(
        new_model(), tools=[], middleware=[ChatMemoryMiddleware(memory_on(memory_store))]
    )
    with pytest.raises(ConfigurationError, match="thread_id"):
        agent.invoke({"messages": [HumanMessage("hi")]})


class PromptTooLong(Exception):
    """What a provider SDK raises for an overflow (Anthropic's shape: HTTP 400)."""

    status_code = 400


class OverflowOnceModel(ScriptedChatModel):
    """Refuses the first request after ``armed`` is set as too long, then answers as scripted."""

    armed: bool = False

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if self.armed:
            self.armed = False
            raise PromptTooLong("prompt is too long: 201000 tokens > 200000 maximum")
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize(
    "memory_kind, use_async", [("sync", False), ("sync", True), ("async", True)]
)
def test_the_middleware_compacts_by_force_and_retries_once_on_an_overflow(
    memory_store, memory_kind, use_async, monkeypatch
):
    if memory_kind == "async":  # awith_overflow_retry awaits an AsyncChatMemory: no thread
        monkeypatch.setattr(asyncio, "to_thread", None)
    memory = memory_on(memory_store, memory_kind)
    model = OverflowOnceModel(requests=[], calls=itertools.count(1))
    agent = create_agent(
        model, tools=[lookup_order], middleware=[ChatMemoryMiddleware(memory, conversation_id="c")]
    )

    def invoke(turn: int) -> Any:
        message = {"messages": [HumanMessage(agent_script.user_line(turn))]}
        return asyncio.run(agent.ainvoke(message)) if use_async else agent.invoke(message)

    for turn in range(3):
        invoke(turn)
    model.armed = True
    state = invoke(3)
    assert state["messages"][-1].content  # answered after the retry
    memory = view(memory)
    assert memory.compactions("c")[-1].forced
    assert [e.content for e in memory.window("c") if e.type is EventType.USER] == [
        agent_script.user_line(3)
    ]
    for sent in model.requests:
        validate(sent)


def test_the_async_history_retracts_a_removed_message_and_replaces_an_edited_one(memory_store):
    history = ChatMemoryHistory(AsyncChatMemory(memory_store), "conv")

    async def go() -> list[BaseMessage]:
        await history.aadd_messages([HumanMessage("a", id="m1"), AIMessage("b", id="m2")])
        await history.aadd_messages([RemoveMessage(id="m1"), AIMessage("b, edited", id="m2")])
        return await history.aget_messages()

    assert [(m.id, m.content) for m in asyncio.run(go())] == [("m2", "b, edited")]
    retracted = [
        e.content
        for e in ChatMemory(memory_store).history("conv", include_retracted=True)
        if e.retracted
    ]
    assert retracted == ["a", "b"]
