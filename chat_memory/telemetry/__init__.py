"""OpenTelemetry spans and metrics for chat-memory's operations (the ``otel`` extra, which
needs ``opentelemetry-api`` only; see docs/telemetry.md).

Spans: ``chat_memory.add``, ``chat_memory.window``, ``chat_memory.compact`` (a child of the
``add`` that triggered it), ``chat_memory.summarize`` (a child of its compaction),
``chat_memory.search`` and ``chat_memory.memory_tool``. Metrics, all prefixed
``chat_memory.``: compactions, archived events, tokens before and after a compaction,
summarizer latency and failures, fallbacks, window tokens. Attributes follow the
OpenTelemetry GenAI semantic conventions where they name one (``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.tool.name``, ``gen_ai.conversation.id``, ``error.type``).

Telemetry is on when :func:`instrument` was called, or when ``opentelemetry`` has already been
imported by the application and a global tracer provider is set; otherwise every hook costs
a dictionary look-up and nothing is imported. Content (event texts, search keywords, summaries,
memory tool arguments and answers) and conversation ids go into spans only when the
environment says ``CHAT_MEMORY_OTEL_CAPTURE_CONTENT=true``; metrics never carry either.
"""

from __future__ import annotations

from .hooks import (
    ADD,
    MEMORY_TOOL,
    SEARCH,
    WINDOW,
    store_compacted,
    traced,
    traced_compaction,
    watched_planner,
)
from .instruments import CAPTURE_CONTENT_ENV, Instruments, capture_content
from .switch import current, instrument, uninstrument

__all__ = [
    "ADD",
    "CAPTURE_CONTENT_ENV",
    "MEMORY_TOOL",
    "SEARCH",
    "WINDOW",
    "Instruments",
    "capture_content",
    "current",
    "instrument",
    "store_compacted",
    "traced",
    "traced_compaction",
    "uninstrument",
    "watched_planner",
]
