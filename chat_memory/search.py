"""The search model every store implements: a validated query (literal, case-insensitive,
three match modes), what a store returns, and the pages the engine hands back. What the
model sees of search is in :mod:`chat_memory.tools`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from .errors import InvalidInputError, SearchError
from .events import Event, EventType

SEARCHABLE_TYPES = frozenset(
    {EventType.USER, EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT}
)

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

#: The longest keyword searched, in characters. Every store's work per event grows with the
#: terms and (in the worst case) their length, and the keyword is model-controlled: 500
#: characters hold a long pasted error line or a dozen-word phrase, yet keep the SQL patterns
#: (16 LIKEs of at most 500 characters) far below SQLite's 50,000-byte pattern limit, its
#: expression-depth limit of 1,000 and PostgreSQL's 65,535 parameters.
MAX_KEYWORD_LENGTH = 500
#: The most distinct words searched in ``all``/``any`` mode (``phrase`` is one term). Redis
#: matches term by term inside the server, so its work per event is proportional to this;
#: a query of more than 16 words is a document, not a search.
MAX_TERMS = 16
#: The longest ``tool_call_id`` :meth:`ChatMemory.fetch_tool_result` looks up (the same bound
#: as a conversation id; providers' ids are under 100 characters).
MAX_TOOL_CALL_ID_LENGTH = 1024
#: How many characters of a refused value an error message quotes: messages reach the model
#: and are stored in the conversation, so a long value is never echoed back.
QUOTED_CHARACTERS = 40


def quoted(value: object) -> str:
    """``repr(value)``, cut to about :data:`QUOTED_CHARACTERS` characters (for error messages)."""
    if isinstance(value, str) and len(value) > QUOTED_CHARACTERS:
        return repr(value[:QUOTED_CHARACTERS]) + "…"
    if isinstance(value, int) and value.bit_length() > 128:
        # repr() of a huge int is slow, and refused past 4,300 digits
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    return text if len(text) <= QUOTED_CHARACTERS + 2 else text[:QUOTED_CHARACTERS] + "…"


def check_tool_call_id(tool_call_id: object) -> str:
    """Return ``tool_call_id`` if it can be looked up: a string of at most
    :data:`MAX_TOOL_CALL_ID_LENGTH` characters; raises :class:`InvalidInputError` otherwise."""
    if not isinstance(tool_call_id, str):
        raise InvalidInputError(f"tool_call_id ({quoted(tool_call_id)}) must be a string")
    if len(tool_call_id) > MAX_TOOL_CALL_ID_LENGTH:
        raise InvalidInputError(
            f"tool_call_id is {len(tool_call_id):,} characters ({quoted(tool_call_id)}); "
            f"ids are at most {MAX_TOOL_CALL_ID_LENGTH:,}: pass the id exactly as the tool call shows it"
        )
    return tool_call_id


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
    return (
        event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT)
        and event.tool_name in RECALL_TOOL_NAMES
    )


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
            raise SearchError(f"keyword ({quoted(keyword)}) must be a non-blank string")
        if len(keyword) > MAX_KEYWORD_LENGTH:
            raise SearchError(
                f"keyword is {len(keyword):,} characters ({quoted(keyword)}); at most {MAX_KEYWORD_LENGTH} "
                "are searched: use a few distinctive words"
            )
        try:
            keyword.encode("utf-8")
        except UnicodeEncodeError:
            raise SearchError(f"keyword ({quoted(keyword)}) is not valid Unicode text") from None
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise SearchError(f"page_size ({quoted(page_size)}) must be a whole number, 1 or more")
        try:
            mode = MatchMode(match_mode if match_mode is not None else "phrase")
        except ValueError:
            raise SearchError(
                f"match_mode ({quoted(match_mode)}) must be one of: {', '.join(m.value for m in MatchMode)}"
            ) from None
        if page is None:
            page = 0
        if isinstance(page, bool) or not isinstance(page, int) or page < 0:
            raise SearchError(f"page ({quoted(page)}) must be a whole number, 0 or more")
        if not isinstance(include_recall_tools, bool):
            raise SearchError(
                f"include_recall_tools ({quoted(include_recall_tools)}) must be True or False"
            )
        query = cls(
            keyword=keyword,
            match_mode=mode,
            offset=page * page_size,
            limit=page_size,
            include_recall_tools=include_recall_tools,
        )
        if len(query.terms) > MAX_TERMS:
            raise SearchError(
                f"keyword has {len(query.terms)} different words ({quoted(keyword)}); at most {MAX_TERMS} are "
                f"searched in match_mode {mode.value!r}: keep the most distinctive ones"
            )
        return query

    @cached_property
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
    return SearchResult(
        events=matched[query.offset : query.offset + query.limit], total=len(matched)
    )


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
    """One page of search results, oldest match first.

    ``page`` counts from 0, as ``memory.search(..., page=0)`` takes it; the
    ``conversation_search`` tool and ``chat-memory search --page`` count from 1.
    :attr:`number` is this page as they (and a person) count it."""

    hits: list[SearchHit]
    page: int
    page_size: int
    total: int

    @property
    def number(self) -> int:
        """This page counted from 1 (``page + 1``): the number the tool and the CLI show
        ("page 1 of 3")."""
        return self.page + 1

    @property
    def has_more(self) -> bool:
        """True when a later page holds more matches."""
        return (self.page + 1) * self.page_size < self.total

    @property
    def pages(self) -> int:
        """How many pages the matches fill."""
        return max(1, -(-self.total // self.page_size))
