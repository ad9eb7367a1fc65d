"""The runtime: the template run through the real anthropic SDK over a mock HTTP transport,
the tool loop (round trip, errors, bound, crash mid-turn), summarizer sub-nodes, storage
named by the memory node, and the scripted stand-in model."""

from __future__ import annotations

import copy
import json
import uuid

import anthropic
import httpx2
import pytest

from chat_memory import EventType, open_store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.host import ChatWorkflow, import_workflow, load_template
from chat_memory.host.agent import ROUND_LIMIT_MESSAGE
from chat_memory.host.demo import DEMO_MESSAGES, run_demo
from chat_memory.render import to_anthropic
from chat_memory.summarizer import SUMMARY_SYSTEM_PROMPT
from chat_memory.templates import template_source
from chat_memory.testing.scripted_model import ScriptedModel, scripted_client
from tests.support.validators import validate_anthropic_body, validate_anthropic_request

CID = "conv ../* %{}'\"ü"


def message(content, stop_reason="end_turn", model="claude-sonnet-5-5"):
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def text(value):
    return {"type": "text", "text": value}


def tool_use(call_id, arguments, name="conversation_search"):
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


class FakeClaude:
    """Records every request body the SDK sends and answers with ``respond(body, index)``."""

    def __init__(self, respond):
        self.respond = respond
        self.requests = []

    def __call__(self, request):
        body = json.loads(request.content)
        validate_anthropic_body(body)
        self.requests.append(body)
        answer = self.respond(body, len(self.requests) - 1)
        if isinstance(answer, httpx2.Response):
            return answer
        return httpx2.Response(200, json=answer)

    def client(self):
        return anthropic.Anthropic(
            api_key="test",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
        )


def last_blocks(body):
    content = body["messages"][-1]["content"]
    return content if isinstance(content, list) else [text(content)]


def searching_claude(body, index):
    """Notes facts; asked about earlier, searches for 'bluefin'; answers from the tool result."""
    results = [b for b in last_blocks(body) if b["type"] == "tool_result"]
    if results:
        return message([text("I searched: the code name was Bluefin.")])
    question = last_blocks(body)[0]["text"]
    if question.startswith("What was"):
        return message(
            [text("Let me search."), tool_use("toolu_q1", {"keyword": "bluefin"})], "tool_use"
        )
    return message([text("Noted.")])


TURNS = [
    "Our new service is code-named Bluefin.",
    "The order id is ORD-4512.",
    "The file is /etc/bluefin.yaml.",
    "The deadline is Friday.",
]


def test_template_run_with_a_tool_use_round_trip_through_the_sdk():
    fake = FakeClaude(searching_claude)
    store = InMemoryStore()
    runner = ChatWorkflow(load_template("compacting-chat"), client=fake.client(), store=store)
    for turn in TURNS:
        assert runner.send(CID, turn).reply == "Noted."
    memory = runner.memory(CID)
    assert memory.stats(CID).archived_events == 2  # turn 1 left the window of 3 turns
    before = len(fake.requests)

    run = runner.send(CID, "What was the code name of our service?")

    assert run.reply == "I searched: the code name was Bluefin."
    assert run.outputs["reply_1"] == {"text": run.reply}
    assert [c.arguments for c in run.turn.tool_calls] == [{"keyword": "bluefin"}]
    first, second = fake.requests[before:]
    # The window: the last 3 turns (turns 1 and 2 were archived when the question arrived).
    shown = [b.get("text") for m in first["messages"] for b in m["content"]]
    assert shown == [
        TURNS[2],
        "Noted.",
        TURNS[3],
        "Noted.",
        "What was the code name of our service?",
    ]
    assert "Bluefin" not in json.dumps(first["messages"])
    assert first["model"] == "claude-sonnet-5-5" and first["max_tokens"] == 1024
    assert "visible history is short" in first["system"][0]["text"]
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"] == [memory.search_tool(CID).definition()]
    assert "tool_choice" not in first
    # The tool round trip: tool_use in the assistant message, its result in the next user message.
    assert second["messages"][-2]["content"][-1] == tool_use("toolu_q1", {"keyword": "bluefin"})
    result = second["messages"][-1]["content"][0]
    assert (
        result["type"] == "tool_result"
        and result["tool_use_id"] == "toolu_q1"
        and "is_error" not in result
    )
    assert "code-named Bluefin" in result["content"] and "archived" in result["content"]
    # The turn's events, stored in order: user, then the model's step, then the answer.
    turn = memory.history(CID)[-5:]
    assert [e.type for e in turn] == [
        EventType.USER,
        EventType.ASSISTANT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT,
    ]
    assert [e.seq for e in turn] == list(range(turn[0].seq, turn[0].seq + 5))
    assert turn[2].tool_call_id == turn[3].tool_call_id == "toolu_q1"
    assert turn[2].arguments == {"keyword": "bluefin"} and "Bluefin" in turn[3].content
    assert turn[4].content == run.reply
    assert [e.archived for e in memory.history(CID)[:4]] == [True] * 4


