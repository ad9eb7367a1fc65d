"""Helpers of the Langflow tests: the command lines a user runs (`chat-memory templates
export`, `lfx run`) and a look into an exported flow's nodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

LFX = Path(sys.executable).parent / "lfx"


def lfx_run(flow: Path, session_id: str, message: str, env: dict[str, str]) -> str:
    """One message through the `lfx run` command line, as a user runs it; the reply text.
    A failed run fails the test with lfx's own output."""
    done = subprocess.run(
        [str(LFX), "run", "--session-id", session_id, str(flow), message],
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
    return str(result["result"])


def cli_export(template: str) -> dict[str, Any]:
    """`chat-memory templates export TEMPLATE --format langflow`, as a user runs it."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "chat_memory.host.cli",
            "templates",
            "export",
            template,
            "--format",
            "langflow",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def node_template(flow: dict[str, Any], component: str) -> dict[str, Any]:
    """The field templates of the flow's node of this component type."""
    node = next(n for n in flow["data"]["nodes"] if n["data"]["type"] == component)
    return node["data"]["node"]["template"]
