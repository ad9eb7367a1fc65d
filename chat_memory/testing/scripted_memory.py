"""What the scripted stand-in model does with the ``memory`` tool, as Claude is trained to:
view ``/memories`` at the start of a conversation, read the preferences file it finds there,
save a preference the user states (``create`` the file, or ``str_replace`` under its
heading), and answer questions about preferences from what it read."""

from __future__ import annotations

import re
import uuid
from typing import Any

PREFERENCES = "/memories/preferences.md"
HEADING = "# User preferences"
_STATES_PREFERENCE = re.compile(
    r"\b(?:i (?:prefer|like|love|always want|want)|please always|remember that i)\b\s*(?P<what>[^.!?\n]+)",
    re.I,
)
_ASKS_PREFERENCE = re.compile(
    r"\b(prefer|preference|preferences|remember about me|what do you know about me)\b", re.I
)


def memory_step(
    body: dict[str, Any], question: str, turn: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[dict[str, Any]] | str | None:
    """The next move with the memory tool: a ``tool_use`` block list, a final reply text, or
    None when memory has nothing to do with this request. ``turn`` holds this turn's
    (tool_use, tool_result) pairs of the memory tool, oldest first."""
    tools = body.get("tools", [])
    if (
        not any(t.get("name") == "memory" for t in tools)
        or body.get("tool_choice", {}).get("type") == "none"
    ):
        return None
    viewed_root = _used_before(body, "view", "/memories") or any(
        _is(use, "view", "/memories") for use, _ in turn
    )
    if not viewed_root:
        return [_use("view", path="/memories")]
    last_use, last_result = turn[-1] if turn else ({}, {})
    listing = _text_of(last_result) if _is(last_use, "view", "/memories") else ""
    if PREFERENCES in listing and not any(_is(use, "view", PREFERENCES) for use, _ in turn):
        return [_use("view", path=PREFERENCES)]
    stated = _STATES_PREFERENCE.search(question)
    wrote = any(
        use.get("input", {}).get("command") in ("create", "str_replace") and not _failed(res)
        for use, res in turn
    )
    if stated and not wrote:
        line = f"- {stated['what'].strip()}"
        exists = PREFERENCES in listing or _seen_file(body, turn)
        tried_replace = any(use.get("input", {}).get("command") == "str_replace" for use, _ in turn)
        if exists and not tried_replace:
            return [
                _use("str_replace", path=PREFERENCES, old_str=HEADING, new_str=f"{HEADING}\n{line}")
            ]
        return [_use("create", path=PREFERENCES, file_text=f"{HEADING}\n{line}\n")]
    if stated:
        return f"I'll remember that: {stated['what'].strip()}."
    if _ASKS_PREFERENCE.search(question):
        notes = _preference_lines(body)
        if notes:
            return "From my memory notes, your preferences: " + "; ".join(notes) + "."
        return "I have no saved preferences of yours yet."
    return None


def _use(command: str, **arguments: Any) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{uuid.uuid4().hex[:24]}",
        "name": "memory",
        "input": {"command": command, **arguments},
    }


def _is(use: dict[str, Any], command: str, path: str) -> bool:
    given: dict[str, object] = use.get("input", {})
    return given.get("command") == command and given.get("path") == path


def _failed(result: dict[str, Any]) -> bool:
    return bool(result.get("is_error"))


def _text_of(result: dict[str, Any]) -> str:
    content = result.get("content", "")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _pairs(body: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (memory tool_use, its tool_result) pair of the request, oldest first."""
    uses: dict[str, dict[str, Any]] = {}
    pairs = []
    for message in body["messages"]:
        if not isinstance(message["content"], list):
            continue
        for block in message["content"]:
            if block.get("type") == "tool_use" and block.get("name") == "memory":
                uses[block["id"]] = block
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                pairs.append((uses[block["tool_use_id"]], block))
    return pairs


def _used_before(body: dict[str, Any], command: str, path: str) -> bool:
    return any(_is(use, command, path) for use, _ in _pairs(body))


def _seen_file(body: dict[str, Any], turn: list[Any]) -> bool:
    return any(
        f"content of {PREFERENCES}" in _text_of(result) for _, result in [*_pairs(body), *turn]
    )


def _preference_lines(body: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    for use, result in _pairs(body):
        text = _text_of(result)
        if _is(use, "view", PREFERENCES) and not _failed(result):
            notes = [m.group(1).strip() for m in re.finditer(r"^\s*\d+\t- (.+)$", text, re.M)]
        elif use.get("input", {}).get("command") in ("create", "str_replace") and not _failed(
            result
        ):
            given = use["input"].get("file_text") or use["input"].get("new_str") or ""
            notes += [
                line[2:].strip()
                for line in given.splitlines()
                if line.startswith("- ") and line[2:].strip() not in notes
            ]
    return notes


def turn_pairs(body: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The memory tool pairs after the last user text message (this turn's)."""
    messages = body["messages"]
    start = 0
    for i, message in enumerate(messages):
        content = message["content"]
        if message["role"] == "user" and (
            isinstance(content, str) or any(b.get("type") == "text" for b in content)
        ):
            start = i
    return _pairs({"messages": messages[start:]})


def turn_question(body: dict[str, Any]) -> str:
    """The text of the last user text message."""
    for message in reversed(body["messages"]):
        content = message["content"]
        if message["role"] != "user":
            continue
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        if texts:
            return " ".join(texts)
    return ""
