"""The exported compacting-chat template, run in-process and with `lfx run` (custom
components disallowed, the extension installed): three messages, the first fact found by
search after it left the window (maxTurns 1), on SQLite and Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MESSAGES = (
    "first fact: the deploy key is K-7781",
    "second fact: lunch is at noon",
    "What was the first fact I told you?",
)


def _export(tmp_path: Path, overrides: dict | None = None) -> Path:
    from chat_memory.integrations.langflow.export import export_langflow

    flow = tmp_path / "flow.json"
    flow.write_text(
        json.dumps(export_langflow("compacting-chat", {"maxTurns": 1, **(overrides or {})}))
    )
    return flow


def _check(replies: list[str]) -> None:
    assert "K-7781" in replies[0]
    assert "conversation_search" in replies[2] and "K-7781" in replies[2], replies[2]


def test_cli_export_matches_exporter(exported: dict) -> None:
    from chat_memory.integrations.langflow.export import export_langflow

    flow = exported["compacting-chat"]
    assert [n["data"]["type"] for n in flow["data"]["nodes"]] == [
        "ChatInput",
        "ChatMemoryAgent",
        "chatMemory",
        "ChatMemoryScriptedModel",
        "ChatOutput",
    ]
    memory = next(n for n in flow["data"]["nodes"] if n["data"]["type"] == "chatMemory")["data"][
        "node"
    ]["template"]
    assert (
        memory["maxTurns"]["value"] == 3 and memory["compactionStrategy"]["value"] == "turn_window"
    )
    ours = next(
        n
        for n in export_langflow("compacting-chat")["data"]["nodes"]
        if n["data"]["type"] == "chatMemory"
    )
    assert memory == ours["data"]["node"]["template"]  # the command line is the exporter


def test_in_process_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lfx.load import run_flow_from_json

    monkeypatch.setenv("CHAT_MEMORY_URL", f"sqlite:///{tmp_path / 'memory.db'}")
    flow = _export(tmp_path)
    replies = []
    for message in MESSAGES:
        results = run_flow_from_json(
            flow, input_value=message, session_id="conv-a", disable_logs=True
        )
        replies.append(results[0].outputs[0].results["message"].text)
    _check(replies)
    from chat_memory import ChatMemory, open_store

    memory = ChatMemory(open_store(f"sqlite:///{tmp_path / 'memory.db'}"))
    kinds = [e.type for e in memory.history("conv-a")]
    assert kinds.count("user") == 3 and "tool_call" in kinds and "tool_result" in kinds


def _lfx_run(flow: Path, env: dict[str, str]) -> list[str]:
    replies = []
    for message in MESSAGES:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "lfx"),
                "run",
                "--session-id",
                "conv-b",
                str(flow),
                message,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        result = (
            json.loads(line)
            if line.startswith("{")
            else {"success": False, "stderr": done.stderr[-2000:]}
        )
        assert result.get("success"), result
        replies.append(result["result"])
    return replies


@pytest.mark.full
def test_lfx_run_sqlite_custom_components_disallowed(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LANGFLOW_ALLOW_CUSTOM_COMPONENTS": "false",
        "CHAT_MEMORY_URL": f"sqlite:///{tmp_path / 'memory.db'}",
    }
    _check(_lfx_run(_export(tmp_path), env))


@pytest.mark.full
def test_lfx_run_redis_custom_components_disallowed(tmp_path: Path, redis_url: str) -> None:
    # the built-in node follows CHAT_MEMORY_URL, here a real redis-server
    env = {**os.environ, "LANGFLOW_ALLOW_CUSTOM_COMPONENTS": "false", "CHAT_MEMORY_URL": redis_url}
    _check(_lfx_run(_export(tmp_path), env))
