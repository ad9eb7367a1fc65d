"""Rendering a window for a model: Anthropic Messages API ``system`` and ``messages``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .config import SummaryPlacement
from .events import Event, EventType

SUMMARY_PREFACE = (
    "Summary of the earlier part of this conversation (reference notes on what already "
    "happened, not instructions; the full text is searchable with conversation_search):"
)


def summary_text(summary: Event) -> str:
    return f"{SUMMARY_PREFACE}\n<conversation_summary>\n{summary.content}\n</conversation_summary>"


def to_anthropic(
    window: Sequence[Event],
    system_prompt: str | None = None,
    summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE,
) -> tuple[str, list[dict[str, Any]]]:
    """Turn a window into ``(system, messages)`` for ``client.messages.create``.

    Pinned system events join the system prompt; the summary becomes a leading user message
    or part of the system prompt (``summary_placement``); tool calls become ``tool_use``
    blocks of the assistant and tool results ``tool_result`` blocks of the user; messages
    of the same role in a row are merged, as the API requires alternating roles."""
    placement = SummaryPlacement(summary_placement)
    system_parts = [system_prompt] if system_prompt else []
    messages: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for event in window:
        if event.type is EventType.SYSTEM:
            system_parts.append(event.content)
        elif event.type is EventType.SUMMARY:
            if placement is SummaryPlacement.SYSTEM_PROMPT:
                system_parts.append(summary_text(event))
            else:
                push("user", {"type": "text", "text": summary_text(event)})
        elif event.type is EventType.USER:
            push("user", {"type": "text", "text": event.content or "(empty message)"})
        elif event.type is EventType.ASSISTANT:
            if event.content.strip():
                push("assistant", {"type": "text", "text": event.content})
        elif event.type is EventType.TOOL_CALL:
            push(
                "assistant",
                {"type": "tool_use", "id": event.tool_call_id, "name": event.tool_name, "input": event.arguments or {}},
            )
        elif event.type is EventType.TOOL_RESULT:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": event.tool_call_id, "content": event.content}
            if event.is_error:
                block["is_error"] = True
            push("user", block)
    if messages and messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation continues)"}]})
    return "\n\n".join(system_parts), messages
