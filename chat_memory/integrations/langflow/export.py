"""A chat-memory template as a Langflow flow: Chat Input -> Chat Memory Agent -> Chat Output,
the template's Chat Memory node as our component (its parameters), its Auto Memory Tool (if
any) as our memory tool component wired to the agent's Tools, and the model as our Scripted
Model component (replace it with any Language Model component to use a real model). Built
with lfx's own flow builder, so the nodes carry the exact code Langflow trusts.

Every literal setting of the template is set on its component, and each field shows as the
component's own form would show it for those values (``showIf``), so the canvas shows the
template's settings; hidden or not, their values reach the component at run time (see
:mod:`.fields`). ``${…}`` expressions have no Langflow equivalent and are left empty: an empty
Conversation ID is the run's session id, an empty User ID must be filled in (or Whose memory
set to the session)."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from lfx.custom.custom_component.component import Component
from lfx.custom.utils import create_component_template
from lfx.graph.flow_builder import (
    add_component,
    add_connection,
    configure_component,
    empty_flow,
    layout_flow,
)
from lfx.graph.flow_builder.builder import load_local_registry

from ...components import auto_memory_tool_node, memory_definitions
from ...components.definitions import NodeDefinition, is_expression
from ...errors import ConfigurationError
from ...templates import template_source as load_template
from .fields import shown
from .memory_tool import NAMESPACE, OWNER, SESSION_ID, USER_ID

BUNDLE = Path(__file__).parent / "bundle"


@functools.cache
def component_files() -> dict[str, str]:
    """The bundle file of each of our components, by Langflow component name: every ``.py``
    file of ``bundle/`` is imported (as Langflow does when it loads the extension) and each
    Langflow component class it declares is listed under its ``name``. Nothing lists the
    files, so a new component (a store's node, say) is one new file in ``bundle/``."""
    files: dict[str, str] = {}
    for path in sorted(BUNDLE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__package__}.bundle.{path.stem}")
        for value in vars(module).values():
            if not (
                isinstance(value, type)
                and issubclass(value, Component)
                and value.__module__ == module.__name__  # declared here, not imported
            ):
                continue
            name = getattr(value, "name", None)
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"bundle/{path.name}: {value.__name__} has no name")
            if name in files:
                raise ConfigurationError(
                    f"bundle/{path.name}: component name {name!r} is taken by bundle/{files[name]}"
                )
            files[name] = path.name
    return files


def __getattr__(name: str) -> Any:
    # COMPONENT_FILES, the hand-kept table this module had, is now derived (on first use)
    if name == "COMPONENT_FILES":
        return component_files()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def component_templates() -> dict[str, dict[str, Any]]:
    """Our components' frontend nodes (what the sidebar drags onto the canvas), by name."""
    templates = {}
    for name, file in component_files().items():
        template, _ = create_component_template(
            {"code": (BUNDLE / file).read_text(), "output_types": []}
        )
        templates[name] = template
    return templates


def _find(nodes: list[dict[str, Any]], type_prefix: str) -> dict[str, Any]:
    for node in nodes:
        if node["type"].startswith(type_prefix):
            return node
    raise ConfigurationError(f"template has no {type_prefix} node")


def _literal(parameters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parameters.items() if not is_expression(v)}


