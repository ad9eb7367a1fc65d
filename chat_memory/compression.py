"""Tool-result compression: in the window the model is shown, a large tool result it has
already read is replaced by a short stub (a preview and the id to fetch the full output with
``fetch_tool_result``). Lossless: the stored event keeps its content; only rendering changes.

The decision is derived from stored data alone, by a rule that only ever turns a full result
into a stub as the conversation grows, never back (so the rendered window stays stable turn
after turn, and the prompt cache with it). A tool result R is stubbed when all hold:

- ``compress_tool_results`` is on and R has at least ``min_tool_result_compress_tokens`` tokens;
- the model has read it: an assistant event (text or tool call) comes after R;
- at least ``keep_recent_tool_results`` newer tool results come after R;
- the window is under pressure from R on: R and what follows it hold at least
  :data:`PRESSURE_SHARE` of ``max_tokens`` (full token counts).

Each condition can only become true as events are appended, and compaction removes events
before R only (it archives the oldest turns), so none of them can become false while R is in
the window. A window under the pressure mark never holds a stub.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .config import MemoryConfig
from .events import Event, EventType
from .tokens import TokenCounter, count_event_tokens, estimate_tokens

#: Share of ``max_tokens`` that a tool result and the events after it must reach before it is
#: stubbed: half the budget, so compression starts well before a token limit compacts turns.
PRESSURE_SHARE = 0.5
PREVIEW_CHARS = 300
FETCH_TOOL = "fetch_tool_result"


def pressure_mark(config: MemoryConfig) -> int:
    """Tokens from a result to the end of the window at which the window counts as under pressure."""
    return math.ceil(config.max_tokens * PRESSURE_SHARE)


def stub_text(event: Event) -> str:
    """What the model sees in place of a compressed tool result."""
    flat = " ".join(event.content.split())
    preview = flat[:PREVIEW_CHARS] + ("…" if len(flat) > PREVIEW_CHARS else "")
    return (
        f"[Output shortened to save context ({event.tokens or 0} tokens, {len(event.content)} characters); "
        f'call `{FETCH_TOOL}` with tool_call_id "{event.tool_call_id}" for the full output. Preview:]\n{preview}'
    )


def compressed_ids(events: Sequence[Event], config: MemoryConfig) -> set[str]:
    """Ids of the tool results of ``events`` (a window, oldest first) shown as stubs."""
    if not config.compress_tool_results:
        return set()
    mark = pressure_mark(config)
    stubbed: set[str] = set()
    suffix_tokens, newer_results, read = 0, 0, False
    for event in reversed(events):
        suffix_tokens += event.tokens or 0
        if event.type in (EventType.ASSISTANT, EventType.TOOL_CALL):
            read = True
        elif event.type is EventType.TOOL_RESULT:
            if (
                read
                and (event.tokens or 0) >= config.min_tool_result_compress_tokens
                and newer_results >= config.keep_recent_tool_results
                and suffix_tokens >= mark
            ):
                stubbed.add(event.id)
            newer_results += 1
    return stubbed


def compress_window(
    events: Sequence[Event], config: MemoryConfig, token_counter: TokenCounter | None = None
) -> list[Event]:
    """The window with the compressed tool results replaced by stubs (copies whose
    ``metadata["compressed"]`` records the original size; ``tokens`` is the stub's)."""
    stubbed = compressed_ids(events, config)
    if not stubbed:
        return list(events)
    shown: list[Event] = []
    for event in events:
        if event.id not in stubbed:
            shown.append(event)
            continue
        stub = event.model_copy(
            update={
                "content": stub_text(event),
                "metadata": {
                    **event.metadata,
                    "compressed": {"tokens": event.tokens or 0, "characters": len(event.content)},
                },
            }
        )
        shown.append(
            stub.model_copy(
                update={"tokens": count_event_tokens(stub, token_counter or estimate_tokens)}
            )
        )
    return shown
