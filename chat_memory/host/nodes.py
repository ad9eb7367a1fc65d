"""The host's own node kinds (the chat trigger, the agent, the Anthropic model, the reply) and
the registry of every node a workflow may name: these plus the Chat Memory nodes."""

from __future__ import annotations

import functools
from typing import Any

from ..components import (
    TOOL,
    ClusterSlot,
    FieldSpec,
    NodeDefinition,
    NodeRegistry,
    auto_memory_tool_node,
    memory_definitions,
)
from ..components.definitions import ACTION, AGENT, MEMORY, MODEL, TRIGGER


def _field(
    name: str, schema: dict[str, Any], label: str, description: str, order: int, **hints: Any
) -> FieldSpec:
    return FieldSpec(name, schema, label, description, order, **hints)


NEW_CHAT_REQUEST = NodeDefinition(
    "newChatRequest",
    1,
    "New Chat Request",
    "Starts a run for every chat message.",
    TRIGGER,
    outputs=("conversationId", "message", "userId"),
)
AI_AGENT = NodeDefinition(
    "aiAgent",
    1,
    "AI Agent",
    "Answers with a model, remembers with a Chat Memory sub-node, and uses its tools.",
    AGENT,
    fields=(
        _field(
            "userMessage",
            {"type": "string", "minLength": 1},
            "User message",
            "What the user said.",
            1,
            required=True,
            placeholder="${chat_1.message}",
        ),
        _field(
            "systemPrompt",
            {"type": "string", "default": ""},
            "System prompt",
            "Instructions for the model.",
            2,
            extra_ui={"multiline": True},
        ),
        _field(
            "maxToolRounds",
            {"type": "integer", "minimum": 1, "default": 8},
            "Max tool rounds",
            "Most model calls that may use tools in one turn.",
            3,
            advanced=True,
        ),
    ),
    outputs=("text", "conversationId", "toolCalls"),
    cluster_elements=(
        ClusterSlot("model", "Chat model", (MODEL,), required=True),
        ClusterSlot("memory", "Memory", (MEMORY,)),
        ClusterSlot("tools", "Tools", (TOOL,)),
    ),
)
ANTHROPIC_CHAT_MODEL = NodeDefinition(
    "anthropicChatModel",
    1,
    "Anthropic Claude",
    "A Claude model through the Anthropic Messages API.",
    MODEL,
    fields=(
        _field(
            "model",
            {"type": "string", "minLength": 1, "default": "claude-sonnet-5-5"},
            "Model",
            "Model name.",
            1,
            required=True,
        ),
        _field(
            "maxTokens",
            {"type": "integer", "minimum": 1, "maximum": 16384, "default": 1024},
            "Max tokens",
            "Most tokens in one answer (at most 16,384: the runtime makes non-streaming requests).",
            2,
            advanced=True,
        ),
    ),
)
REPLY = NodeDefinition(
    "reply",
    1,
    "Reply",
    "Sends the answer back to the chat.",
    ACTION,
    fields=(
        _field(
            "text",
            {"type": "string"},
            "Text",
            "What to send.",
            1,
            required=True,
            placeholder="${agent_1.text}",
        ),
    ),
    outputs=("text",),
)


def host_definitions() -> list[NodeDefinition]:
    """The nodes of the chat template besides Chat Memory."""
    return [NEW_CHAT_REQUEST, AI_AGENT, ANTHROPIC_CHAT_MODEL, REPLY, auto_memory_tool_node()]


@functools.lru_cache(maxsize=1)
def default_registry() -> NodeRegistry:
    """The registry of every node this package ships."""
    return NodeRegistry([*memory_definitions(), *host_definitions()])
