"""The Anthropic Messages API rendering: ``system`` and ``messages``, with cache breakpoints."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..config import SummaryPlacement
from ..events import Event
from .plan import OPENER_TEXT, Call, Step, Text, plan, result_text

#: At most this many ``cache_control`` breakpoints in one request (the API's limit).
MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

#: ``system`` as the Messages API takes it: a string, or a list of text blocks.
System = str | list[dict[str, Any]]


def to_anthropic(
    window: Sequence[Event],
    system_prompt: str | None = None,
    summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE,
    cache: bool = True,
) -> tuple[System, list[dict[str, Any]]]:
    """Turn a window into ``(system, messages)`` for ``client.messages.create``.

    The request is valid whatever order the events are stored in: the first message is the
    user's, roles alternate, no text block is blank, each ``tool_use`` id appears once, and the
    message after an assistant's ``tool_use`` blocks starts with exactly their
    ``tool_result`` blocks in the same order (a late result is moved up to its call, a call
    without a result gets a synthetic error result). Pinned system events join the system
    prompt; the summary becomes a leading user message or part of the system prompt
    (``summary_placement``).

    With ``cache`` (the default) ``cache_control`` breakpoints mark the stable prefix (the
    system prompt with pinned events, the summary) and the growing tail (the last block, and
    the previous request's tail); ``system`` is then a list of text blocks. Without it
    ``system`` is a string and nothing is marked. ``system`` is ``""`` when there is none
    (leave it out of the request). The rules are in docs/rendering.md."""
    shown = plan(window, system_prompt, summary_placement)
    messages: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for part in shown.parts:
        if isinstance(part, Text):
            block = {"type": "text", "text": part.text}
            if part.summary:
                marks.append(block)
            push("user", block)
        else:
            _push_step(part, push)
    if messages and messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENER_TEXT}]})

    base = "\n\n".join(shown.system)
    if not cache:
        system_text = "\n\n".join(t for t in (base, shown.system_summary) if t)
        return system_text, messages
    system: list[dict[str, Any]] = []
    for text in (base, shown.system_summary):
        if text:
            system.append({"type": "text", "text": text})
            marks.insert(len(system) - 1, system[-1])
    if messages:
        marks.append(messages[-1]["content"][-1])
        if len(messages) >= 3:
            marks.append(
                messages[-3]["content"][-1]
            )  # the previous request's tail: an exact cache hit
    _mark(marks)
    return (system or ""), messages


def _push_step(step: Step, push: Callable[[str, dict[str, Any]], None]) -> None:
    for block in step.blocks:
        if isinstance(block, Text):
            push("assistant", {"type": "text", "text": block.text})
        else:
            push(
                "assistant",
                {"type": "tool_use", "id": block.id, "name": block.name, "input": _input(block)},
            )
    for call in step.calls:
        content, is_error = result_text(call)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": content}
        if is_error:
            result["is_error"] = True
        push("user", result)


def _input(call: Call) -> dict[str, Any]:
    return dict(call.event.arguments or {})


def _mark(blocks: list[dict[str, Any]]) -> None:
    """Put a breakpoint on each block, in priority order, once each, at most four in all."""
    marked: list[int] = []
    for block in blocks:
        if len(marked) == MAX_BREAKPOINTS:
            break
        if id(block) not in marked:
            block["cache_control"] = dict(EPHEMERAL)
            marked.append(id(block))
