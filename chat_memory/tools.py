"""What the model sees of chat-memory: the ``conversation_search`` and ``fetch_tool_result``
tools (their definitions, the text of their answers, how bad arguments are answered).

Pages are numbered from 1 in the tool's input and in its text alike ("page 2 of 3" is what
``"page": 2`` returns): models read "page 1" as the first page, so one numbering that matches
that reading leaves nothing to translate. (The Python API, ``memory.search(page=0)``, keeps
counting from 0 like an offset.)

A tool never raises (see docs/safety-nets.md, "What the model sees when a tool fails"): a bad
argument is answered with a short, specific error text; a store failure or any other
unexpected exception with a short generic one carrying an error id, while the full exception
is logged for the operator (logger ``chat_memory.tools``, level ERROR, with its traceback and
the same id). No SQL, host, port, user, path or driver class name reaches the model, and
nothing the model sent comes back longer than :data:`~chat_memory.safe_json.ECHO_CHARS`
characters."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInputError, SearchError
from .events import Event
from .safe_json import ECHO_CHARS, JSONLimitError, check, describe, echo, loads
from .search import MatchMode, SearchPage, SearchQuery, fold

logger = logging.getLogger(__name__)

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
#: The highest page the tool accepts (a page past the last one is answered as such; this bound
#: keeps the offset a store is asked for within a 64-bit integer).
MAX_TOOL_PAGE = 1_000_000
#: Characters of one of our own refusals (a SearchError's text) shown to the model.
MAX_REFUSAL_CHARS = 300


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
    # the keyword is quoted back cut to ECHO_CHARS: a model's 100 KB keyword must not come back
    # (twice, with the next-page hint) and be stored in the conversation
    if page.total == 0:
        return f"No messages in this conversation match {echo(query.keyword)} ({query.match_mode.value} match)."
    first = page.page * page.page_size + 1
    last = first + len(page.hits) - 1
    number = page.page + 1  # pages are numbered from 1 in the tool's text and input
    lines = [
        f"Results {first}-{last} of {page.total} for {echo(query.keyword)} (page {number} of {page.pages}, oldest first):"
    ]
    if not page.hits:
        lines = [
            f"Page {number} is past the last page ({page.pages}) of {page.total} results; pages run from 1 to {page.pages}."
        ]
    for hit in page.hits:
        when = hit.created_at.strftime("%Y-%m-%d %H:%M UTC")
        where = "archived" if hit.archived else "in view"
        lines.append(
            f"- [#{hit.seq} · {when} · {hit.type} · {where}] {snippet(hit.content, query.terms)}"
        )
    if page.has_more and len(query.keyword) <= ECHO_CHARS:
        lines.append(
            f"More results: call {TOOL_NAME} again with {json.dumps(next_page_input(query, number + 1), ensure_ascii=False)}."
        )
    elif page.has_more:
        rest = {k: v for k, v in next_page_input(query, number + 1).items() if k != "keyword"}
        lines.append(
            f"More results: call {TOOL_NAME} again with the same keyword and {json.dumps(rest)[1:-1]}."
        )
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
        raise SearchError(
            f"page ({describe(value)}) must be a whole number, 1 or more (pages are numbered from 1)"
        )
    return value - 1


def openai_function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool in the OpenAI Chat Completions ``tools`` shape."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def parse_arguments(
    arguments: dict[str, Any] | str | None, example: str
) -> dict[str, Any] | ToolOutput:
    """The arguments as a dict (JSON text is parsed), or the error answer for the model.

    Text and dicts alike are held to :data:`~chat_memory.safe_json.MAX_ARGUMENT_DEPTH` levels
    of nesting and :data:`~chat_memory.safe_json.MAX_INT_DIGITS`-digit integers, checked
    before anything recurses; every key is a string."""
    try:
        if isinstance(arguments, (str, bytes)):
            arguments = loads(arguments)
        elif isinstance(arguments, dict):
            check(arguments)
    except JSONLimitError as exc:
        return ToolOutput(f"Error: {exc}; pass an object such as {example}.", True)
    if not isinstance(arguments, dict):
        return ToolOutput(
            f"Error: the arguments ({describe(arguments)}) must be an object such as {example}.",
            True,
        )
    if not all(isinstance(key, str) for key in arguments):
        return ToolOutput(
            f"Error: argument names must be strings; pass an object such as {example}.", True
        )
    return arguments


def unknown_arguments(arguments: dict[str, Any], known: Iterable[str]) -> ToolOutput | None:
    """The error answer naming (shortly) the arguments a tool does not take, or None."""
    unknown = sorted(set(arguments) - set(known))
    if not unknown:
        return None
    names = ", ".join(echo(name) for name in unknown[:5]) + (
        f" and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
    )
    return ToolOutput(f"Error: unknown argument(s) {names}; use {', '.join(known)}.", True)


def refused(exc: InvalidInputError) -> ToolOutput:
    """One of our own refusals of the model's input (a :class:`SearchError`, an id check:
    short texts of ours) as the model's answer, cut to :data:`MAX_REFUSAL_CHARS` whatever
    it quotes."""
    text = str(exc)
    if len(text) > MAX_REFUSAL_CHARS:
        text = text[:MAX_REFUSAL_CHARS] + "…"
    return ToolOutput(f"Error: {text.rstrip('.')}.", True)


def failed(tool_name: str, exc: BaseException) -> ToolOutput:
    """A store failure or any unexpected exception inside a tool: logged in full for the
    operator (ERROR, with its traceback and an error id), answered to the model with a short
    generic text carrying only that id. Nothing of the exception (SQL, hosts, users, paths,
    driver names) reaches the model."""
    error_id = uuid.uuid4().hex[:12]
    logger.error("%s failed (error id %s)", tool_name, error_id, exc_info=exc)
    return ToolOutput(f"Error: {tool_name} failed (error id {error_id}); try again later.", True)


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
    #: the arguments a refusal shows as an example
    example = '{"keyword": "invoice"}'

    def __init__(
        self, search: Callable[[str, SearchQuery], SearchPage], conversation_id: str, page_size: int
    ) -> None:
        self._search = search
        self._bind(conversation_id, page_size)

    def _bind(self, conversation_id: str, page_size: int) -> None:
        self.conversation_id = conversation_id
        self.page_size = page_size

    def definition(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API takes it in ``tools``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def openai_definition(self) -> dict[str, Any]:
        """The tool as the OpenAI Chat Completions API takes it in ``tools``."""
        return openai_function(self.name, self.description, self.input_schema)

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        """Run one call. Never raises: bad arguments are explained to the model, a failure
        is answered generically and logged (see the module docstring)."""
        try:
            query = self._query(arguments)
            if isinstance(query, ToolOutput):
                return query
            return ToolOutput(format_page(self._search(self.conversation_id, query), query))
        except InvalidInputError as exc:  # SearchError and our other input checks: short, ours
            return refused(exc)
        except Exception as exc:
            return failed(self.name, exc)

    def _query(self, arguments: dict[str, Any] | str | None) -> SearchQuery | ToolOutput:
        parsed = parse_arguments(arguments, self.example)
        if isinstance(parsed, ToolOutput):
            return parsed
        unknown = unknown_arguments(parsed, TOOL_INPUT_SCHEMA["properties"])
        if unknown:
            return unknown
        keyword, match_mode = parsed.get("keyword"), parsed.get("match_mode")
        # checked here so that no message quotes a model's value at length (SearchQuery's own
        # messages repr what they are given)
        if not isinstance(keyword, str) or not keyword.strip():
            return ToolOutput(
                f"Error: keyword ({describe(keyword)}) must be a non-blank string.", True
            )
        if match_mode is not None and not (
            isinstance(match_mode, str) and match_mode in {m.value for m in MatchMode}
        ):
            modes = ", ".join(m.value for m in MatchMode)
            return ToolOutput(
                f"Error: match_mode ({describe(match_mode)}) must be one of: {modes}.", True
            )
        page = tool_page(parsed.get("page"))
        if page >= MAX_TOOL_PAGE:
            return ToolOutput(
                f"Error: page ({describe(page + 1)}) must be at most {MAX_TOOL_PAGE:,}.", True
            )
        return SearchQuery.build(keyword, match_mode, page, self.page_size)

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return self.run(arguments).text


class AsyncConversationSearchTool(ConversationSearchTool):
    """:class:`ConversationSearchTool` whose ``run`` and ``__call__`` are coroutines (from
    :meth:`AsyncChatMemory.search_tool <chat_memory.AsyncChatMemory.search_tool>`)."""

    def __init__(
        self,
        search: Callable[[str, SearchQuery], Awaitable[SearchPage]],
        conversation_id: str,
        page_size: int,
    ) -> None:
        self._asearch = search
        self._bind(conversation_id, page_size)

    # the coroutine twin of run: a subclass on purpose, so that code asking
    # isinstance(tool, ConversationSearchTool) finds both tools
    async def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:  # type: ignore[override]  # a coroutine, see above
        """Run one call; never raises (see :meth:`ConversationSearchTool.run`)."""
        try:
            query = self._query(arguments)
            if isinstance(query, ToolOutput):
                return query
            return ToolOutput(format_page(await self._asearch(self.conversation_id, query), query))
        except InvalidInputError as exc:  # SearchError and our other input checks: short, ours
            return refused(exc)
        except Exception as exc:
            return failed(self.name, exc)

    async def __call__(self, arguments: dict[str, Any] | str | None) -> str:  # type: ignore[override]  # a coroutine, as run
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
    #: the arguments a refusal shows as an example
    example = '{"tool_call_id": "call_123"}'

    def __init__(self, fetch: Callable[[str, str], Event | None], conversation_id: str) -> None:
        self._fetch = fetch
        self.conversation_id = conversation_id

    def definition(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API takes it in ``tools``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def openai_definition(self) -> dict[str, Any]:
        """The tool as the OpenAI Chat Completions API takes it in ``tools``."""
        return openai_function(self.name, self.description, self.input_schema)

    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:
        """Run one call. Never raises: bad arguments are explained to the model, a failure
        is answered generically and logged (see the module docstring)."""
        try:
            call_id = self._call_id(arguments)
            if isinstance(call_id, ToolOutput):
                return call_id
            return self._answer(call_id, self._fetch(self.conversation_id, call_id))
        except InvalidInputError as exc:  # the store's check of the id: short, ours
            return refused(exc)
        except Exception as exc:
            return failed(self.name, exc)

    def _call_id(self, arguments: dict[str, Any] | str | None) -> str | ToolOutput:
        parsed = parse_arguments(arguments, self.example)
        if isinstance(parsed, ToolOutput):
            return parsed
        unknown = unknown_arguments(parsed, FETCH_TOOL_INPUT_SCHEMA["properties"])
        if unknown:
            return unknown
        call_id = parsed.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id.strip():
            return ToolOutput(
                f"Error: tool_call_id ({describe(call_id)}) must be a non-blank string.", True
            )
        return call_id.strip()

    @staticmethod
    def _answer(call_id: str, found: Event | None) -> ToolOutput:
        if found is None:
            return ToolOutput(
                f"Error: no tool result with tool_call_id {echo(call_id)} in this conversation.",
                True,
            )
        tool = f" ({found.tool_name})" if found.tool_name else ""
        error = ", an error" if found.is_error else ""
        return ToolOutput(
            f"Full output of tool call {found.tool_call_id}{tool}{error}:\n{found.content}"
        )

    def __call__(self, arguments: dict[str, Any] | str | None) -> str:
        return self.run(arguments).text


class AsyncFetchToolResultTool(FetchToolResultTool):
    """:class:`FetchToolResultTool` whose ``run`` and ``__call__`` are coroutines."""

    def __init__(
        self, fetch: Callable[[str, str], Awaitable[Event | None]], conversation_id: str
    ) -> None:
        self._afetch = fetch
        self.conversation_id = conversation_id

    # the coroutine twin of run, a subclass on purpose (as AsyncConversationSearchTool)
    async def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput:  # type: ignore[override]  # a coroutine, see above
        """Run one call; never raises (see :meth:`FetchToolResultTool.run`)."""
        try:
            call_id = self._call_id(arguments)
            if isinstance(call_id, ToolOutput):
                return call_id
            return self._answer(call_id, await self._afetch(self.conversation_id, call_id))
        except InvalidInputError as exc:  # the store's check of the id: short, ours
            return refused(exc)
        except Exception as exc:
            return failed(self.name, exc)

    async def __call__(self, arguments: dict[str, Any] | str | None) -> str:  # type: ignore[override]  # a coroutine, as run
        return (await self.run(arguments)).text
