"""The OpenAI Agents SDK adapter against the real openai-agents package: the Session mapping,
``get_items(limit)`` never splitting a call from its output, and ``Runner.run`` with a model
stub implementing the SDK's Model interface over every store."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from chat_memory import (
    AsyncChatMemory,
    ChatMemory,
    ConfigurationError,
    Event,
    EventType,
    InvalidInputError,
    MemoryConfig,
)
from chat_memory.integrations.openai_agents import (
    ChatMemorySession,
    events_from_items,
    search_tool,
)
from chat_memory.render.plan import MISSING_RESULT_TEXT
from tests.support import agent_script
from tests.support.adapter_memory import kind, memory_of, view  # noqa: F401
from tests.support.validators import validate_openai_messages

set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise


def as_chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items as Chat Completions messages, the way the SDK's own Chat
    Completions converter groups them: consecutive function calls join one assistant message."""
    out: list[dict[str, Any]] = []
    for item in items:
        if item.get("type") == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            elif out and out[-1]["role"] == "assistant":
                out[-1]["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.get("type") == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            content = item["content"]
            if isinstance(content, list):
                content = "\n".join(part["text"] for part in content)
            out.append({"role": item["role"], "content": content})
    return out


def check_items(items: list[dict[str, Any]]) -> None:
    """Every function_call has its output after it, and every output follows its call."""
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called, f"output {item['call_id']} without its call"
            answered.add(item["call_id"])
    assert called == answered, f"calls without output: {called - answered}"


def memory_on(store, kind: str = "sync", **config: Any) -> ChatMemory | AsyncChatMemory:
    return memory_of(kind, store, **config)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- the mapping ----------------------------------------------------------------------------


def test_items_map_to_events_and_back(sqlite_store, kind):
    session = ChatMemorySession(memory_on(sqlite_store, kind), "conv")
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    items = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Where is order 7?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lookup",
            "arguments": '{"id": 7}',
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Order 7 shipped.", "annotations": []}],
        },
    ]
    run(session.add_items(items))
    events = view(session.memory).history("conv")
    assert [e.type.value for e in events] == [
        "system",
        "user",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    assert events[2].metadata["openai_item"] == items[2]  # a reasoning item, kept verbatim
    assert (
        "fc_1" not in {e.id for e in events} and events[3].tool_call_id == "c1"
    )  # item ids are no identity
    assert events[3].arguments == {"id": 7}
    got = run(session.get_items())
    assert got == items  # replayed as given, ids and all, as the SDK's SQLiteSession does
    run(
        session.add_items(items[3:])
    )  # the SDK's sessions append what they are given: so does this one
    assert len(view(session.memory).history("conv")) == 9
    assert run(session.get_items())[-3:] == items[3:]
    check_items(got)


def test_the_sdk_placeholder_id_is_no_identity_and_odd_arguments_replay_verbatim(memory_store):
    events = events_from_items(
        [
            {"role": "assistant", "content": "a", "id": "__fake_id__"},
            {"role": "assistant", "content": "b", "id": "__fake_id__"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "[1, 2]"},
        ]
    )
    assert events[0].id != events[1].id and "__fake_id__" not in (events[0].id, events[1].id)
    assert events[2].arguments == {} and events[2].metadata["raw_arguments"] == "[1, 2]"


def test_items_of_types_not_modelled_are_kept_as_opaque_assistant_events():
    item = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "x"},
    }
    events = events_from_items([{"role": "user", "content": "hi"}, item])
    assert events[1].type is EventType.ASSISTANT and events[1].metadata["openai_item"] == item
    assert events[1].content == '[web_search_call] {"action": {"query": "x", "type": "search"}}'
    with pytest.raises(
        InvalidInputError, match=r"items\[0\]\.call_id \(None\) must be a non-empty string"
    ):
        events_from_items([{"type": "function_call", "name": "f", "arguments": "{}"}])