def test_tool_errors_go_back_to_the_model_as_is_error_results():
    def respond(body, index):
        if index == 0:
            return message(
                [
                    tool_use("t_blank", {"keyword": "  "}),
                    tool_use("t_unknown", {}, name="web_search"),
                ],
                "tool_use",
            )
        return message([text("Sorry, the search failed.")])

    fake = FakeClaude(respond)
    runner = ChatWorkflow(
        load_template("compacting-chat"), client=fake.client(), store=InMemoryStore()
    )
    run = runner.send("c", "What did I say first?")
    results = fake.requests[1]["messages"][-1]["content"]
    assert [(r["tool_use_id"], r.get("is_error")) for r in results] == [
        ("t_blank", True),
        ("t_unknown", True),
    ]
    assert (
        "keyword" in results[0]["content"] and "no tool named 'web_search'" in results[1]["content"]
    )
    stored = [e for e in runner.memory("c").history("c") if e.type is EventType.TOOL_RESULT]
    assert [e.is_error for e in stored] == [True, True]
    assert run.reply == "Sorry, the search failed."


def test_the_tool_loop_is_bounded_and_every_call_gets_a_result():
    source = copy.deepcopy(template_source("compacting-chat"))
    source["nodes"][1]["parameters"]["maxToolRounds"] = 2
    fake = FakeClaude(lambda body, i: message([tool_use(f"t{i}", {"keyword": "x"})], "tool_use"))
    runner = ChatWorkflow(import_workflow(source), client=fake.client(), store=InMemoryStore())
    run = runner.send("c", "Loop forever?")
    assert run.turn.model_calls == 3
    assert [r.get("tool_choice") for r in fake.requests] == [None, None, {"type": "none"}]
    history = runner.memory("c").history("c")
    calls = [e.tool_call_id for e in history if e.type is EventType.TOOL_CALL]
    results = [e for e in history if e.type is EventType.TOOL_RESULT]
    assert calls == [e.tool_call_id for e in results] == ["t0", "t1", "t2"]
    assert results[-1].is_error and results[-1].content == ROUND_LIMIT_MESSAGE


def test_a_crash_mid_turn_loses_nothing_already_answered():
    def respond(body, index):
        if index == 0:
            return message([tool_use("t1", {"keyword": "bluefin"})], "tool_use")
        if index == 1:
            return httpx2.Response(
                500, json={"type": "error", "error": {"type": "api_error", "message": "boom"}}
            )
        return message([text("Back again.")])

    fake = FakeClaude(respond)
    runner = ChatWorkflow(
        load_template("compacting-chat"), client=fake.client(), store=InMemoryStore()
    )
    with pytest.raises(anthropic.InternalServerError):
        runner.send("c", "What was the code name?")
    history = runner.memory("c").history("c")
    assert [e.type for e in history] == [EventType.USER, EventType.TOOL_CALL, EventType.TOOL_RESULT]
    assert runner.send("c", "Hello?").reply == "Back again."
    system, messages = to_anthropic(runner.memory("c").window("c"))
    validate_anthropic_request(system, messages)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def test_a_summarizing_memory_uses_its_summarizer_sub_node():
    source = copy.deepcopy(template_source("compacting-chat"))
    memory_node = source["nodes"][1]["clusterElements"]["memory"]
    memory_node["parameters"] = {
        "conversationId": "${chat_1.conversationId}",
        "compactionStrategy": "recursive_summarization",
        "maxEvents": 4,
        "maxEventsToKeep": 2,
        "overlapSize": 1,
        "enableConversationSearchTool": True,
    }
    model = ScriptedModel()
    runner = ChatWorkflow(
        import_workflow(source), client=scripted_client(model), store=InMemoryStore()
    )
    for message_text in DEMO_MESSAGES[:4]:
        runner.send("c", message_text)
    window = runner.memory("c").window("c")
    assert window[0].type is EventType.SUMMARY and "Bluefin" in window[0].content
    summaries = [r for r in model.requests if r.get("system") == SUMMARY_SYSTEM_PROMPT]
    assert summaries and {r["model"] for r in summaries} == {"claude-haiku-5-5"}
    agent_request = model.requests[-1]
    assert "conversation_summary" in agent_request["messages"][0]["content"][0]["text"]


def _summarizing_runner(respond, store, **parameters) -> tuple[ChatWorkflow, FakeClaude]:
    source = copy.deepcopy(template_source("compacting-chat"))
    source["nodes"][1]["clusterElements"]["memory"]["parameters"] = {
        "conversationId": "${chat_1.conversationId}",
        "compactionStrategy": "recursive_summarization",
        "maxEvents": 4,
        "maxEventsToKeep": 2,
        "overlapSize": 0,
        **parameters,
    }
    fake = FakeClaude(respond)
    return ChatWorkflow(import_workflow(source), client=fake.client(), store=store), fake


def summarizer_answers_blank(body, index):
    """The agent's replies are "Noted."; every summary comes back empty (a SummarizerError)."""
    if body.get("system") == SUMMARY_SYSTEM_PROMPT:
        return message([], stop_reason="max_tokens", model=body["model"])
    return message([text("Noted.")])


