"""``conversation_search`` and ``fetch_tool_result`` as LangChain tools."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.tools import StructuredTool, ToolException

from ...engine import ChatMemory
from ...tools import ConversationSearchTool, FetchToolResultTool


def as_langchain_tool(tool: ConversationSearchTool | FetchToolResultTool) -> StructuredTool:
    """One chat-memory tool as a ``StructuredTool`` with the same name, description and JSON
    schema. An answer that reports an error (a blank keyword, an unknown call id) comes back
    as a ``ToolMessage`` with ``status="error"`` and the explanation as its content."""

    def run(**arguments: Any) -> str:
        arguments = {k: v for k, v in arguments.items() if v is not None}
        output = tool.run(arguments)
        if output.is_error:
            raise ToolException(output.text)
        return output.text

    async def arun(**arguments: Any) -> str:
        return await asyncio.to_thread(run, **arguments)

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=tool.name,
        description=tool.description,
        args_schema=tool.input_schema,
        handle_tool_error=True,
    )


def search_tools(memory: ChatMemory, conversation_id: str, fetch: bool = True) -> list[StructuredTool]:
    """``[conversation_search, fetch_tool_result]`` bound to one conversation, for
    ``create_agent(tools=...)`` or ``model.bind_tools(...)`` (``fetch=False``: the search tool
    only). Their own calls and results are left out of search, like the native tools'."""
    tools = [as_langchain_tool(memory.search_tool(conversation_id))]
    if fetch:
        tools.append(as_langchain_tool(memory.fetch_tool(conversation_id)))
    return tools
