"""``conversation_search`` and ``fetch_tool_result`` as LangChain tools."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from langchain_core.tools import StructuredTool, ToolException

from ...tools import (
    AsyncConversationSearchTool,
    AsyncFetchToolResultTool,
    ToolOutput,
    parse_arguments,
)
from ..memory import AnyMemory, check_memory, sync_refused

#: The key under which :class:`ScreenedTool` hands a refusal to the tool's function.
REFUSAL = "__chat_memory_refusal__"


class _Refusal(str):
    """A refusal text made by :class:`ScreenedTool` (a model's JSON cannot produce one)."""


class ScreenedTool(StructuredTool):
    """A ``StructuredTool`` whose input is screened before LangChain touches it: LangChain's
    ``run`` takes ``str()`` of the whole input first (for its callbacks), which recurses
    into a deeply nested input (``RecursionError``) and fails on a huge integer
    (``ValueError``). An input nested too deep, holding a huge integer, or no object is
    replaced by a refusal, answered as an error ``ToolMessage``; JSON text is parsed."""

    example: str = "{}"

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        return super().run(self._screen(tool_input), *args, **kwargs)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        return await super().arun(self._screen(tool_input), *args, **kwargs)

    def _screen(self, tool_input: Any) -> dict[str, Any]:
        parsed = parse_arguments(tool_input, self.example)
        if isinstance(parsed, ToolOutput):
            return {REFUSAL: _Refusal(parsed.text)}
        return parsed


class ModelTool(Protocol):
    """What :func:`as_langchain_tool` needs of a chat-memory tool: the recall tools, the
    memory tool, or a tool of your own with the same shape."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def example(self) -> str: ...
    def run(self, arguments: dict[str, Any] | str | None) -> ToolOutput: ...


def as_langchain_tool(
    tool: ModelTool | AsyncConversationSearchTool | AsyncFetchToolResultTool,
) -> StructuredTool:
    """One chat-memory tool as a ``StructuredTool`` with the same name, description and JSON
    schema. An answer that reports an error (a blank keyword, an unknown call id) comes back
    as a ``ToolMessage`` with ``status="error"`` and the explanation as its content.

    A tool of an ``AsyncChatMemory`` is awaited by ``ainvoke`` (no thread); its ``invoke``
    raises a ``ConfigurationError`` saying to use ``ainvoke``. A tool of a ``ChatMemory``
    answers ``invoke`` in this thread and ``ainvoke`` in a worker thread."""

    def run(**arguments: Any) -> str:
        if isinstance(tool, (AsyncConversationSearchTool, AsyncFetchToolResultTool)):
            raise sync_refused(f"the {tool.name} tool's invoke()", "await tool.ainvoke(...)")
        if isinstance(refusal := arguments.get(REFUSAL), _Refusal):
            raise ToolException(refusal)
        return answer(tool.run(given(arguments)))

    async def arun(**arguments: Any) -> str:
        if isinstance(refusal := arguments.get(REFUSAL), _Refusal):
            raise ToolException(refusal)
        if isinstance(tool, (AsyncConversationSearchTool, AsyncFetchToolResultTool)):
            return answer(await tool.run(given(arguments)))
        return await asyncio.to_thread(run, **arguments)

    screened = ScreenedTool.from_function(
        func=run,
        coroutine=arun,
        name=tool.name,
        description=tool.description,
        args_schema=tool.input_schema,
        handle_tool_error=True,
    )
    screened.example = tool.example
    return screened


def given(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments the model gave (LangChain passes the schema's optional ones as None)."""
    return {k: v for k, v in arguments.items() if v is not None}


def answer(output: ToolOutput) -> str:
    """The tool's text; an error answer as a ``ToolException`` (a ``status="error"`` ToolMessage)."""
    if output.is_error:
        raise ToolException(output.text)
    return output.text


def search_tools(
    memory: AnyMemory, conversation_id: str, fetch: bool = True
) -> list[StructuredTool]:
    """``[conversation_search, fetch_tool_result]`` bound to one conversation, for
    ``create_agent(tools=...)`` or ``model.bind_tools(...)`` (``fetch=False``: the search tool
    only). Their own calls and results are left out of search, like the native tools'.
    ``memory`` is a ``ChatMemory`` or an ``AsyncChatMemory`` (see :func:`as_langchain_tool`)."""
    check_memory(memory, "search_tools")
    tools = [as_langchain_tool(memory.search_tool(conversation_id))]
    if fetch:
        tools.append(as_langchain_tool(memory.fetch_tool(conversation_id)))
    return tools
