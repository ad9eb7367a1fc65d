"""The workflow format: the compacting-chat template, import validation (one test per error
kind), expressions, and old node versions still loading."""

from __future__ import annotations

import copy
import json

import pytest
from jsonschema import Draft202012Validator

from chat_memory import ConfigurationError
from chat_memory.host import WorkflowError, default_registry, import_workflow, load_template
from chat_memory.host.expressions import references, resolve
from chat_memory.templates import template_names, template_source

TEMPLATE = template_source("compacting-chat")


def test_compacting_chat_template_is_bundled_and_shaped_as_specified():
    assert "compacting-chat" in template_names()
    workflow = load_template("compacting-chat")
    assert workflow.title == "Chat that compacts its history"
    assert [n.name for n in workflow.order()] == ["chat_1", "agent_1", "reply_1"]
    trigger, agent, reply = (workflow.node(n) for n in ("chat_1", "agent_1", "reply_1"))
    assert trigger.type == "newChatRequest/v1"
    assert set(trigger.definition.outputs) >= {"conversationId", "message"}
    assert agent.type == "aiAgent/v1"
    assert agent.element("model").parameters["model"] == "claude-sonnet-5-5"
    prompt = agent.parameters["systemPrompt"].lower()
    assert "visible history is short" in prompt and "conversation_search" in prompt
    assert "say that you searched" in prompt
    memory = agent.element("memory")
    assert memory.type == "chatMemory/v2"
    assert memory.parameters == {
        "conversationId": "${chat_1.conversationId}",
        "compactionStrategy": "turn_window",
        "maxTurns": 3,
        "compactToRatio": 1.0,
        "enableConversationSearchTool": True,
        "searchPageSize": 10,
    }
    summarizer = memory.element("summarizerModel")
    assert (
        summarizer.type == "anthropicChatModel/v1"
        and summarizer.parameters["model"] == "claude-haiku-5-5"
    )
    assert reply.type == "reply/v1" and reply.parameters["text"] == "${agent_1.text}"


def test_template_parameters_validate_against_their_node_schemas():
    registry = default_registry()
    workflow = load_template("compacting-chat")
    for node in workflow.all_nodes():
        Draft202012Validator(registry.get(node.type).schema()).validate(node.parameters)


def _broken(change):
    data = copy.deepcopy(TEMPLATE)
    change(data)
    return data


def _memory(data):
    return data["nodes"][1]["clusterElements"]["memory"]