def memory_parameters(
    memory: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Chat Memory component's values for a template's memory node: its literal
    parameters and its summarizer sub-node's model, then ``overrides``."""
    params = _literal(memory.get("parameters", {}))
    summarizer = memory.get("clusterElements", {}).get("summarizerModel")
    if summarizer is not None and summarizer.get("parameters", {}).get("model"):
        params.setdefault("summarizerModel", summarizer["parameters"]["model"])
    return {**params, **(overrides or {})}


def tool_parameters(
    tool: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Auto Memory Tool component's values for a template's tool node. A namespace that
    is an expression of the conversation or session becomes Whose memory = Session ID; any
    other expression (the template's ``${chat_1.userId}``) leaves the User ID to fill in."""
    given = tool.get("parameters", {})
    namespace = given.get(NAMESPACE)
    params = {k: v for k, v in _literal(given).items() if k != NAMESPACE}
    if is_expression(namespace) and any(
        key in str(namespace) for key in ("conversationId", "sessionId")
    ):
        params.update({OWNER: SESSION_ID, NAMESPACE: ""})
    else:
        params.update(
            {OWNER: USER_ID, NAMESPACE: "" if is_expression(namespace) else (namespace or "")}
        )
    return {**params, **(overrides or {})}


def _configure(flow: dict[str, Any], node_id: str, values: dict[str, Any]) -> None:
    """Set a component's values; a value the component refuses is our ConfigurationError."""
    try:
        configure_component(flow, node_id, values)
    except ValueError as exc:
        raise ConfigurationError(f"{node_id.split('-')[0]}: {exc}") from None


def _show(flow: dict[str, Any], node_id: str, visible: dict[str, bool]) -> None:
    """Set each field's ``show`` as the component's form shows it for its values."""
    node = next(n for n in flow["data"]["nodes"] if n["id"] == node_id)
    template = node["data"]["node"]["template"]
    for name, show in visible.items():
        if name in template:
            template[name]["show"] = show


def _shown_for(definition: NodeDefinition, params: dict[str, Any]) -> dict[str, bool]:
    return shown(definition, {k: v for k, v in params.items() if definition.field(k) is not None})


def export_langflow(
    template_name: str,
    overrides: dict[str, Any] | None = None,
    tool_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Langflow flow JSON of a chat template (an agent with a Chat Memory sub-node and,
    when the template has one, an Auto Memory Tool). ``overrides`` replace the memory
    component's values (e.g. another store), ``tool_overrides`` the memory tool's (e.g.
    ``{"namespace": "user-42"}``)."""
    template = load_template(template_name)
    nodes = template["nodes"]
    agent = _find(nodes, "aiAgent/")
    elements = agent.get("clusterElements", {})
    memory = elements.get("memory")
    if memory is None:
        raise ConfigurationError(f"template {template_name!r} has no Chat Memory node")
    memory_name = memory["type"].split("/")[0]
    definitions = {d.name: d for d in memory_definitions() if d.version == 2}
    if memory_name not in definitions:
        raise ConfigurationError(
            f"template memory node {memory['type']!r} is not a Chat Memory node"
        )
    tool = elements.get("tools")
    tool_definition = auto_memory_tool_node()
    if tool is not None and tool["type"] != tool_definition.type:
        raise ConfigurationError(f"template tool node {tool['type']!r} has no Langflow component")

    registry = {**load_local_registry(), **component_templates()}
    flow: dict[str, Any] = empty_flow(template["title"], template["description"])
    chat_in = add_component(flow, "ChatInput", registry)["id"]
    agent_id = add_component(flow, "ChatMemoryAgent", registry)["id"]
    memory_id = add_component(flow, memory_name, registry)["id"]
    model_id = add_component(flow, "ChatMemoryScriptedModel", registry)["id"]
    chat_out = add_component(flow, "ChatOutput", registry)["id"]

    params = memory_parameters(memory, overrides)
    _configure(flow, memory_id, params)
    _show(flow, memory_id, _shown_for(definitions[memory_name], params))
    system_prompt = agent["parameters"].get("systemPrompt", "")
    configure_component(
        flow,
        agent_id,
        {
            "system_prompt": system_prompt,
            "add_current_date_tool": False,
            "add_calculator_tool": False,
            "max_iterations": int(agent["parameters"].get("maxToolRounds", 8)) + 2,
        },
    )
    add_connection(flow, chat_in, "message", agent_id, "input_value", registry=registry)
    add_connection(flow, memory_id, "memory", agent_id, "chat_memory", registry=registry)
    add_connection(flow, model_id, "model_output", agent_id, "model", registry=registry)
    add_connection(flow, agent_id, "response", chat_out, "input_value", registry=registry)
    if tool is not None:
        tool_id = add_component(flow, tool_definition.name, registry)["id"]
        values = tool_parameters(tool, tool_overrides)
        _configure(flow, tool_id, values)
        _show(
            flow,
            tool_id,
            {**_shown_for(tool_definition, values), NAMESPACE: values[OWNER] != SESSION_ID},
        )
        add_connection(flow, memory_id, "memory", tool_id, "chat_memory", registry=registry)
        add_connection(flow, tool_id, "tool", agent_id, "tools", registry=registry)
    layout_flow(flow)
    return flow
