"""Connection URLs in Langflow: password inputs that take a global variable, with a placeholder
that asks for no password; a URL given through a global variable reaches the store, and the
flow JSON holds only the variable's name."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from lfx.custom.utils import create_component_template
from pydantic import SecretStr

from chat_memory.integrations.langflow.export import (
    BUNDLE,
    COMPONENT_FILES,
    component_templates,
    export_langflow,
)
from chat_memory.integrations.langflow.fields import SECRET_HINT

TEMPLATES = component_templates()
SECRET_URL_FIELDS = [
    ("jdbcChatMemory", "url"),
    ("redisChatMemory", "url"),
    ("awsS3ChatMemory", "endpointUrl"),
]


@pytest.mark.parametrize("component, field", SECRET_URL_FIELDS)
def test_url_fields_are_secret_inputs_that_take_global_variables(
    component: str, field: str
) -> None:
    spec = TEMPLATES[component]["template"][field]
    assert spec["_input_type"] == "SecretStrInput" and spec["password"] is True
    # False until a global variable is picked on the canvas: a URL set by a flow is used as written
    assert spec["load_from_db"] is False and spec["value"] == ""
    assert SECRET_HINT in spec["placeholder"]
    assert "@" not in spec["placeholder"] and "password" not in spec["placeholder"].lower()


def test_placeholders_show_an_example_url_without_credentials() -> None:
    assert TEMPLATES["jdbcChatMemory"]["template"]["url"]["placeholder"] == (
        f"postgresql+psycopg://localhost:5432/chat — {SECRET_HINT}"
    )
    assert (
        TEMPLATES["redisChatMemory"]["template"]["url"]["placeholder"]
        == f"redis://localhost:6379/0 — {SECRET_HINT}"
    )


def test_no_other_memory_field_is_secret() -> None:
    memory_components = {
        "chatMemory",
        "jdbcChatMemory",
        "redisChatMemory",
        "awsS3ChatMemory",
        "inMemoryChatMemory",
    }
    secret = {
        (name, key)
        for name in memory_components
        for key, spec in TEMPLATES[name]["template"].items()
        if isinstance(spec, dict) and spec.get("_input_type") == "SecretStrInput"
    }
    assert secret == set(SECRET_URL_FIELDS)


def test_a_credential_global_variable_arrives_as_a_secret_string(tmp_path: Path) -> None:
    # Langflow hands a Credential variable's value to the component wrapped in a SecretStr
    _, component = create_component_template(
        {"code": (BUNDLE / COMPONENT_FILES["jdbcChatMemory"]).read_text(), "output_types": []}
    )
    url = f"sqlite:///{tmp_path / 'secret.db'}"
    component.url = SecretStr(url)
    assert component.settings().store_target()[0] == url


def test_a_url_from_a_global_variable_reaches_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lfx.load import run_flow_from_json

    from chat_memory import ChatMemory, open_store

    flow = export_langflow("compacting-chat", {"maxTurns": 1})
    # the template's built-in memory node swapped for the JDBC one, its URL field set as the
    # canvas sets it when a global variable is picked: the variable's name, load_from_db on
    memory = next(n for n in flow["data"]["nodes"] if n["data"]["type"] == "chatMemory")
    jdbc = copy.deepcopy(TEMPLATES["jdbcChatMemory"])
    for key, spec in memory["data"]["node"]["template"].items():
        if key != "code" and isinstance(spec, dict) and key in jdbc["template"]:
            jdbc["template"][key]["value"] = spec.get("value")
    jdbc["template"]["url"].update(value="CHAT_MEMORY_TEST_STORE_URL", load_from_db=True)
    memory["data"].update(node=jdbc, type="jdbcChatMemory")
    url = f"sqlite:///{tmp_path / 'from-variable.db'}"
    # headless (no Langflow database) lfx resolves global variables from the environment
    monkeypatch.setenv("CHAT_MEMORY_TEST_STORE_URL", url)
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(flow))
    assert "from-variable.db" not in path.read_text()
    results = run_flow_from_json(
        path, input_value="first fact: K-7781", session_id="conv-g", disable_logs=True
    )
    assert "K-7781" in results[0].outputs[0].results["message"].text
    with open_store(url) as store:
        assert [e.type.value for e in ChatMemory(store).history("conv-g")] == ["user", "assistant"]
