"""Each component against `chat-memory nodes --json`: fields, labels, defaults, types,
visibility (update_build_config for every strategy against showIf) and outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lfx.custom.utils import create_component_template

from chat_memory.errors import ConfigurationError
from chat_memory.integrations.langflow.export import BUNDLE, COMPONENT_FILES, component_templates
from chat_memory.strategies import strategy_names

NODES = json.loads(
    subprocess.run(
        [sys.executable, "-m", "chat_memory.host.cli", "nodes", "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
)
MEMORY_NODES = {n["name"]: n for n in NODES if n["kind"] == "memory" and n["version"] == 2}
TEMPLATES = component_templates()


def expected_type(prop: dict) -> str:
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    if "enum" in prop:
        return "str"  # a dropdown
    if "boolean" in types:
        return "bool"
    if "integer" in types:
        return "str" if "null" in types and "default" not in prop else "int"
    if "number" in types:
        return "float"
    return "str"


def test_five_memory_components_one_per_node() -> None:
    ours = {name for name in COMPONENT_FILES if name in MEMORY_NODES}
    assert ours == set(MEMORY_NODES) and len(ours) == 5


@pytest.mark.parametrize("name", sorted(MEMORY_NODES))
def test_fields_labels_defaults_types(name: str) -> None:
    node, template = MEMORY_NODES[name], TEMPLATES[name]
    assert (
        template["display_name"] == node["title"] and template["description"] == node["description"]
    )
    props = node["parameters"]["properties"]
    fields = {k: v for k, v in template["template"].items() if isinstance(v, dict) and k != "code"}
    assert set(fields) == set(props)
    for key, prop in props.items():
        field = fields[key]
        assert field["display_name"] == prop["x-ui"]["label"], key
        assert field["info"] == prop["x-ui"]["description"], key
        assert field["type"] == expected_type(prop), key
        assert field["advanced"] == prop["x-ui"].get("advanced", False), key
        if "enum" in prop:
            assert field["options"] == prop["enum"]
        if "default" in prop:
            assert field["value"] == prop["default"], key
        assert field["dynamic"] == ("showIf" in prop["x-ui"]), key
    controllers = {k for p in props.values() for k in p["x-ui"].get("showIf", {})}
    assert {k for k, f in fields.items() if f.get("real_time_refresh")} == controllers
    assert "compactionStrategy" in controllers
    assert [(o["name"], o["types"][0]) for o in template["outputs"]] == [
        ("memory", "Memory"),
        ("window", "Message"),
        ("search_tool", "Tool"),
    ]


def _shown(prop: dict, values: dict) -> bool:
    return all(values.get(k) in v for k, v in prop["x-ui"].get("showIf", {}).items())


@pytest.mark.parametrize("name", sorted(MEMORY_NODES))
@pytest.mark.parametrize("strategy", strategy_names())
def test_update_build_config_follows_show_if(name: str, strategy: str) -> None:
    node, template = MEMORY_NODES[name], TEMPLATES[name]
    props = node["parameters"]["properties"]
    _, component = create_component_template(
        {"code": (BUNDLE / COMPONENT_FILES[name]).read_text(), "output_types": []}
    )
    for search, compress in ((True, True), (False, False)):
        build_config = json.loads(json.dumps(template["template"]))
        build_config["enableConversationSearchTool"]["value"] = search
        build_config["compressToolResults"]["value"] = compress
        result = component.update_build_config(build_config, strategy, "compactionStrategy")
        values = {k: p.get("default") for k, p in props.items()}
        values.update(
            compactionStrategy=strategy,
            enableConversationSearchTool=search,
            compressToolResults=compress,
        )
        shown = {k for k in props if result[k]["show"]}
        assert shown == {k for k, p in props.items() if _shown(p, values)}, (strategy, search)
        assert {"maxTurns"} & shown == ({"maxTurns"} if strategy == "turn_window" else set())


def test_validation_messages_are_ours() -> None:
    _, component = create_component_template(
        {"code": (BUNDLE / "builtin.py").read_text(), "output_types": []}
    )
    component.maxTurns = 0
    component.compactionStrategy = "turn_window"
    with pytest.raises(ConfigurationError, match=r"Max turns \(0\)"):
        component.settings()
    component.maxTurns, component.maxArchivedEvents = 3, "many"
    with pytest.raises(
        ConfigurationError, match=r"Max archived events \('many'\) must be a whole number"
    ):
        component.settings()


def test_in_memory_store_is_one_per_process() -> None:
    from langchain_core.messages import HumanMessage

    _, first = create_component_template(
        {"code": (BUNDLE / "in_memory.py").read_text(), "output_types": []}
    )
    _, second = create_component_template(
        {"code": (BUNDLE / "in_memory.py").read_text(), "output_types": []}
    )
    for c in (first, second):
        c.conversationId = "conv-1"
    first.build_message_history().add_messages([HumanMessage("remember K-7781")])
    assert [m.content for m in second.build_message_history().messages] == ["remember K-7781"]
    assert "remember K-7781" in second.build_window().text


def test_one_memory_per_process_and_settings() -> None:
    def component(max_turns: int) -> Any:
        _, built = create_component_template(
            {"code": (BUNDLE / "in_memory.py").read_text(), "output_types": []}
        )
        built.conversationId, built.compactionStrategy = "conv-1", "turn_window"
        built.maxTurns = max_turns
        return built

    first = component(3).memory()
    assert component(3).memory() is first  # the next message's components: the same memory
    other = component(4).memory()
    assert other is not first and other.store is first.store  # another config, the same store


def test_manifest_in_package_and_discovered() -> None:
    from lfx.extension.discovery import discover_installed_extensions

    found = [
        d
        for d in discover_installed_extensions()[0]
        if getattr(d, "extension_id", None) == "chat-memory"
    ]
    assert found and Path(found[0].extension_root) == BUNDLE.parent
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "lfx"), "extension", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "chat-memory" in listing and "chat_memory" in listing
