"""What the model sees of chat-memory: the ``conversation_search`` and ``fetch_tool_result``
tools (their definitions, the text of their answers, how bad arguments are answered).

Pages are numbered from 1 in the tool's input and in its text alike ("page 2 of 3" is what
``"page": 2`` returns): models read "page 1" as the first page, so one numbering that matches
that reading leaves nothing to translate. (The Python API, ``memory.search(page=0)``, keeps
counting from 0 like an offset.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import SearchError
from .events import Event
from .search import MatchMode, SearchPage, SearchQuery, fold

TOOL_NAME = "conversation_search"
TOOL_DESCRIPTION = (
    "Search the whole stored history of this conversation, including older messages that are "
    "no longer shown to you. Use it whenever the user refers to something said earlier that you "
    "cannot see. Matching is literal and case-insensitive over user and assistant messages, tool "
    "calls and tool results (not your own earlier searches); results come oldest first, one page "
    "at a time, pages numbered from 1."
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
            "minimum": 1,
            "description": "Which page of results to return: 1 is the first (default 1); each answer says which page to ask for next.",
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
    number = page.page + 1  # pages are numbered from 1 in the tool's text and input
    lines = [f'Results {first}-{last} of {page.total} for "{query.keyword}" (page {number} of {page.pages}, oldest first):']
    if not page.hits:
        lines = [f"Page {number} is past the last page ({page.pages}) of {page.total} results; pages run from 1 to {page.pages}."]
    for hit in page.hits:
        when = hit.created_at.strftime("%Y-%m-%d %H:%M UTC")
        where = "archived" if hit.archived else "in view"
        lines.append(f"- [#{hit.seq} · {when} · {hit.type} · {where}] {snippet(hit.content, query.terms)}")
    if page.has_more:
        lines.append(f"More results: call {TOOL_NAME} again with {json.dumps(next_page_input(query, number + 1), ensure_ascii=False)}.")
    else:
        lines.append("No more results.")
    return "\n".join(lines)


def next_page_input(query: SearchQuery, page: int) -> dict[str, Any]:
    """The exact tool input that asks for ``page`` (numbered from 1) of the same search."""
    arguments: dict[str, Any] = {"keyword": query.keyword, "page": page}
    if query.match_mode is not MatchMode.PHRASE:
        arguments["match_mode"] = query.match_mode.value
    return arguments


def tool_page(value: Any) -> int:
    """The tool's ``page`` input (from 1; None is 1) as the 0-based page of the query model."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SearchError(f"page ({value!r}) must be a whole number, 1 or more (pages are numbered from 1)")
    return value - 1