def test_an_output_whose_call_is_not_stored_is_kept_and_shown_as_a_note(memory_store, kind):
    session = ChatMemorySession(memory_on(memory_store, kind), "conv")
    orphan = {"type": "function_call_output", "call_id": "gone", "output": "late"}
    run(
        session.add_items(
            [{"role": "user", "content": "hi"}, orphan, {"role": "assistant", "content": "ok"}]
        )
    )
    got = run(session.get_items())
    assert (
        got[1]["role"] == "user"
        and "'gone'" in got[1]["content"]
        and got[1]["content"].endswith("late")
    )
    assert got[0] == {"role": "user", "content": "hi"} and got[2] == {
        "role": "assistant",
        "content": "ok",
    }
    validate_openai_messages(as_chat_messages(got))
    assert view(session.memory).history("conv")[1].metadata["openai_item"] == orphan


def test_events_stored_without_an_item_are_rendered(memory_store):
    memory = ChatMemory(memory_store)
    memory.add(
        "conv",
        [
            Event.user("hi"),
            Event.tool_call("f", {"a": 1}, call_id="c1"),
            Event.tool_result("c1", "no", is_error=True),
        ],
    )
    assert ChatMemorySession(memory, "conv").items() == [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: no"},
    ]


def test_a_limit_never_splits_a_call_from_its_output(memory_store, kind):
    session = ChatMemorySession(memory_on(memory_store, kind), "conv")
    run(
        session.add_items(
            [
                {"role": "user", "content": "look up 1 and 2"},
                {"role": "assistant", "content": "Looking."},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "function_call_output", "call_id": "c2", "output": "two"},
                {"role": "user", "content": "thanks"},
            ]
        )
    )
    full = run(session.get_items())
    assert len(full) == 7
    for limit in range(0, 9):
        got = run(session.get_items(limit=limit))
        check_items(got)
        assert got == full[len(full) - len(got) :]
        assert len(got) <= max(limit, 1)
    assert run(session.get_items(limit=2)) == full[-1:]  # the step of 5 items does not fit in 2
    assert run(session.get_items(limit=6)) == full[-6:]
    with pytest.raises(InvalidInputError, match=r"limit \(-1\)"):
        run(session.get_items(limit=-1))


def test_a_pending_call_gets_a_synthetic_output(memory_store, kind):
    session = ChatMemorySession(memory_on(memory_store, kind), "conv")
    run(
        session.add_items(
            [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "name": "slow", "arguments": "{}"},
            ]
        )
    )
    got = run(session.get_items())
    assert got[-1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "Error: " + MISSING_RESULT_TEXT,
    }


def test_pop_item_retracts_the_newest_item_with_its_partner_and_clear_session_deletes(
    memory_store, kind
):
    session = ChatMemorySession(memory_on(memory_store, kind), "conv")
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "done"}
    run(session.add_items([{"role": "user", "content": "hi"}, call, output]))
    assert run(session.pop_item()) == output
    assert run(session.get_items()) == [
        {"role": "user", "content": "hi"}
    ]  # the call went with its output
    retracted = [
        e for e in ChatMemory(memory_store).history("conv", include_retracted=True) if e.retracted
    ]
    assert [e.type for e in retracted] == [EventType.TOOL_CALL, EventType.TOOL_RESULT]
    assert run(session.pop_item()) == {"role": "user", "content": "hi"}
    assert run(session.pop_item()) is None
    run(session.add_items([{"role": "user", "content": "again"}]))
    run(session.clear_session())
    assert (
        run(session.get_items()) == []
        and ChatMemory(memory_store).history("conv", include_retracted=True) == []
    )


def test_the_sync_twins_refuse_an_async_memory_and_name_the_async_method(memory_store):
    session = ChatMemorySession(AsyncChatMemory(memory_store), "conv")
    with pytest.raises(
        ConfigurationError,
        match=r"items\(\) is synchronous .* AsyncChatMemory: use await session.get_items\(\)",
    ):
        session.items()
    with pytest.raises(
        ConfigurationError, match=r"use await session.add_items\(\) instead, or pass a ChatMemory"
    ):
        session.add([{"role": "user", "content": "hi"}])
    assert ChatMemory(memory_store).history("conv") == []
    with pytest.raises(
        ConfigurationError,
        match=r"memory \('memory://'\) must be a ChatMemory or an AsyncChatMemory",
    ):
        ChatMemorySession("memory://", "conv")  # type: ignore[arg-type]


# -- Runner.run with a model stub -----------------------------------------------------------


