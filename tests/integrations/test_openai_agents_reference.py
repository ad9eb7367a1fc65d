"""ChatMemorySession side by side with the SDK's own ``SQLiteSession``: the same calls through
both, on every store, comparing what the client sees (``get_items``), including a whole
``Runner.run`` conversation with a model stub implementing the SDK's Model interface. The
differences that remain are listed in docs/integrations.md; each is asserted here as such."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")

from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import (
    ResponseCodeInterpreterToolCall,
    ResponseComputerToolCall,
    ResponseFileSearchToolCall,
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall, McpListTools

from chat_memory import AsyncChatMemory, ChatMemory, ConfigurationError, EventType, open_store
from chat_memory.integrations.openai_agents import ChatMemorySession
from tests.support.validators import validate_openai_messages

set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise


def sessions(store: Any, settings: Any = None) -> tuple[ChatMemorySession, SQLiteSession]:
    return ChatMemorySession(ChatMemory(store), "conv", settings), SQLiteSession(
        "conv", ":memory:", session_settings=settings
    )


def dump(item: Any) -> dict[str, Any]:
    """An SDK output item as the Runner hands it to a session."""
    return item.model_dump(exclude_unset=True)


def say(text: str, item_id: str) -> dict[str, Any]:
    return dump(
        ResponseOutputMessage(
            type="message",
            id=item_id,
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
    )


def tool_turn(turn: int, item_id: str) -> list[dict[str, Any]]:
    """One turn of a model whose item ids (and call ids) repeat from turn to turn."""
    return [
        {"role": "user", "content": f"question {turn}"},
        dump(
            ResponseFunctionToolCall(
                type="function_call", id=item_id, call_id="call_0", name="lookup", arguments="{}"
            )
        ),
        {"type": "function_call_output", "call_id": "call_0", "output": f"result {turn}"},
        say(f"answer {turn}", item_id),
    ]


HOSTED = [
    dump(ResponseReasoningItem(type="reasoning", id="rs_1", summary=[])),
    dump(
        ResponseFunctionWebSearch(
            type="web_search_call",
            id="ws_1",
            status="completed",
            action={"type": "search", "query": "bluefin launch date"},
        )
    ),
    dump(
        ResponseFileSearchToolCall(
            type="file_search_call", id="fs_1", status="completed", queries=["bluefin"]
        )
    ),
    dump(
        ResponseCodeInterpreterToolCall(
            type="code_interpreter_call",
            id="ci_1",
            status="completed",
            code="print(1)",
            container_id="cntr_1",
            outputs=None,
        )
    ),
    dump(McpListTools(type="mcp_list_tools", id="ml_1", server_label="docs", tools=[])),
    dump(
        McpCall(
            type="mcp_call",
            id="mc_1",
            server_label="docs",
            name="read",
            arguments="{}",
            output="text",
        )
    ),
    dump(
        McpApprovalRequest(
            type="mcp_approval_request",
            id="mr_1",
            server_label="docs",
            name="write",
            arguments="{}",
        )
    ),
    {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": True},
    dump(
        ResponseComputerToolCall(
            type="computer_call",
            id="cu_1",
            call_id="cc_1",
            status="completed",
            pending_safety_checks=[],
            action={"type": "screenshot"},
        )
    ),
    {
        "type": "computer_call_output",
        "call_id": "cc_1",
        "output": {"type": "computer_screenshot", "image_url": "data:,"},
    },
]


async def add_to_both(
    ours: ChatMemorySession, ref: SQLiteSession, items: list[dict[str, Any]]
) -> None:
    await ours.add_items(items)
    await ref.add_items(items)


def test_items_with_repeated_ids_are_all_stored_and_replayed_as_given(store):
    ours, ref = sessions(store)

    async def go() -> None:
        for turn, item_id in enumerate(["__fake_id__", "1", "1"]):
            await add_to_both(ours, ref, tool_turn(turn, item_id))
        assert await ours.get_items() == await ref.get_items()
        assert len(await ours.get_items()) == 12  # nothing skipped: 3 turns of 4 items
        for limit in (1, 4, 5, 8, 12, 20):  # cuts that fall between whole steps
            assert await ours.get_items(limit) == await ref.get_items(limit), limit

    asyncio.run(go())
    history = ours.memory.history("conv")
    calls = [e.tool_call_id for e in history if e.type is EventType.TOOL_CALL]
    results = [e.tool_call_id for e in history if e.type is EventType.TOOL_RESULT]
    assert (
        calls == results == ["call_0", "call_0_2", "call_0_3"]
    )  # each pair stored under its own id
    assert len({e.id for e in history}) == 12 and "1" not in {e.id for e in history}


def test_hosted_tool_items_are_stored_and_replayed_verbatim(store):
    ours, ref = sessions(store)
    turn = [
        {"role": "user", "content": "When does Bluefin launch?"},
        *HOSTED,
        say("In May.", "msg_1"),
    ]

    async def go() -> None:
        await add_to_both(ours, ref, turn)
        await add_to_both(
            ours, ref, [{"role": "user", "content": "thanks"}, say("You're welcome.", "msg_2")]
        )
        assert await ours.get_items() == await ref.get_items()

    asyncio.run(go())
    found = ours.memory.search("conv", "bluefin launch date")
    assert [hit.type for hit in found.hits] == ["assistant"]  # the web search's query is searchable


def test_an_answered_call_id_reused_later_keeps_both_pairs(store):
    ours, ref = sessions(store)

    async def go() -> None:
        await add_to_both(ours, ref, tool_turn(0, "fc_1"))
        await add_to_both(
            ours, ref, tool_turn(1, "fc_1")[:2]
        )  # the reused call, its output in a later add
        await add_to_both(ours, ref, tool_turn(1, "fc_1")[2:])
        assert await ours.get_items() == await ref.get_items()

    asyncio.run(go())
    request = ours.memory.to_openai(
        "conv"
    )  # the stored pairs render as a valid request of their own
    ids = [
        call["id"]
        for message in request
        if message["role"] == "assistant"
        for call in message.get("tool_calls", [])
    ]
    assert len(ids) == len(set(ids)) == 2


def test_a_settings_dict_is_normalised_and_its_limit_is_the_default(store):
    ours, ref = sessions(store, {"limit": 2})
    assert ours.session_settings == ref.session_settings and ours.session_settings.limit == 2

    async def go() -> None:
        for turn in range(3):
            await add_to_both(
                ours, ref, [{"role": "user", "content": f"q{turn}"}, say(f"a{turn}", "1")]
            )
        assert await ours.get_items() == await ref.get_items() == (await ref.get_items(None))[-2:]
        assert await ours.get_items(limit=4) == await ref.get_items(limit=4)

    asyncio.run(go())
    with pytest.raises(TypeError, match="Unknown session settings: limt"):
        SQLiteSession("x", session_settings={"limt": 2})
    with pytest.raises(
        ConfigurationError,
        match=r"session_settings: unknown key 'limt' \(SessionSettings accepts: limit\)",
    ):
        ChatMemorySession(ours.memory, "conv", {"limt": 2})
    with pytest.raises(ConfigurationError, match=r"session_settings.limit \(-1\)"):
        ChatMemorySession(ours.memory, "conv", {"limit": -1})
    with pytest.raises(
        ConfigurationError,
        match=r"session_settings \('2'\) must be a SessionSettings, a dict or None",
    ):
        ChatMemorySession(ours.memory, "conv", "2")  # type: ignore[arg-type]


def gate_writes(store: Any) -> tuple[threading.Event, threading.Event]:
    """Make the store's writes wait for ``release``; ``started`` is set when one is waiting."""
    started, release = threading.Event(), threading.Event()
    for name in ("append", "append_compacting", "append_without_window", "clear"):
        method = getattr(store, name, None)
        if method is None:
            continue

        def gated(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            started.set()
            assert release.wait(60), "the test never released the write"
            return _method(*args, **kwargs)

        setattr(store, name, gated)
    return started, release


async def cancel_while_writing(
    coroutine: Any, started: threading.Event, release: threading.Event
) -> bool:
    """Cancel ``coroutine`` while its write is held; True when the cancellation arrived only
    after the write was let through."""
    task = asyncio.ensure_future(coroutine)
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    waited = not task.done()  # the write cannot have finished: it is held
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    return waited


@pytest.mark.parametrize("memory_kind", [ChatMemory, AsyncChatMemory])
def test_a_cancelled_write_finishes_before_the_cancellation_propagates(store, memory_kind):
    ours, ref = ChatMemorySession(memory_kind(store), "conv"), SQLiteSession("conv")
    first = [{"role": "user", "content": "q0"}, say("a0", "1")]
    second = [{"role": "user", "content": "q1"}, say("a1", "1")]

    async def go() -> None:
        await add_to_both(ours, ref, first)
        started, release = gate_writes(
            store
        )  # an AsyncChatMemory runs this sync store in its threads
        assert await cancel_while_writing(ours.clear_session(), started, release)
        await ref.clear_session()
        await add_to_both(ours, ref, second)  # lands after the clear, never wiped by it
        assert await ours.get_items() == await ref.get_items() == second
        started.clear()
        release.clear()
        assert await cancel_while_writing(ours.add_items(first), started, release)
        await ref.add_items(first)
        assert await ours.get_items() == await ref.get_items() == second + first  # stored, once

    asyncio.run(go())


def test_pop_item_removes_the_newest_item_as_the_sdk_does(store):
    ours, ref = sessions(store)

    async def go() -> None:
        await add_to_both(
            ours, ref, [{"role": "user", "content": "hi"}, say("hello", "1"), say("again", "1")]
        )
        for _ in range(2):
            assert await ours.pop_item() == await ref.pop_item()
            assert await ours.get_items() == await ref.get_items()
        await add_to_both(ours, ref, tool_turn(0, "1")[1:])
        assert await ours.pop_item() == await ref.pop_item()  # the message
        popped = await ours.pop_item()
        assert popped == await ref.pop_item() and popped["type"] == "function_call_output"
        # the one difference: the output's call goes with it, where SQLiteSession leaves it dangling
        assert (
            await ours.get_items()
            == (await ref.get_items())[:-1]
            == [{"role": "user", "content": "hi"}]
        )
        assert (await ref.get_items())[-1]["type"] == "function_call"
        await ref.pop_item()
        assert await ours.pop_item() == await ref.pop_item() == {"role": "user", "content": "hi"}
        assert await ours.pop_item() is None and await ref.pop_item() is None

    asyncio.run(go())


# -- Runner.run with a model stub -----------------------------------------------------------


class ReusingModel(Model):
    """A model whose ids repeat as real ones do: every call is ``call_0``, every item id
    ``"1"`` or ``__fake_id__``; it searches the web (a hosted tool) and calls ``lookup``."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

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
            output: list[Any] = [
                ResponseFunctionWebSearch(
                    type="web_search_call",
                    id="1",
                    status="completed",
                    action={"type": "search", "query": last["output"]},
                ),
                ResponseOutputMessage(
                    type="message",
                    id="__fake_id__",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text", text=f"Found {last['output']}.", annotations=[]
                        )
                    ],
                ),
            ]
        else:
            output = [
                ResponseReasoningItem(type="reasoning", id="1", summary=[]),
                ResponseFunctionToolCall(
                    type="function_call",
                    id="1",
                    call_id="call_0",
                    name="lookup",
                    arguments=f'{{"what": "{last["content"]}"}}',
                    status="completed",
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):
        raise NotImplementedError


@function_tool
async def lookup(what: str) -> str:
    """Look something up."""
    return f"facts about {what}"


async def converse(session: Any, turns: int) -> ReusingModel:
    model = ReusingModel()
    agent = Agent(name="assistant", instructions="Be brief.", model=model, tools=[lookup])
    for turn in range(turns):
        await Runner.run(
            agent,
            f"topic {turn}",
            session=session,
            run_config=RunConfig(session_settings={"limit": 100}),
        )
    return model


def test_a_runner_conversation_stores_what_the_sdk_session_stores(store):
    ours, ref = sessions(store, {"limit": 50})

    async def go() -> None:
        ours_model = await converse(ours, 3)
        ref_model = await converse(ref, 3)
        assert await ours.get_items(limit=1000) == await ref.get_items(limit=1000)
        assert ours_model.requests == ref_model.requests  # the model saw the same inputs

    asyncio.run(go())
    history = ours.memory.history("conv")
    assert (
        len(history) == 3 * 6
    )  # user, reasoning, call, output, web search, message: every one stored
    assert [e.tool_call_id for e in history if e.type is EventType.TOOL_CALL] == [
        "call_0",
        "call_0_2",
        "call_0_3",
    ]


# -- random traffic -------------------------------------------------------------------------

ITEM_IDS = st.sampled_from([None, "1", "__fake_id__", "msg_1"])


@st.composite
def conversations(draw: Any) -> list[list[dict[str, Any]]]:
    """Runner-shaped traffic from models whose ids repeat: turns of a user message and steps
    (a message, a hosted-tool item, or calls from a pool of four call ids followed by their
    outputs), split into ``add_items`` batches at random points."""
    items: list[dict[str, Any]] = []
    for turn in range(draw(st.integers(1, 4))):
        items.append({"role": "user", "content": f"q{turn}"})
        for n in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["message", "hosted", "calls"]))
            item_id = draw(ITEM_IDS)
            if kind == "message":
                items.append(
                    say(f"a{turn}.{n}", item_id)
                    if item_id
                    else {"role": "assistant", "content": f"a{turn}.{n}"}
                )
            elif kind == "hosted":
                items.append(draw(st.sampled_from(HOSTED[:7])))
            else:
                call_ids = draw(
                    st.lists(
                        st.sampled_from(["call_0", "call_1", "0", "c"]),
                        min_size=1,
                        max_size=3,
                        unique=True,
                    )
                )
                items += [
                    {
                        "type": "function_call",
                        "call_id": c,
                        "name": "f",
                        "arguments": "{}",
                        **({"id": item_id} if item_id else {}),
                    }
                    for c in call_ids
                ]
                items += [
                    {"type": "function_call_output", "call_id": c, "output": f"o{turn}.{n}"}
                    for c in call_ids
                ]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(items) - 1)), max_size=4)))
    return [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)]) if items[a:b]]


@settings(max_examples=60, deadline=None)
@given(batches=conversations(), pops=st.integers(0, 4))
def test_random_traffic_reads_back_as_the_sdk_session_reads_it(batches, pops):
    memory = ChatMemory(open_store("memory://"))
    ours, ref = ChatMemorySession(memory, "conv"), SQLiteSession("conv")
    popped = 0

    async def go() -> None:
        nonlocal popped
        for batch in batches:
            await add_to_both(ours, ref, batch)
        assert await ours.get_items() == await ref.get_items()
        for _ in range(pops):
            newest = await ref.get_items(limit=1)
            if newest and newest[-1].get("type") in ("function_call", "function_call_output"):
                break  # a pair is popped whole here, one item there (compared in the test above)
            assert await ours.pop_item() == await ref.pop_item()
            assert await ours.get_items() == await ref.get_items()
            popped += 1 if newest else 0

    asyncio.run(go())
    assert (
        len(memory.history("conv")) == sum(map(len, batches)) - popped
    )  # every item stored, none merged
    if memory.history("conv"):
        validate_openai_messages(
            memory.to_openai("conv")
        )  # reused call ids still render a valid request
