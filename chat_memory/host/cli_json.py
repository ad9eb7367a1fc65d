"""The ``--json`` shapes of the command line (documented in docs/cli.md; scripts rely on them:
add keys, never rename or remove one)."""

from __future__ import annotations

import json
from typing import Any

from .. import Event, EventType, MemoryStats
from ..search import SearchPage, SearchQuery
from .cli_text import json_text

STATS_FIELDS = (
    "active_events",
    "archived_events",
    "archived_summaries",
    "turns",
    "window_tokens",
    "version",
    "last_compaction_error",
    "compaction_failures",
)


def dumps(value: Any) -> str:
    """JSON text as the command line prints it (indented, non-ASCII kept; control characters
    and bidi overrides as ``\\u202e``-style escapes, see :func:`~.cli_text.json_text`)."""
    return json_text(json.dumps(value, indent=2, ensure_ascii=False))


def state(event: Event) -> str:
    """``archived``, ``pinned`` (system), ``summary`` or ``active``."""
    if event.archived:
        return "archived"
    return {EventType.SYSTEM: "pinned", EventType.SUMMARY: "summary"}.get(event.type, "active")


def event_json(event: Event) -> dict[str, Any]:
    """One stored event."""
    return {
        "seq": event.seq,
        "id": event.id,
        "type": event.type.value,
        "state": state(event),
        "content": event.content,
        "text": event.text(),
        "tool_call_id": event.tool_call_id,
        "tool_name": event.tool_name,
        "arguments": event.arguments,
        "is_error": event.is_error,
        "created_at": event.created_at.isoformat(),
        "tokens": event.tokens,
        "metadata": event.metadata,
    }


def window_json(cid: str, window: list[Event], stats: MemoryStats) -> dict[str, Any]:
    return {
        "conversation": cid,
        "turns": stats.turns,
        "archived_events": stats.archived_events,
        "total_tokens": sum(e.tokens or 0 for e in window),
        "events": [event_json(e) for e in window],
    }


def history_json(cid: str, events: list[Event]) -> dict[str, Any]:
    return {
        "conversation": cid,
        "archived_events": sum(e.archived for e in events),
        "events": [event_json(e) for e in events],
    }


def search_json(cid: str, query: SearchQuery, page: SearchPage, keyword: str) -> dict[str, Any]:
    return {
        "conversation": cid,
        "keyword": keyword,
        "match_mode": query.match_mode.value,
        "page": page.number,  # numbered from 1, like the command's --page and the tool
        "page_size": page.page_size,
        "total": page.total,
        "has_more": page.has_more,
        "hits": [
            {
                "seq": hit.seq,
                "type": hit.type,
                "content": hit.content,
                "created_at": hit.created_at.isoformat(),
                "archived": hit.archived,
            }
            for hit in page.hits
        ],
    }


def stats_json(cid: str, shown_url: str, stats: MemoryStats) -> dict[str, Any]:
    return {
        "conversation": cid,
        "store": shown_url,
        **{name: getattr(stats, name) for name in STATS_FIELDS},
    }


def list_json(
    shown_url: str, ids: list[str], page: int, page_size: int, total: int
) -> dict[str, Any]:
    return {
        "store": shown_url,
        "total": total,
        "page": page,
        "page_size": page_size,
        "has_more": page * page_size < total,
        "conversations": ids,
    }