class ScriptedModel(Model):
    """A Model following tests/support/agent_script.py that records every input it is given."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.ids = itertools.count(1)

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
        **kwargs,
    ):
        items = (
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [dict(i) for i in input]
        )
        self.requests.append(items)
        last = items[-1]
        if last.get("type") == "function_call_output":
            move = agent_script.decide("tool", last["output"])
        else:
            content = last["content"]
            move = agent_script.decide(
                "user", content if isinstance(content, str) else content[0]["text"]
            )
        n = next(self.ids)
        if move.tool:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    name=move.tool,
                    arguments=json.dumps(move.arguments),
                    status="completed",
                )
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message",
                    id=f"msg_{n}",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(type="output_text", text=move.text, annotations=[])
                    ],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):
        raise NotImplementedError


@function_tool
async def lookup_order(
    order_id: int,
) -> str:  # async: the SDK runs a sync tool in asyncio.to_thread
    """Look up an order by its number."""
    return agent_script.lookup_order(order_id)


def converse(
    store, turns: int, kind: str = "sync"
) -> tuple[ChatMemory, ScriptedModel, dict[int, str]]:
    memory = memory_on(store, kind, compaction_strategy="turn_window", max_turns=4)
    model = ScriptedModel()
    agent = Agent(
        name="assistant",
        instructions="Search your history for earlier things.",
        model=model,
        tools=[lookup_order, search_tool(memory, "conv")],
    )
    session = ChatMemorySession(memory, "conv")
    answers: dict[int, str] = {}

    async def go() -> None:
        for turn in range(turns):
            result = await Runner.run(agent, agent_script.user_line(turn), session=session)
            answers[turn] = result.final_output
        if isinstance(memory, AsyncChatMemory) and memory.store.native:
            await memory.aclose()  # a native store's connections belong to this loop

    run(go())
    return view(memory), model, answers


def check_run(memory: ChatMemory, model: ScriptedModel, turns: int) -> None:
    for sent in model.requests:
        check_items(sent)
        validate_openai_messages(as_chat_messages(sent))
        assert (
            sum(i.get("role") == "user" for i in sent) <= 4 + 1
        )  # max_turns, plus the turn being answered
    history = memory.history("conv")
    assert sum(e.type is EventType.USER for e in history) == turns
    lookups = sum(1 for t in range(turns) if agent_script.user_line(t).startswith("Please"))
    recalls = sum(1 for t in agent_script.RECALL if t < turns)
    assert len(history) == turns * 2 + (lookups + recalls) * 2  # nothing stored twice
    assert memory.stats("conv").archived_events > 0


def test_runner_keeps_its_history_in_every_store(store, kind):
    memory, model, _ = converse(store, 7, kind)
    check_run(memory, model, 7)


@pytest.mark.parametrize("kind", ["sync", "async", "native"], indirect=True)
@pytest.mark.parametrize(
    "store_fixture", ["sqlite_store", pytest.param("redis_store", marks=pytest.mark.redis)]
)
def test_a_runner_conversation_of_50_turns(request, store_fixture, kind):
    memory, model, answers = converse(
        request.getfixturevalue(store_fixture), agent_script.TURNS, kind
    )
    check_run(memory, model, agent_script.TURNS)
    for turn, earlier in agent_script.RECALL.items():
        assert agent_script.code(earlier) in answers[turn] and "archived" in answers[turn]


def test_a_result_shown_as_a_stub_replays_its_item_with_the_stub_as_output(memory_store):
    memory = ChatMemory(
        memory_store,
        MemoryConfig(
            compaction_strategy="token_count",
            compress_tool_results=True,
            min_tool_result_compress_tokens=10,
            keep_recent_tool_results=0,
            max_tokens=100,
        ),
    )
    session = ChatMemorySession(memory, "conv")
    output = {"type": "function_call_output", "call_id": "c1", "output": "row " * 400}
    session.add(
        [
            {"role": "user", "content": "dump"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            output,
            {"role": "assistant", "content": "done"},
        ]
    )
    got = session.items()
    assert (
        got[2]["call_id"] == "c1"
        and got[2]["output"].startswith("[Output shortened")
        and 'tool_call_id "c1"' in got[2]["output"]
    )
    assert memory.history("conv")[2].metadata["openai_item"] == output  # stored whole
