"""What the model sees when a tool fails or is called with hostile arguments: a short answer,
never an exception, never internals. A store failure is a generic error with an id (the
full exception is logged for the operator with the same id); nesting, huge integers, odd
argument shapes and enormous keywords are refused by name before anything recurses; the
adapters (LangChain, the OpenAI Agents SDK) and the host agent hold the same line, and
import_workflow refuses such files with a WorkflowError."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import (
    AsyncChatMemory,
    ChatMemory,
    Event,
    EventType,
    InvalidEventError,
    MemoryConfig,
    StorageError,
)
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.host import ChatWorkflow, import_workflow, load_template
from chat_memory.host.workflow import WorkflowError
from chat_memory.safe_json import (
    ECHO_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_DOCUMENT_DEPTH,
    MAX_INT_DIGITS,
    text_depth,
)
from chat_memory.templates import template_source
from tests.support.validators import validate_anthropic_body

GENERIC = re.compile(
    r"^Error: (conversation_search|fetch_tool_result) failed \(error id ([0-9a-f]{12})\); try again later\.$"
)
# what a driver's failure carries and the model must never see
SQL = "SELECT seq, envelope FROM chat_memory_events WHERE conversation_id = %(cid)s AND search_text LIKE %(p1)s"
INTERNALS = (
    "SELECT",
    "chat_memory_events",
    "db.internal.example",
    "10.9.8.7",
    "5432",
    "chat_admin",
    "Hunter2-secret",
    "OperationalError",
    "psycopg",
    "StorageError",
    "Traceback",
    "/var/lib",
)
#: the random error id in an answer (hex: "5432" may turn up in one by chance)
ERROR_ID = re.compile(r"error id [0-9a-f]{12}")


def leaked(text: str) -> list[str]:
    """The internals ``text`` shows, its error ids aside."""
    shown = ERROR_ID.sub("error id <id>", text)
    return [s for s in INTERNALS if s in shown]


def storage_failure() -> StorageError:
    driver = ConnectionError(
        'connection to server at "db.internal.example" (10.9.8.7), port 5432 failed: FATAL: '
        'password authentication failed for user "chat_admin" (password Hunter2-secret)'
    )
    try:
        raise StorageError(
            f"SQLStore.search failed: OperationalError: (psycopg.OperationalError) {driver} "
            f"[SQL: {SQL}] [parameters: {{'p1': '%bluefin%'}}] (/var/lib/chat.db)"
        ) from driver
    except StorageError as exc:
        return exc


def break_store(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read the tools make fails as a driver would, on this real store."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise storage_failure()

    for method in ("search", "load", "history", "find_tool_events"):
        if hasattr(store, method):
            monkeypatch.setattr(store, method, fail)


def nest(depth: int, leaf: Any = 1) -> Any:
    """A list nested ``depth`` deep, built without recursion."""
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def deep_text(depth: int) -> str:
    return '{"keyword": ' + "[" * depth + "]" * depth + "}"


def self_containing() -> dict[str, Any]:
    loop: dict[str, Any] = {"keyword": "x"}
    loop["again"] = loop
    return loop


#: (arguments, what the refusal must say)
HOSTILE_ARGUMENTS = {
    "text 1,000 deep": (deep_text(1_000), "nested 1,001 levels deep; at most 32"),
    "text 100,000 deep": (deep_text(100_000), "nested 100,001 levels deep; at most 32"),
    "dict 1,000 deep": ({"keyword": nest(1_000)}, "nested more than 32 levels deep"),
    "dict 100,000 deep": ({"keyword": nest(100_000)}, "nested more than 32 levels deep"),
    "dict holding itself": (self_containing(), "nested more than 32 levels deep"),
    "10,000-digit integer in text": (
        '{"keyword": "x", "page": ' + "7" * 10_000 + "}",
        "integer of 10,000 digits",
    ),
    "10,000-digit integer in a dict": (
        {"keyword": "x", "page": 7 * 10**9_999},
        "integer of about 10,000 digits",
    ),
    "a list": ([{"keyword": "x"}], "must be an object"),
    "a number": (42, "must be an object"),
    "nothing": (None, "must be an object"),
    "text that is not JSON": ("keyword=bluefin" * 10_000, "not valid JSON"),
    "keys that are no strings": ({1: "x", "keyword": "x"}, "argument names must be strings"),
}


def memory_with_history(
    store: Any = None, kind: str = "sync", page_size: int = 2
) -> ChatMemory | AsyncChatMemory:
    cls = AsyncChatMemory if kind == "async" else ChatMemory
    memory = cls(store or InMemoryStore(), MemoryConfig(search_page_size=page_size))
    sync = (
        memory if isinstance(memory, ChatMemory) else ChatMemory(memory.store.store, memory.config)
    )
    sync.add(
        "c",
        [
            Event.user("Our service is code-named Bluefin."),
            Event.tool_call("lookup", {"id": 7}, call_id="c1"),
            Event.tool_result("c1", "shipped"),
            Event.assistant("Bluefin it is."),
        ],
    )
    return memory


def answer_of(tool: Any, arguments: Any) -> Any:
    output = tool.run(arguments)
    return asyncio.run(output) if asyncio.iscoroutine(output) else output


def check_short_refusal(text: str, says: str) -> None:
    assert text.startswith("Error: ") and says in text, text
    assert len(text) < 400, len(text)


# -- a store failure inside a tool -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_store_failure_is_a_short_generic_answer_logged_in_full_with_the_same_id(
    store, kind, monkeypatch, caplog
):
    memory = memory_with_history(store, kind)
    break_store(store, monkeypatch)
    caplog.set_level(logging.ERROR, logger="chat_memory.tools")
    for tool, arguments in (
        (memory.search_tool("c"), {"keyword": "bluefin"}),
        (memory.fetch_tool("c"), {"tool_call_id": "c1"}),
    ):
        output = answer_of(tool, arguments)
        match = GENERIC.match(output.text)
        assert output.is_error and match and match.group(1) == tool.name, output.text
        assert not leaked(output.text)
        record = next(r for r in caplog.records if match.group(2) in r.getMessage())
        assert record.levelno == logging.ERROR and record.name == "chat_memory.tools"
        logged = caplog.text[caplog.text.index(match.group(2)) :]
        assert (
            SQL in logged and "db.internal.example" in logged and "Traceback" in logged
        )  # the operator's full story
        caplog.clear()


@pytest.mark.parametrize(
    "store_fixture", ["sqlite_store", pytest.param("postgres_store", marks=pytest.mark.postgres)]
)
def test_a_real_sql_failure_reaches_the_operator_and_not_the_model(request, store_fixture, caplog):
    store = request.getfixturevalue(store_fixture)
    memory = memory_with_history(store)
    with store.engine.begin() as connection:  # the real server now answers every read with an error
        connection.exec_driver_sql(f"DROP TABLE {store.tables.prefix}events")
    caplog.set_level(logging.ERROR, logger="chat_memory.tools")
    output = memory.search_tool("c").run({"keyword": "bluefin"})
    error_id = GENERIC.match(output.text).group(2)
    assert f"{store.tables.prefix}events" not in output.text and "SQL" not in output.text
    assert error_id in caplog.text and f"{store.tables.prefix}events" in caplog.text


def test_the_adapters_tools_answer_a_store_failure_generically(store, monkeypatch, caplog):
    from chat_memory.integrations.langchain import search_tools
    from chat_memory.integrations.openai_agents import search_tool

    memory = memory_with_history(store)
    break_store(store, monkeypatch)
    caplog.set_level(logging.ERROR, logger="chat_memory.tools")
    message = search_tools(memory, "c")[0].invoke(tool_call({"keyword": "bluefin"}))
    assert message.status == "error" and GENERIC.match(message.content)
    text = agents_invoke(search_tool(memory, "c"), '{"keyword": "bluefin"}')
    assert GENERIC.match(text) and not leaked(message.content + text)
    assert caplog.text.count("Traceback") == 2


# -- hostile arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE_ARGUMENTS)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_hostile_arguments_are_refused_by_name_and_briefly(case, kind):
    arguments, says = HOSTILE_ARGUMENTS[case]
    memory = memory_with_history(kind=kind)
    for tool in (memory.search_tool("c"), memory.fetch_tool("c")):
        output = answer_of(tool, arguments)
        assert output.is_error
        check_short_refusal(output.text, says)


def test_limits_hold_exactly_at_their_bounds():
    tool = memory_with_history().search_tool("c")
    at_limit = {"keyword": "bluefin", "page": 1, "x": nest(MAX_ARGUMENT_DEPTH - 1)}
    assert "unknown argument" in tool.run(at_limit).text  # parsed: 32 levels are accepted
    assert "nested" in tool.run({**at_limit, "x": nest(MAX_ARGUMENT_DEPTH)}).text
    assert (
        "nested" not in tool.run(json.dumps(at_limit)).text
        and "nested 33" in tool.run(json.dumps({**at_limit, "x": nest(32)})).text
    )
    assert "1 or more" in tool.run('{"keyword": "x", "page": -' + "9" * MAX_INT_DIGITS + "}").text
    assert (
        "101 digits"
        in tool.run('{"keyword": "x", "page": ' + "9" * (MAX_INT_DIGITS + 1) + "}").text
    )
    assert text_depth('["[[[[", {"a": "\\"[{"}]') == 2
    assert "past the last page" in tool({"keyword": "bluefin", "page": 1_000_000})
    assert "must be at most 1,000,000" in tool({"keyword": "bluefin", "page": 1_000_001})


def test_the_keyword_is_never_echoed_at_length():
    long_phrase = "the quarterly Bluefin migration plan " * 6  # 222 characters, found three times
    memory = ChatMemory(InMemoryStore(), MemoryConfig(search_page_size=1))
    memory.add("c", [Event.user(f"{long_phrase} ({i})") for i in range(3)])
    text = memory.search_tool("c")({"keyword": long_phrase.strip()})
    header, *_, hint = text.splitlines()
    assert long_phrase.strip()[:ECHO_CHARS] + "…" in header and len(header) < 150
    assert (
        hint == 'More results: call conversation_search again with the same keyword and "page": 2.'
    )
    missing = memory.search_tool("c")({"keyword": "zebra " * 60})
    assert (
        missing.startswith('No messages in this conversation match "zebra zebra')
        and len(missing) < 120
    )
    unknown = memory.fetch_tool("c").run({"tool_call_id": "call_" + "9" * 900})
    assert unknown.is_error and len(unknown.text) < 200
    enormous = memory.search_tool("c").run({"keyword": "x" * 129_000})
    assert (
        enormous.is_error and len(enormous.text) < 400
    )  # refused by the keyword cap, and cut anyway
    names = memory.search_tool("c").run(
        {"keyword": "x", **{f"{'n' * 1000}{i}": 1 for i in range(50)}}
    )
    assert names.is_error and "and 45 more" in names.text and len(names.text) < 400


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=60),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["keyword", "page", "match_mode", "tool_call_id"])
            | st.text(max_size=8),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
ANY_ARGUMENTS = st.one_of(
    JSON_VALUES,
    JSON_VALUES.map(json.dumps),
    st.text(),
    st.text(alphabet='[]{}":,-0123456789.eE \\nulltrufalse'),
    st.integers(0, 3_000).map(nest),
    st.integers(0, 3_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 20_000).map(lambda n: '{"keyword": "bluefin", "page": ' + "1" * n + "}"),
    st.fixed_dictionaries(
        {
            "keyword": st.text(min_size=1, max_size=3_000),
            "page": st.integers(),
            "match_mode": st.sampled_from(["phrase", "all", "any", "x"]),
        }
    ),
)


_PROPERTY_MEMORY = memory_with_history()  # one for every example: the tools only read it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_ARGUMENTS)
def test_the_tools_answer_anything_with_a_bounded_text(arguments):
    memory = _PROPERTY_MEMORY
    for tool in (memory.search_tool("c"), memory.fetch_tool("c")):
        output = tool.run(arguments)
        assert isinstance(output.text, str) and len(output.text) <= 4096
        assert not output.text.startswith("Error: ") or output.is_error
        assert "failed (error id" not in output.text  # bad input is never an unexpected failure


# -- the adapters ----------------------------------------------------------------------------


def tool_call(arguments: Any) -> dict[str, Any]:
    return {"name": "conversation_search", "args": arguments, "id": "call_1", "type": "tool_call"}


def agents_invoke(function_tool: Any, arguments: str) -> str:
    from agents.tool_context import ToolContext

    context = ToolContext(
        context=None, tool_name=function_tool.name, tool_call_id="call_1", tool_arguments=arguments
    )
    return asyncio.run(function_tool.on_invoke_tool(context, arguments))


@pytest.mark.parametrize(
    "case", [c for c, (a, _) in HOSTILE_ARGUMENTS.items() if isinstance(a, dict)]
)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_langchain_tools_answer_hostile_arguments_with_an_error_message(case, kind):
    from chat_memory.integrations.langchain import search_tools

    arguments, says = HOSTILE_ARGUMENTS[case]
    for tool in search_tools(memory_with_history(kind=kind), "c"):
        call = {**tool_call(arguments), "name": tool.name}
        message = tool.invoke(call) if kind == "sync" else asyncio.run(tool.ainvoke(call))
        assert message.status == "error" and message.tool_call_id == "call_1"
        check_short_refusal(message.content, says)


@pytest.mark.parametrize(
    "case", [c for c, (a, _) in HOSTILE_ARGUMENTS.items() if isinstance(a, str)]
)
def test_agents_sdk_function_tools_answer_hostile_arguments(case):
    from chat_memory.integrations.openai_agents import fetch_tool, search_tool

    arguments, says = HOSTILE_ARGUMENTS[case]
    for kind in ("sync", "async"):
        memory = memory_with_history(kind=kind)
        for function_tool in (search_tool(memory, "c"), fetch_tool(memory, "c")):
            check_short_refusal(agents_invoke(function_tool, arguments), says)


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_add_items_refuses_a_deep_item_whole_and_keeps_deep_arguments_text_verbatim(store, depth):
    from chat_memory.integrations.openai_agents import ChatMemorySession

    memory = ChatMemory(store)
    session = ChatMemorySession(memory, "conv")
    deep_part = [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "x", "extra": nest(depth)}]},
    ]
    with pytest.raises(
        InvalidEventError, match=r"items\[1\] is nested more than 100 levels deep; at most 100"
    ):
        asyncio.run(session.add_items(deep_part))
    huge = [{"role": "user", "content": [{"type": "input_text", "text": "x", "n": 10**5_000}]}]
    with pytest.raises(
        InvalidEventError, match=r"items\[0\] holds an integer of about 5,001 digits"
    ):
        asyncio.run(session.add_items(huge))
    assert memory.history("conv") == []  # nothing of either list, the user message included
    raw = "[" * depth + "]" * depth
    asyncio.run(
        session.add_items(
            [
                {"role": "user", "content": "Hi"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": raw},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ]
        )
    )
    call = memory.history("conv")[1]
    assert (
        call.arguments == {} and call.metadata["raw_arguments"] == raw
    )  # as the SDK's SQLiteSession keeps it
    assert asyncio.run(session.get_items())[1]["arguments"] == raw


def test_langchain_history_refuses_deep_messages_whole():
    from langchain_core.messages import AIMessage, HumanMessage

    from chat_memory.integrations.langchain import ChatMemoryHistory

    memory = ChatMemory(InMemoryStore())
    history = ChatMemoryHistory(memory, "conv")
    for depth in (1_000, 100_000):
        with pytest.raises(
            InvalidEventError, match=r"messages\[1\]\.content is nested more than 100"
        ):
            history.add_messages(
                [
                    HumanMessage("Hi"),
                    HumanMessage(
                        [{"type": "text", "text": "x"}, {"type": "image", "x": nest(depth)}]
                    ),
                ]
            )
        with pytest.raises(
            InvalidEventError,
            match=r"messages\[1\]\.tool_calls\[0\]\.args are nested more than 100",
        ):
            history.add_messages(
                [
                    HumanMessage("Hi"),
                    AIMessage(
                        "", tool_calls=[{"name": "f", "args": {"a": nest(depth)}, "id": "t1"}]
                    ),
                ]
            )
    assert memory.history("conv") == []
    history.add_messages(
        [
            HumanMessage(
                [
                    {"type": "text", "text": "ok"},
                    {"type": "image", "x": nest(MAX_DOCUMENT_DEPTH - 2)},
                ]
            )
        ]
    )
    assert len(memory.history("conv")) == 1


def test_an_agents_sdk_run_carries_on_after_a_deeply_nested_tool_call():
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from chat_memory.integrations.openai_agents import ChatMemorySession, search_tool

    set_tracing_disabled(True)
    # 300 levels: the SDK's Runner itself json.loads the arguments (to dedupe calls) before any
    # tool runs, and raises RecursionError at about 1,000 levels, outside chat-memory's reach
    deep = '{"keyword": ' + "[" * 300 + "]" * 300 + "}"

    class DeepModel(Model):
        async def get_response(
            self, system_instructions, input, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            last = input[-1] if isinstance(input, list) else {}
            if last.get("type") == "function_call_output":
                content = [
                    ResponseOutputText(
                        type="output_text", text=f"Tool said: {last['output']}", annotations=[]
                    )
                ]
                output = [
                    ResponseOutputMessage(
                        type="message",
                        id="m1",
                        role="assistant",
                        status="completed",
                        content=content,
                    )
                ]
            else:
                output = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        id="f1",
                        call_id="c1",
                        name="conversation_search",
                        arguments=deep,
                        status="completed",
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    memory = ChatMemory(InMemoryStore())
    agent = Agent(name="a", model=DeepModel(), tools=[search_tool(memory, "conv")])
    result = asyncio.run(
        Runner.run(agent, "What did I say?", session=ChatMemorySession(memory, "conv"))
    )
    assert "nested 301 levels deep; at most 32" in result.final_output
    stored = memory.history("conv")
    assert [e.type for e in stored] == [
        EventType.USER,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT,
    ]
    assert stored[1].metadata["raw_arguments"] == deep and len(stored[2].content) < 200


# -- the host agent --------------------------------------------------------------------------


def claude(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def host_run(store: Any, tool_input: Any) -> tuple[Any, list[dict[str, Any]], ChatWorkflow]:
    """One turn of the template's agent whose model calls conversation_search with
    ``tool_input`` and then answers with what the tool said; the requests it was sent."""
    requests: list[dict[str, Any]] = []

    def respond(request: Any) -> httpx2.Response:
        body = json.loads(request.content)
        validate_anthropic_body(body)
        requests.append(body)
        results = [
            b
            for b in body["messages"][-1]["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if results:
            return httpx2.Response(
                200, json=claude([{"type": "text", "text": f"Tool said: {results[0]['content']}"}])
            )
        if "code name" not in json.dumps(body["messages"][-1]["content"]):
            return httpx2.Response(200, json=claude([{"type": "text", "text": "Noted."}]))
        use = {
            "type": "tool_use",
            "id": f"toolu_{len(requests)}",
            "name": "conversation_search",
            "input": tool_input,
        }
        return httpx2.Response(200, content=json.dumps(claude([use], "tool_use")).encode())

    client = anthropic.Anthropic(
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(respond)),
    )
    runner = ChatWorkflow(load_template("compacting-chat"), client=client, store=store)
    runner.send("c", "Our service is code-named Bluefin.")
    return runner.send("c", "What was the code name?"), requests, runner


@pytest.mark.parametrize(
    "tool_input",
    [{"keyword": nest(300)}, {"keyword": "x", "page": 10**200}, {"keyword": nest(100, {})}],
)
def test_the_host_answers_a_hostile_tool_input_with_an_error_and_finishes_the_turn(tool_input):
    store = InMemoryStore()
    run, requests, runner = host_run(store, tool_input)
    assert run.reply.startswith("Tool said: Error: the tool input ")
    assert ("nested more than 32" in run.reply) or ("201 digits" in run.reply)
    events = runner.memory("c").history("c")
    call, result = events[-3], events[-2]
    assert (
        call.type is EventType.TOOL_CALL
        and call.arguments == {}
        and result.is_error
        and len(result.content) < 300
    )
    assert run.turn.tool_calls[0].arguments == {}


def test_a_store_failure_in_the_hosts_tool_is_stored_and_shown_generically(
    store, monkeypatch, caplog
):
    caplog.set_level(logging.ERROR, logger="chat_memory.tools")
    run, requests, runner = host_run(store, {"keyword": "bluefin"})
    assert run.reply.startswith("Tool said: Results 1-1 of 1")
    # the store now fails under the tool's search only: the agent's own reads and writes work
    monkeypatch.setattr(store, "search", lambda *a, **k: (_ for _ in ()).throw(storage_failure()))
    run = runner.send("c", "And the code name again?")
    said = run.reply.removeprefix("Tool said: ")
    assert GENERIC.match(said) and not leaked(json.dumps(requests[-1]))
    stored = [e for e in runner.memory("c").history("c") if e.type is EventType.TOOL_RESULT][-1]
    assert (
        stored.content == said and stored.is_error and GENERIC.match(said).group(2) in caplog.text
    )


def test_a_host_tool_that_raises_anything_is_answered_generically(caplog):
    from chat_memory.host.agent import Agent
    from chat_memory.tools import ToolOutput

    class Exploding:
        name = "explode"

        def definition(self) -> dict[str, Any]:
            return {"name": self.name, "description": "x", "input_schema": {"type": "object"}}

        def run(self, arguments: Any) -> ToolOutput:
            raise KeyError("/etc/secret.conf on host db.internal.example")

    use = type("Use", (), {"name": "explode", "input": {}, "id": "t1"})()
    output = Agent._run_tool({"explode": Exploding()}, use)
    assert re.match(
        r"^Error: explode failed \(error id [0-9a-f]{12}\); try again later\.$", output.text
    )
    assert "secret.conf" in caplog.text and "secret.conf" not in output.text


# -- import_workflow ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("[" * 1_000 + "]" * 1_000, "nested 1,000 levels deep; at most 100"),
        (
            '{"nodes": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}",
            "nested 100,002 levels deep",
        ),
        ('{"formatVersion": ' + "1" * 10_000 + "}", "integer of 10,000 digits; at most 100"),
        (self_containing(), "nested more than 100 levels deep"),
        (
            {"nodes": [{"name": "a", "parameters": {"x": 10**10_000}}]},
            "integer of about 10,001 digits",
        ),
        ({"nodes": nest(5_000)}, "nested more than 100 levels deep"),
        ("{", "not valid JSON"),
    ],
)
def test_import_workflow_refuses_deep_and_huge_json_with_a_workflow_error(source, says):
    with pytest.raises(WorkflowError, match=re.escape(says)):
        import_workflow(source)


def test_the_bundled_templates_fit_the_limits():
    for name in ("compacting-chat", "remembering-chat"):
        assert import_workflow(json.dumps(template_source(name))).name == name