def test_the_summarizer_failures_of_one_message_count_at_the_next():
    # each message is two adds (the user's, then the reply), each a compaction trigger once
    # over the limit: message 3 fails twice, and the third failure in a row falls back at the
    # first add of message 4 (a count kept per message never got past 2)
    store = InMemoryStore()
    runner, fake = _summarizing_runner(
        summarizer_answers_blank, store, summarizerFailuresBeforeFallback=3
    )
    for i in range(3):
        runner.send("c", f"message {i}")
    assert store.load("c").archived_count == 0
    runner.send("c", "message 3")
    assert store.load("c").archived_count > 0
    summaries = [r for r in fake.requests if r.get("system") == SUMMARY_SYSTEM_PROMPT]
    assert len(summaries) == 3
    [record] = runner.memory("c").compactions("c")
    assert record.fallback and "no summary text" in (record.reason or "")
    stats = runner.memory("c").stats("c")
    assert stats.compaction_failures == 1  # the fallback's own error, recorded after it
    assert "archived without a new summary" in (stats.last_compaction_error or "")


def test_the_runner_keeps_one_memory_per_store_config_and_summarizer():
    store = InMemoryStore()
    runner, _ = _summarizing_runner(summarizer_answers_blank, store)
    first = runner.memory("c")
    runner.send("c", "hello")
    runner.send("other", "hello")
    assert runner.memory("c") is first and runner.memory("other") is first
    runner.close()
    assert runner.memory("c") is not first  # a closed runner builds afresh


@pytest.mark.parametrize("node", ["jdbcChatMemory/v2", "inMemoryChatMemory/v2", "chatMemory/v2"])
def test_the_memory_node_names_the_store(node, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    monkeypatch.setenv("CHAT_MEMORY_URL", url)
    source = copy.deepcopy(template_source("compacting-chat"))
    memory_node = source["nodes"][1]["clusterElements"]["memory"]
    memory_node["type"] = node
    if node.startswith("jdbc"):
        memory_node["parameters"]["url"] = url
    with ChatWorkflow(import_workflow(source), client=scripted_client()) as runner:
        runner.send("c", "First fact: the code name is Bluefin.")
        assert len(runner.memory("c").history("c")) == 2
    if node != "inMemoryChatMemory/v2":
        with open_store(url) as store:
            assert [e.content for e in store.history("c")][
                0
            ] == "First fact: the code name is Bluefin."


def test_without_the_search_tool_no_tools_are_sent():
    source = copy.deepcopy(template_source("compacting-chat"))
    source["nodes"][1]["clusterElements"]["memory"]["parameters"][
        "enableConversationSearchTool"
    ] = False
    fake = FakeClaude(lambda body, i: message([text("ok")]))
    ChatWorkflow(import_workflow(source), client=fake.client(), store=InMemoryStore()).send(
        "c", "What was first?"
    )
    assert "tools" not in fake.requests[0]


def test_the_scripted_demo_searches_and_finds_the_first_fact():
    lines = []
    runner = ChatWorkflow(
        load_template("compacting-chat"), client=scripted_client(), store=InMemoryStore()
    )
    assert run_demo(runner, "memory://", "demo-test", lines.append) == 0
    output = "\n".join(lines)
    assert "scripted stand-in model" in output
    assert "found the first fact (Bluefin): yes" in output
    assert 'search happened:  yes, conversation_search {"keyword": "first fact"}' in output
    stats = runner.memory("demo-test").stats("demo-test")
    assert stats.turns == 3 and stats.archived_events == 10


def _remote_node_params(kind, request):
    suffix = uuid.uuid4().hex[:12]
    if kind == "redisChatMemory/v2":
        server = request.getfixturevalue("redis_server")
        return {"url": server.url, "keyPrefix": f"node-{suffix}:", "ttlSeconds": 3600}
    endpoint = request.getfixturevalue("moto_server")
    return {
        "bucket": "chat-memory-nodes",
        "prefix": f"node-{suffix}",
        "region": "us-east-1",
        "endpointUrl": endpoint,
    }


@pytest.mark.parametrize(
    "node",
    [
        pytest.param("redisChatMemory/v2", marks=pytest.mark.redis),
        pytest.param("awsS3ChatMemory/v2", marks=pytest.mark.s3),
    ],
)
def test_redis_and_s3_nodes_open_their_stores_from_their_fields(node, request):
    source = copy.deepcopy(template_source("compacting-chat"))
    memory_node = source["nodes"][1]["clusterElements"]["memory"]
    memory_node["type"] = node
    memory_node["parameters"].update(_remote_node_params(node, request))
    with ChatWorkflow(import_workflow(source), client=scripted_client()) as runner:
        for text_ in DEMO_MESSAGES:
            run = runner.send("c/../*", text_)
        assert "code-named Bluefin" in run.reply
        settings = runner.memory_settings("c/../*")
        url, options = settings.store_target()
    with open_store(url, **options) as store:
        history = store.history("c/../*")
        assert history[0].content == DEMO_MESSAGES[0] and history[0].archived
        assert store.load("c/../*").window.turn_count() == 3
