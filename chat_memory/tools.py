"""What the model sees of chat-memory: the ``conversation_search`` tool (its definition, the
text of a result page, how bad arguments are answered)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import SearchError
from .search import MatchMode, SearchPage, SearchQuery, fold

TOOL_NAME = "conversation_search"
TOOL_DESCRIPTION = (
    "Search the whole stored history of this conversation, including older messages that are "
    "no longer shown to you. Use it whenever the user refers to something said earlier that you "
    "cannot see. Matching is literal and case-insensitive over user and assistant messages, tool "
    "calls and tool results; results come oldest first, one page at a time."
)
TOOL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keyword": {
            "type": "string",
            "description": "Literal text to look for (not a regular expression). Short distinctive words work best.",
        },
        "page": {
            "type": "integer",
            "minimum": 0,
            "description": "Which page of results to return, 0 for the first (default 0).",
        },
        "match_mode": {
            "type": "string",
            "enum": [m.value for m in MatchMode],
            "description": "'phrase' (default): the keyword as written; 'all': every word of it; 'any': at least one word.",
        },
    },
    "required": ["keyword"],
    "additionalProperties": False,
}
SNIPPET_CHARS = 300


def snippet(text: str, needles: Iterable[str], width: int = SNIPPET_CHARS) -> str:
    """The text, or when longer than ``width`` the part around the first match, marked with
    ellipses where it was cut."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    folded = fold(flat)
    positions = [p for p in (folded.find(n) for n in needles if n) if p >= 0]
    at = min(positions) if positions else 0
    start = max(0, min(at - width // 3, len(flat) - width))
    end = start + width
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")


def format_page(page: SearchPage, query: SearchQuery) -> str:
    """Render a page of results as text a model reads easily."""
    if page.total == 0:
        return f'No messages in this conversation match "{query.keyword}" ({query.match_mode.value} match).'
    first = page.page * page.page_size + 1
    last = first + len(page.hits) - 1
    lines = [
        f'Results {first}-{last} of {page.total} for "{query.keyword}" '
        f"(page {page.page + 1} of {page.pages}, oldest first):"
    ]
    if not page.hits:
        lines = [f"Page {page.page + 1} is past the last page ({page.pages}) of {page.total} results."]
    for hit in page.hits:
        when = hit.created_at.strftime("%Y-%m-%d %H:%M UTC")
        where = "archived" if hit.archived else "in view"
        lines.append(f"- [#{hit.seq} · {when} · {hit.type} · {where}] {snippet(hit.content, query.terms)}")
    if page.has_more:
        lines.append(f'More results: call {TOOL_NAME} again with keyword "{query.keyword}" and page {page.page + 1}.')
    else:
        lines.append("No more results.")
    return "\n".join(lines)


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer and whether it reports an error (for the ``is_error`` flag of a tool result)."""

    text: str
    is_error: bool = False


class ConversationSearchTool:
    """The ``conversation_search`` tool bound to one conversation, in Anthropic's tool shape.

    ``tool(arguments)`` returns the text for the model; bad arguments come back as an
    explanatory text (see :meth:`run` for the error flag) so the model can correct itself.
    """

    name = TOOL_NAME
    description = TOOL_DESCRIPTION
    input_schema = TOOL_INPUT_SCHEMA

    def __init__(self, search: Callable[..., SearchPage], conversation_id: str, page_size: int) -> None:
        self._search = search
        self.conversation_id = conversation_id
        self.page_size = page_size

    def definition(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API takes it in ``tools``."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        """Run one call; never raises for bad arguments (they are reported to the model)."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return ToolOutput(f"Error: the arguments are not valid JSON: {arguments[:200]!r}", True)
        if not isinstance(arguments, dict):
            return ToolOutput('Error: pass an object such as {"keyword": "invoice"}.', True)
        unknown = sorted(set(arguments) - set(TOOL_INPUT_SCHEMA["properties"]))
        if unknown:
            return ToolOutput(f"Error: unknown argument(s) {', '.join(unknown)}; use keyword, page, match_mode.", True)
        try:
            query = SearchQuery.build(
                arguments.get("keyword"), arguments.get("match_mode"), arguments.get("page"), self.page_size
            )
        except SearchError as exc:
            return ToolOutput(f"Error: {exc}.", True)
        return ToolOutput(format_page(self._search(self.conversation_id, query), query))

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return self.run(arguments).text
