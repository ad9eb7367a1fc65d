"""The search model every store implements: a validated query (literal, case-insensitive,
three match modes), what a store returns, and the pages the engine hands back. What the
model sees of search is in :mod:`chat_memory.tools`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from .errors import SearchError
from .events import Event, EventType

SEARCHABLE_TYPES = frozenset({EventType.USER, EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT})

#: The tools through which the model reads its own conversation: their calls and results only
#: echo other events (a search result quotes the hits, a fetched result repeats a stored one),
#: so search leaves them out unless asked (``SearchQuery.include_recall_tools``).
RECALL_TOOL_NAMES = frozenset({"conversation_search", "fetch_tool_result"})

#: First character of the stored search text of a recall-tool event. It is whitespace, and no
#: term starts with whitespace (terms are stripped words or phrases), so a match can never
#: start at or run across it; ordinary texts are stored without leading whitespace (which can
#: never be part of a match either), so only recall-tool texts start with it. Stores filter on
#: it where they push search down (``NOT LIKE`` in SQL, one byte compare in Lua).
RECALL_MARK = "\x1f"


class MatchMode(str, Enum):
    """How the keyword is matched: as one phrase, every word, or any word."""

    PHRASE = "phrase"
    ALL = "all"
    ANY = "any"


def fold(text: str) -> str:
    """Case-folded text: the one normalisation every backend matches on."""
    return text.casefold()


def is_recall_tool_event(event: Event) -> bool:
    """True for a call of a recall tool (:data:`RECALL_TOOL_NAMES`) or its result (the engine
    names each result after its call when it is stored)."""
    return event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT) and event.tool_name in RECALL_TOOL_NAMES


def search_text(event: Event) -> str | None:
    """The folded text an event is searched by (what every store keeps beside the event), or
    None for events that are never searched (system events and summaries). Recall-tool events
    are marked with :data:`RECALL_MARK` so that a query can leave them out without reading them."""
    if event.type not in SEARCHABLE_TYPES:
        return None
    folded = fold(event.text())
    if is_recall_tool_event(event):
        return RECALL_MARK + folded
    return folded.lstrip()


@dataclass(frozen=True)
class SearchQuery:
    """A validated search request: folded terms, a match mode and the slice of matches wanted."""

    keyword: str
    match_mode: MatchMode
    offset: int
    limit: int
    #: also match the calls and results of the recall tools (off: they only echo other events)
    include_recall_tools: bool = False

    @classmethod
    def build(
        cls,
        keyword: Any,
        match_mode: Any = "phrase",
        page: Any = 0,
        page_size: int = 10,
        include_recall_tools: bool = False,
    ) -> SearchQuery:
        """Validate user input into a query (``page`` counts from 0); raises
        :class:`SearchError` naming the bad value."""
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
        if not isinstance(include_recall_tools, bool):
            raise SearchError(f"include_recall_tools ({include_recall_tools!r}) must be True or False")
        return cls(
            keyword=keyword,
            match_mode=mode,
            offset=page * page_size,
            limit=page_size,
            include_recall_tools=include_recall_tools,
        )

    @property
    def terms(self) -> tuple[str, ...]:
        """The folded needles: the whole keyword for ``phrase``, its words otherwise."""
        if self.match_mode is MatchMode.PHRASE:
            return (fold(self.keyword.strip()),)
        return tuple(dict.fromkeys(fold(word) for word in self.keyword.split()))

    def matches(self, folded_text: str) -> bool:
        """True when a stored search text (:func:`search_text`) matches this query."""
        if folded_text.startswith(RECALL_MARK) and not self.include_recall_tools:
            return False
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
