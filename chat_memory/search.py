"""Literal, case-insensitive search over a conversation, its result pages, and the
``conversation_search`` tool that lets a model page through them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from .errors import SearchError
from .events import Event, EventType

SEARCHABLE_TYPES = frozenset({EventType.USER, EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT})


class MatchMode(str, Enum):
    """How the keyword is matched: as one phrase, every word, or any word."""

    PHRASE = "phrase"
    ALL = "all"
    ANY = "any"


def fold(text: str) -> str:
    """Case-folded text: the one normalisation every backend matches on."""
    return text.casefold()


def search_text(event: Event) -> str | None:
    """The folded text an event is searched by, or None for events that are never searched
    (system events and summaries)."""
    if event.type not in SEARCHABLE_TYPES:
        return None
    return fold(event.text())


@dataclass(frozen=True)
class SearchQuery:
    """A validated search request: folded terms, a match mode and the slice of matches wanted."""

    keyword: str
    match_mode: MatchMode
    offset: int
    limit: int

    @classmethod
    def build(cls, keyword: Any, match_mode: Any = "phrase", page: Any = 0, page_size: int = 10) -> SearchQuery:
        """Validate user input into a query; raises :class:`SearchError` naming the bad value."""
        if not isinstance(keyword, str) or not keyword.strip():
            raise SearchError(f"keyword ({keyword!r}) must be a non-blank string")
        try:
            keyword.encode("utf-8")
        except UnicodeEncodeError:
            raise SearchError(f"keyword ({keyword!r}) is not valid Unicode text") from None
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise SearchError(f"page_size ({page_size!r}) must be a whole number, 1 or more")
        try:
            mode = MatchMode(match_mode if match_mode is not None else "phrase")
        except ValueError:
            raise SearchError(
                f"match_mode ({match_mode!r}) must be one of: {', '.join(m.value for m in MatchMode)}"
            ) from None
        if page is None:
            page = 0
        if isinstance(page, bool) or not isinstance(page, int) or page < 0:
            raise SearchError(f"page ({page!r}) must be a whole number, 0 or more")
        return cls(keyword=keyword, match_mode=mode, offset=page * page_size, limit=page_size)

    @property
    def terms(self) -> tuple[str, ...]:
        """The folded needles: the whole keyword for ``phrase``, its words otherwise."""
        if self.match_mode is MatchMode.PHRASE:
            return (fold(self.keyword.strip()),)
        return tuple(dict.fromkeys(fold(word) for word in self.keyword.split()))

    def matches(self, folded_text: str) -> bool:
        """True when the folded text matches this query."""
        if self.match_mode is MatchMode.ANY:
            return any(term in folded_text for term in self.terms)
        return all(term in folded_text for term in self.terms)


@dataclass(frozen=True)
class SearchResult:
    """What a store returns: the requested slice of matching events and how many match in all."""

    events: list[Event]
    total: int


def search_events(events: Iterable[Event], query: SearchQuery) -> SearchResult:
    """Run a query over events in memory (for stores that cannot push the match down).
    Events must come oldest first; they are filtered before paging."""
    matched = [e for e in events if (text := search_text(e)) is not None and query.matches(text)]
    return SearchResult(events=matched[query.offset : query.offset + query.limit], total=len(matched))


@dataclass(frozen=True)
class SearchHit:
    """One matching event."""

    seq: int
    type: str
    content: str
    created_at: datetime
    archived: bool

    @classmethod
    def of(cls, event: Event) -> SearchHit:
        return cls(
            seq=event.seq or 0,
            type=event.type.value,
            content=event.text(),
            created_at=event.created_at,
            archived=event.archived,
        )


@dataclass(frozen=True)
class SearchPage:
    """One page of search results, oldest match first."""

    hits: list[SearchHit]
    page: int
    page_size: int
    total: int

    @property
    def has_more(self) -> bool:
        """True when a later page holds more matches."""
        return (self.page + 1) * self.page_size < self.total

    @property
    def pages(self) -> int:
        """How many pages the matches fill."""
        return max(1, -(-self.total // self.page_size))


# -- the conversation_search tool ----------------------------------------------------------

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