def openai_function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool in the OpenAI Chat Completions ``tools`` shape."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def parse_arguments(arguments: dict[str, Any] | str | None, example: str) -> dict[str, Any] | ToolOutput:
    """The arguments as a dict (JSON text is parsed), or the error answer for the model."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ToolOutput(f"Error: the arguments are not valid JSON: {arguments[:200]!r}", True)
    if not isinstance(arguments, dict):
        return ToolOutput(f"Error: pass an object such as {example}.", True)
    return arguments


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

    def openai_definition(self) -> dict[str, Any]:
        """The tool as the OpenAI Chat Completions API takes it in ``tools``."""
        return openai_function(self.name, self.description, self.input_schema)

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        """Run one call; never raises for bad arguments (they are reported to the model)."""
        query = self._query(arguments)
        if isinstance(query, ToolOutput):
            return query
        return ToolOutput(format_page(self._search(self.conversation_id, query), query))

    def _query(self, arguments: dict[str, Any] | str | None) -> SearchQuery | ToolOutput:
        arguments = parse_arguments(arguments, '{"keyword": "invoice"}')
        if isinstance(arguments, ToolOutput):
            return arguments
        unknown = sorted(set(arguments) - set(TOOL_INPUT_SCHEMA["properties"]))
        if unknown:
            return ToolOutput(f"Error: unknown argument(s) {', '.join(unknown)}; use keyword, page, match_mode.", True)
        try:
            return SearchQuery.build(
                arguments.get("keyword"), arguments.get("match_mode"), tool_page(arguments.get("page")), self.page_size
            )
        except SearchError as exc:
            return ToolOutput(f"Error: {exc}.", True)

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return self.run(arguments).text


class AsyncConversationSearchTool(ConversationSearchTool):
    """:class:`ConversationSearchTool` whose ``run`` and ``__call__`` are coroutines (from
    :meth:`AsyncChatMemory.search_tool <chat_memory.AsyncChatMemory.search_tool>`)."""

    async def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:  # type: ignore[override]
        """Run one call; never raises for bad arguments (they are reported to the model)."""
        query = self._query(arguments)
        if isinstance(query, ToolOutput):
            return query
        return ToolOutput(format_page(await self._search(self.conversation_id, query), query))

    async def __call__(self, arguments: dict[str, Any] | str | None) -> str:  # type: ignore[override]
        return (await self.run(arguments)).text


FETCH_TOOL_NAME = "fetch_tool_result"
FETCH_TOOL_DESCRIPTION = (
    "Return the full output of an earlier tool call of this conversation, by its tool_call_id. "
    "Long tool results you have already read are shown to you shortened, with a preview and their "
    "tool_call_id; call this when you need the whole text again. It also finds results that are "
    "no longer in view."
)
FETCH_TOOL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_call_id": {
            "type": "string",
            "description": "The tool_call_id named in the shortened result (or of any earlier tool call).",
        },
    },
    "required": ["tool_call_id"],
    "additionalProperties": False,
}


class FetchToolResultTool:
    """The ``fetch_tool_result`` tool bound to one conversation: the full, stored output of
    a tool call by its id, in the window or archived. Same shape as
    :class:`ConversationSearchTool`."""

    name = FETCH_TOOL_NAME
    description = FETCH_TOOL_DESCRIPTION
    input_schema = FETCH_TOOL_INPUT_SCHEMA

    def __init__(self, fetch: Callable[[str, str], Event | None], conversation_id: str) -> None:
        self._fetch = fetch
        self.conversation_id = conversation_id

    def definition(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API takes it in ``tools``."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def openai_definition(self) -> dict[str, Any]:
        """The tool as the OpenAI Chat Completions API takes it in ``tools``."""
        return openai_function(self.name, self.description, self.input_schema)

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        """Run one call; never raises for bad arguments (they are reported to the model)."""
        call_id = self._call_id(arguments)
        if isinstance(call_id, ToolOutput):
            return call_id
        return self._answer(call_id, self._fetch(self.conversation_id, call_id))

    def _call_id(self, arguments: dict[str, Any] | str | None) -> str | ToolOutput:
        arguments = parse_arguments(arguments, '{"tool_call_id": "call_123"}')
        if isinstance(arguments, ToolOutput):
            return arguments
        unknown = sorted(set(arguments) - set(FETCH_TOOL_INPUT_SCHEMA["properties"]))
        if unknown:
            return ToolOutput(f"Error: unknown argument(s) {', '.join(unknown)}; use tool_call_id.", True)
        call_id = arguments.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id.strip():
            return ToolOutput(f"Error: tool_call_id ({call_id!r}) must be a non-blank string.", True)
        return call_id.strip()

    @staticmethod
    def _answer(call_id: str, found: Event | None) -> ToolOutput:
        if found is None:
            return ToolOutput(f"Error: no tool result with tool_call_id {call_id!r} in this conversation.", True)
        tool = f" ({found.tool_name})" if found.tool_name else ""
        error = ", an error" if found.is_error else ""
        return ToolOutput(f"Full output of tool call {found.tool_call_id}{tool}{error}:\n{found.content}")

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return self.run(arguments).text


class AsyncFetchToolResultTool(FetchToolResultTool):
    """:class:`FetchToolResultTool` whose ``run`` and ``__call__`` are coroutines."""

    async def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:  # type: ignore[override]
        """Run one call; never raises for bad arguments (they are reported to the model)."""
        call_id = self._call_id(arguments)
        if isinstance(call_id, ToolOutput):
            return call_id
        return self._answer(call_id, await self._fetch(self.conversation_id, call_id))

    async def __call__(self, arguments: dict[str, Any] | str | None) -> str:  # type: ignore[override]
        return (await self.run(arguments)).text
