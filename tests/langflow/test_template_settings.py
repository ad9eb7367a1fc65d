"""An exported template runs in Langflow with the template's settings: every setting reaches
the component at run time, shown or hidden, so the compacting chat (a turn window of 3)
archives the first fact after 5 messages, and the remembering chat keeps a preference from
one session to the next. Checked through the `lfx run` command line as a user runs it (custom
components disallowed, the extension installed) and in the store through chat_memory's API."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from flows import lfx_run, node_template

from chat_memory import ChatMemory, open_store
from chat_memory.longterm import long_term_memory
from chat_memory.templates import template_source

FACTS = (
    "first fact: the deploy key is K-7781",
    "second fact: lunch is at noon",
    "third fact: the office is in Lyon",
    "fourth fact: the build takes 9 minutes",
)
QUESTION = "What was the first fact I told you?"
PREFERENCE = "I prefer answers in French."
ASK_PREFERENCES = "What do you know about my preferences?"


def _memory_settings(template: str) -> dict[str, Any]:
    memory = template_source(template)["nodes"][1]["clusterElements"]["memory"]["parameters"]
    return {k: v for k, v in memory.items() if "${" not in str(v)}


@pytest.mark.parametrize("template", ["compacting-chat", "remembering-chat"])
def test_export_sets_and_shows_every_setting_of_the_template(template: str, exported: dict) -> None:
    fields = node_template(exported[template], "chatMemory")
    settings = _memory_settings(template)
    assert settings["maxTurns"] == 3 and settings["compactionStrategy"] == "turn_window"
    for name, value in settings.items():
        assert fields[name]["value"] == value, name
        assert fields[name]["show"] is True, name  # on the canvas, as the template sets it
    # the fields a strategy can hide reach the component even when hidden
    hideable = [
        name
        for name, f in fields.items()
        if isinstance(f, dict) and f.get("dynamic") and name != "code"
    ]
    assert "maxTurns" in hideable and all(fields[name]["override_skip"] for name in hideable)


def _archived_first_fact(url: str, conversation: str) -> tuple[bool, list[str]]:
    with open_store(url) as store:
        history = ChatMemory(store).history(conversation)
    users = [e for e in history if e.type.value == "user"]
    return users[0].archived, [e.content for e in users]


def _run_in_process(flow: dict, tmp_path: Path, conversation: str) -> list[str]:
    from lfx.load import run_flow_from_json

    path = tmp_path / f"{conversation}.json"
    path.write_text(json.dumps(flow))
    replies = []
    for message in (*FACTS, QUESTION):
        results = run_flow_from_json(
            path, input_value=message, session_id=conversation, disable_logs=True
        )
        replies.append(results[0].outputs[0].results["message"].text)
    return replies


@pytest.mark.parametrize("persist", [True, False], ids=["override_skip", "lfx_default"])
def test_hidden_settings_still_reach_the_component(
    persist: bool, exported: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the flow as the old export wrote it: Max turns and Compact to ratio hidden
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    monkeypatch.setenv("CHAT_MEMORY_URL", url)
    flow = copy.deepcopy(exported["compacting-chat"])
    fields = node_template(flow, "chatMemory")
    for name in ("maxTurns", "compactToRatio"):
        fields[name]["show"] = False
        fields[name]["override_skip"] = persist
    _run_in_process(flow, tmp_path, "conv-hidden")
    archived, _ = _archived_first_fact(url, "conv-hidden")
    # without override_skip lfx drops hidden fields and runs the class defaults (10 turns):
    # nothing is archived; that is the loss the override_skip inputs prevent
    assert archived is persist


def test_a_value_the_strategy_does_not_use_is_left_out(recwarn: pytest.WarningsRecorder) -> None:
    # Max turns set under turn_window, then the strategy switched: the value still arrives
    # (override_skip) but the sliding window does not use it, so it is not applied
    from lfx.custom.utils import create_component_template

    from chat_memory.integrations.langflow.export import BUNDLE

    _, component = create_component_template(
        {"code": (BUNDLE / "builtin.py").read_text(), "output_types": []}
    )
    component.compactionStrategy, component.maxTurns, component.maxEvents = "sliding_window", 3, 7
    config = component.settings().config
    assert (config.max_events, config.max_turns) == (7, 10)
    assert not [w for w in recwarn if "has no effect" in str(w.message)]
    component.compactionStrategy = "turn_window"
    assert component.settings().config.max_turns == 3


def _lfx_env(store_url: str) -> dict[str, str]:
    return {**os.environ, "LANGFLOW_ALLOW_CUSTOM_COMPONENTS": "false", "CHAT_MEMORY_URL": store_url}


def _compacting_chat_under_lfx_run(exported: dict, tmp_path: Path, store_url: str) -> None:
    flow = tmp_path / "compacting-chat.json"
    flow.write_text(json.dumps(exported["compacting-chat"]))
    env = _lfx_env(store_url)
    replies = [lfx_run(flow, "conv-lfx", message, env) for message in (*FACTS, QUESTION)]
    archived, users = _archived_first_fact(store_url, "conv-lfx")
    assert users == [*FACTS, QUESTION]  # the conversation id is the run's session id
    assert archived, "a turn window of 3 archives the first turn by the 5th message"
    with open_store(store_url) as store:
        window = ChatMemory(store).window("conv-lfx")
    assert not any("K-7781" in e.content for e in window if e.type.value == "user")
    assert "conversation_search" in replies[-1] and "K-7781" in replies[-1], replies[-1]


def test_lfx_run_compacting_chat_archives_the_first_fact_after_five_messages_sqlite(
    exported: dict, tmp_path: Path
) -> None:
    _compacting_chat_under_lfx_run(exported, tmp_path, f"sqlite:///{tmp_path / 'memory.db'}")


@pytest.mark.full
def test_lfx_run_compacting_chat_archives_the_first_fact_after_five_messages_redis(
    exported: dict, tmp_path: Path, redis_url: str
) -> None:
    _compacting_chat_under_lfx_run(exported, tmp_path, redis_url)


def test_lfx_run_remembering_chat_remembers_a_preference_in_a_second_session(
    exported: dict, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    flow = copy.deepcopy(exported["remembering-chat"])
    types = [n["data"]["type"] for n in flow["data"]["nodes"]]
    assert "autoMemoryTool" in types
    # the user fills in whose memory it is, as on the canvas
    node_template(flow, "autoMemoryTool")["namespace"]["value"] = "user-42"
    path = tmp_path / "remembering-chat.json"
    path.write_text(json.dumps(flow))
    env = _lfx_env(url)
    said = lfx_run(path, "monday", PREFERENCE, env)
    assert "I'll remember that: answers in French" in said, said
    answer = lfx_run(path, "tuesday", ASK_PREFERENCES, env)
    assert "your preferences: answers in French" in answer, answer
    with open_store(url) as store:
        notes = long_term_memory(store, "user-42").view("/memories/preferences.md")
        tuesday = [
            e.content for e in ChatMemory(store).history("tuesday") if e.type.value == "user"
        ]
    assert "answers in French" in notes
    assert tuesday == [ASK_PREFERENCES]  # a new conversation: only the notes carried the preference
