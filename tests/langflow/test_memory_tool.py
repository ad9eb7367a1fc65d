"""The Auto Memory Tool component: fields from the autoMemoryTool node definition, whose
memory (the User ID field or Langflow's session), where the notes live (the wired Chat
Memory's store or another storage), and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lfx.custom.utils import create_component_template

from chat_memory.components import auto_memory_tool_node
from chat_memory.errors import ConfigurationError
from chat_memory.integrations.langflow.export import (
    BUNDLE,
    COMPONENT_FILES,
    component_templates,
    export_langflow,
)
from chat_memory.integrations.langflow.memory_tool import SESSION_ID, USER_ID
from chat_memory.longterm import long_term_memory

NODE = auto_memory_tool_node()
TEMPLATE = component_templates()["autoMemoryTool"]


def _component() -> Any:
    _, component = create_component_template(
        {"code": (BUNDLE / COMPONENT_FILES["autoMemoryTool"]).read_text(), "output_types": []}
    )
    return component


def test_fields_come_from_the_node_definition() -> None:
    fields = {k: v for k, v in TEMPLATE["template"].items() if isinstance(v, dict) and k != "code"}
    assert TEMPLATE["display_name"] == NODE.title and TEMPLATE["description"] == NODE.description
    assert set(fields) == {f.name for f in NODE.fields} | {"memoryOwner", "chat_memory"}
    for spec in NODE.fields:
        if spec.name != "namespace":
            assert fields[spec.name]["display_name"] == spec.label, spec.name
            assert fields[spec.name]["show"] == spec.is_shown(NODE.defaults()), spec.name
    assert (
        fields["memoryOwner"]["options"] == [USER_ID, SESSION_ID]
        and fields["memoryOwner"]["value"] == USER_ID
    )
    assert (
        fields["namespace"]["display_name"] == "User ID"
        and fields["namespace"]["override_skip"] is True
    )
    assert [(o["name"], o["types"][0]) for o in TEMPLATE["outputs"]] == [("tool", "Tool")]
    secrets = {k for k, f in fields.items() if f.get("_input_type") == "SecretStrInput"}
    assert secrets == {"jdbcUrl", "redisUrl", "s3EndpointUrl"}


@pytest.mark.parametrize("storage", NODE.field("storage").schema["enum"])
def test_update_build_config_shows_the_chosen_storage_and_whose_memory(storage: str) -> None:
    config = json.loads(json.dumps(TEMPLATE["template"]))
    result = _component().update_build_config(config, storage, "storage")
    connection = {f.name for f in NODE.fields if f.show_if}
    shown = {k for k in connection if result[k]["show"]}
    expected = {f.name for f in NODE.fields if f.show_if == {"storage": [storage]}}
    assert shown == expected
    assert (
        _component().update_build_config(config, SESSION_ID, "memoryOwner")["namespace"]["show"]
        is False
    )
    assert (
        _component().update_build_config(config, USER_ID, "memoryOwner")["namespace"]["show"]
        is True
    )


def test_a_blank_user_id_is_refused_naming_the_field() -> None:
    component = _component()
    component.storage = "memory"
    with pytest.raises(
        ConfigurationError, match=r"User ID \(''\) is blank: .*Whose memory to 'Session ID'"
    ):
        component.build_tool()


def test_storage_chat_memory_needs_the_wired_chat_memory() -> None:
    component = _component()
    component.namespace = "user-42"
    with pytest.raises(
        ConfigurationError, match=r"Chat Memory \(nothing wired\) must be a Chat Memory component"
    ):
        component.build_tool()


def test_another_storage_keeps_the_notes_there(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'notes.db'}"
    component = _component()
    component.namespace, component.storage, component.jdbcUrl = "user-42", "jdbc", url
    tool = component.build_tool()
    assert tool.name == "memory"
    assert "File created successfully" in tool.invoke(
        {"command": "create", "path": "/memories/a.md", "file_text": "hi"}
    )
    assert "hi" in long_term_memory(url, "user-42").view("/memories/a.md")
    # a malformed call is an error answer for the model, not a failed run
    refused = tool.invoke(
        {"name": "memory", "args": {"command": "explode"}, "id": "c1", "type": "tool_call"}
    )
    assert refused.status == "error" and "Unknown command" in refused.content


def _run(flow: Path, session: str, message: str) -> str:
    from lfx.load import run_flow_from_json

    results = run_flow_from_json(flow, input_value=message, session_id=session, disable_logs=True)
    return results[0].outputs[0].results["message"].text


def test_whose_memory_session_keeps_notes_per_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_MEMORY_URL", f"sqlite:///{tmp_path / 'memory.db'}")
    flow = tmp_path / "flow.json"
    flow.write_text(
        json.dumps(export_langflow("remembering-chat", tool_overrides={"memoryOwner": SESSION_ID}))
    )
    assert "I'll remember that: answers in French" in _run(
        flow, "alice", "I prefer answers in French."
    )
    assert "no saved preferences" in _run(flow, "bob", "What do you know about my preferences?")
    assert "answers in French" in _run(flow, "alice", "What do you know about my preferences?")


def test_an_unknown_export_setting_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match=r"autoMemoryTool: Unknown parameter 'userName'"):
        export_langflow("remembering-chat", tool_overrides={"userName": "alice"})