BAD_WORKFLOWS = {
    "unknown node type": (
        lambda d: d["nodes"][1]["clusterElements"]["memory"].update(type="mongoChatMemory/v2"),
        r"node 'memory_1': unknown node type 'mongoChatMemory/v2'",
    ),
    "unknown version": (
        lambda d: _memory(d).update(type="chatMemory/v9"),
        r"node 'memory_1': node type 'chatMemory/v9' has no version 9; registered: chatMemory/v1, chatMemory/v2",
    ),
    "malformed type": (
        lambda d: d["nodes"][0].update(type="newChatRequest"),
        r"node 'chat_1': node type \('newChatRequest'\) must look like",
    ),
    "unclosed expression": (
        lambda d: _memory(d)["parameters"].update(conversationId="${chat_1.conversationId"),
        r"node 'memory_1', field 'conversationId': expression in '\$\{chat_1.conversationId' is not closed",
    ),
    "expression without a path": (
        lambda d: _memory(d)["parameters"].update(conversationId="${chat_1}"),
        r"field 'conversationId': expression \$\{chat_1\} .* must be \$\{node.output\}",
    ),
    "reference to a missing node": (
        lambda d: _memory(d)["parameters"].update(conversationId="${chat_9.conversationId}"),
        r"node 'memory_1', field 'conversationId': \$\{chat_9.conversationId\} refers to a missing node 'chat_9'",
    ),
    "reference to a missing output": (
        lambda d: _memory(d)["parameters"].update(conversationId="${chat_1.sessionId}"),
        r"node 'chat_1' \(newChatRequest/v1\) has no output 'sessionId'; outputs: conversationId, message",
    ),
    "invalid field value": (
        lambda d: _memory(d)["parameters"].update(maxTurns=0),
        r"node 'memory_1' \(chatMemory/v2\): Max turns \(0\) must be greater than 0",
    ),
    "invalid enum value": (
        lambda d: _memory(d)["parameters"].update(compactionStrategy="forget_everything"),
        r"Compaction strategy \('forget_everything'\) must be one of",
    ),
    "missing summarizer model": (
        lambda d: (
            _memory(d)["parameters"].update(compactionStrategy="recursive_summarization"),
            _memory(d).pop("clusterElements"),
        ),
        r"node 'memory_1' \(chatMemory/v2\): Summarizer model \(None\) must be configured for recursive summarization",
    ),
    "unknown field": (
        lambda d: _memory(d)["parameters"].update(maxTurnz=3),
        r"node 'memory_1' \(chatMemory/v2\): Unknown field 'maxTurnz' \(value 3\)",
    ),
    "agent field of the wrong type": (
        lambda d: d["nodes"][1]["parameters"].update(maxToolRounds="many"),
        r"node 'agent_1' \(aiAgent/v1\): Max tool rounds \('many'\) must be a whole number",
    ),
    "model answer longer than a non-streaming request allows": (
        lambda d: d["nodes"][1]["clusterElements"]["model"]["parameters"].update(maxTokens=21334),
        r"node 'model_1' \(anthropicChatModel/v1\): Max tokens \(21334\) must be at most 16384",
    ),
    "duplicate node name": (
        lambda d: d["nodes"][2].update(name="chat_1"),
        r"node 'chat_1' is defined twice",
    ),
    "bad node name": (
        lambda d: d["nodes"][2].update(name="reply 1"),
        r"node name \('reply 1'\) must be letters, digits and _",
    ),
    "unknown sub-node slot": (
        lambda d: d["nodes"][1]["clusterElements"].update(
            gadgets=_memory(d)["clusterElements"]["summarizerModel"]
        ),
        r"node 'agent_1' \(aiAgent/v1\) has no sub-node slot 'gadgets'",
    ),
    "sub-node of the wrong kind": (
        lambda d: d["nodes"][1]["clusterElements"].update(
            model=copy.deepcopy(_memory(d)) | {"name": "mem_2"}
        ),
        r"node 'agent_1': slot 'model' takes a model node, not chatMemory/v2",
    ),
    "missing required sub-node": (
        lambda d: d["nodes"][1]["clusterElements"].pop("model"),
        r"node 'agent_1' \(aiAgent/v1\) needs a sub-node in its 'model' slot",
    ),
    "edge to a missing node": (
        lambda d: d["edges"].append({"from": "reply_1", "to": "email_1"}),
        r"edges\[2\].to \('email_1'\) is not a top-level node",
    ),
    "cycle": (
        lambda d: d["edges"].append({"from": "reply_1", "to": "chat_1"}),
        r"has a cycle",
    ),
    "no nodes": (lambda d: d.update(nodes=[]), r"nodes \(\[\]\) must be a non-empty list"),
    "newer format": (lambda d: d.update(formatVersion=2), r"formatVersion \(2\) is not supported"),
}


@pytest.mark.parametrize("kind", list(BAD_WORKFLOWS))
def test_import_refuses_with_a_clear_error(kind):
    change, message = BAD_WORKFLOWS[kind]
    with pytest.raises(WorkflowError, match=message):
        import_workflow(_broken(change))


def test_import_errors_are_configuration_errors_and_json_text_is_accepted():
    assert issubclass(WorkflowError, ConfigurationError)
    assert import_workflow(json.dumps(TEMPLATE)).name == "compacting-chat"
    with pytest.raises(WorkflowError, match="not valid JSON"):
        import_workflow("{nodes: [")
    with pytest.raises(WorkflowError, match="must be a JSON object"):
        import_workflow("[]")
    with pytest.raises(WorkflowError, match="unknown template 'nope'"):
        load_template("nope")


def test_a_workflow_with_a_version_1_memory_node_still_loads():
    def to_v1(data):
        _memory(data).update(
            type="chatMemory/v1",
            parameters={"conversationId": "${chat_1.conversationId}", "maxMessages": 6},
        )
        _memory(data).pop("clusterElements")

    workflow = import_workflow(_broken(to_v1))
    assert workflow.node("memory_1").definition.version == 1


def test_expressions_resolve_whole_values_and_interpolate_text():
    outputs = {"chat_1": {"conversationId": "c-1", "message": "hi", "meta": {"turns": 3}}}
    assert resolve("${chat_1.meta.turns}", outputs) == 3
    assert resolve("conv ${chat_1.conversationId}: ${ chat_1.message }", outputs) == "conv c-1: hi"
    assert resolve({"a": ["${chat_1.message}", 1]}, outputs) == {"a": ["hi", 1]}
    assert resolve("no expression", outputs) == "no expression"
    assert [str(r) for r in references({"x": "${a_1.b} and ${c.d.e}"})] == ["${a_1.b}", "${c.d.e}"]
    with pytest.raises(ConfigurationError, match="has no output 'nope'"):
        resolve("${chat_1.nope}", outputs)
    with pytest.raises(ConfigurationError, match="has not run yet"):
        resolve("${agent_1.text}", outputs)
