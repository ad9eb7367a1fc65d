"""The OpenAI Chat Completions rendering (the message format most OpenAI-compatible servers take)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..config import SummaryPlacement
from ..events import Event
from .plan import Step, Text, plan, result_text

#: Tool messages carry no error flag: an error result is prefixed so the model knows.
ERROR_PREFIX = "Error: "


def to_openai(
    window: Sequence[Event],
    system_prompt: str | None = None,
    summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE,
) -> list[dict[str, Any]]:
    """Turn a window into Chat Completions ``messages``.

    A system message first (the system prompt, pinned events and, with
    ``summary_placement="system_prompt"``, the summary); user messages; assistant messages
    with ``tool_calls`` (``content`` is ``None`` when the step had no text); and right after
    each such assistant message one ``tool`` message per call, in call order (a late result
    moved up to its call, a synthetic error result for a call without one). The same pairing
    and id rules as :func:`chat_memory.to_anthropic` apply (docs/rendering.md)."""
    shown = plan(window, system_prompt, summary_placement)
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(t for t in ("\n\n".join(shown.system), shown.system_summary) if t)
    if system:
        messages.append({"role": "system", "content": system})
    for part in shown.parts:
        if isinstance(part, Text):
            messages.append({"role": "user", "content": part.text})
        else:
            messages += _step(part)
    return messages


def _step(step: Step) -> list[dict[str, Any]]:
    texts = [b.text for b in step.blocks if isinstance(b, Text)]
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": "\n\n".join(texts) if texts else None,
    }
    if step.calls:
        assistant["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(
                        call.event.arguments or {}, ensure_ascii=False, sort_keys=True
                    ),
                },
            }
            for call in step.calls
        ]
    out = [assistant]
    for call in step.calls:
        content, is_error = result_text(call)
        out.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": ERROR_PREFIX + content if is_error else content,
            }
        )
    return out
