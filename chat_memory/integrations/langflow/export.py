"""A chat-memory template as a Langflow flow: Chat Input -> Chat Memory Agent -> Chat Output,
the template's Chat Memory node as our component (its parameters), and the model as our
Scripted Model component (replace it with any Language Model component to use a real model).
Built with lfx's own flow builder, so the nodes carry the exact code Langflow trusts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lfx.custom.utils import create_component_template
from lfx.graph.flow_builder import add_component, add_connection, configure_component, empty_flow, layout_flow
from lfx.graph.flow_builder.builder import load_local_registry

from ...components import memory_definitions
from ...errors import ConfigurationError
from ...templates import template_source as load_template

BUNDLE = Path(__file__).parent / "bundle"
#: The bundle file of each of our components, by Langflow component name.
COMPONENT_FILES = {
    "chatMemory": "builtin.py",
    "jdbcChatMemory": "jdbc.py",
    "redisChatMemory": "redis_memory.py",
    "awsS3ChatMemory": "s3.py",
    "inMemoryChatMemory": "in_memory.py",
    "ChatMemoryAgent": "agent.py",
    "ChatMemoryScriptedModel": "scripted_model.py",
}


def component_templates() -> dict[str, dict[str, Any]]:
    """Our components' frontend nodes (what the sidebar drags onto the canvas), by name."""
    templates = {}
    for name, file in COMPONENT_FILES.items():
        template, _ = create_component_template({"code": (BUNDLE / file).read_text(), "output_types": []})
        templates[name] = template
    return templates


def _find(nodes: list[dict[str, Any]], type_prefix: str) -> dict[str, Any]:
    for node in nodes:
        if node["type"].startswith(type_prefix):
            return node
    raise ConfigurationError(f"template has no {type_prefix} node")


def export_langflow(template_name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Langflow flow JSON of a chat template (an agent with a Chat Memory sub-node).
    ``overrides`` replace the memory node's parameters (e.g. another store)."""
    template = load_template(template_name)
    nodes = template["nodes"]
    agent = _find(nodes, "aiAgent/")
    memory = agent.get("clusterElements", {}).get("memory")
    if memory is None:
        raise ConfigurationError(f"template {template_name!r} has no Chat Memory node")
    memory_name = memory["type"].split("/")[0]
    if memory_name not in {d.name for d in memory_definitions()}:
        raise ConfigurationError(f"template memory node {memory['type']!r} is not a Chat Memory node")

    registry = {**load_local_registry(), **component_templates()}
    flow = empty_flow(template["title"], template["description"])
    chat_in = add_component(flow, "ChatInput", registry)["id"]
    agent_id = add_component(flow, "ChatMemoryAgent", registry)["id"]
    memory_id = add_component(flow, memory_name, registry)["id"]
    model_id = add_component(flow, "ChatMemoryScriptedModel", registry)["id"]
    chat_out = add_component(flow, "ChatOutput", registry)["id"]

    # ${…} expressions (the conversation id) are left out: empty means the run's session id
    params = {k: v for k, v in {**memory["parameters"], **(overrides or {})}.items() if "${" not in str(v)}
    configure_component(flow, memory_id, params)
    system_prompt = agent["parameters"].get("systemPrompt", "")
    configure_component(flow, agent_id, {
        "system_prompt": system_prompt,
        "add_current_date_tool": False,
        "add_calculator_tool": False,
        "max_iterations": int(agent["parameters"].get("maxToolRounds", 8)) + 2,
    })
    add_connection(flow, chat_in, "message", agent_id, "input_value", registry=registry)
    add_connection(flow, memory_id, "memory", agent_id, "chat_memory", registry=registry)
    add_connection(flow, model_id, "model_output", agent_id, "model", registry=registry)
    add_connection(flow, agent_id, "response", chat_out, "input_value", registry=registry)
    layout_flow(flow)
    return flow
