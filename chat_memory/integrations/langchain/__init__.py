"""LangChain and LangGraph: a chat history, the recall tools, and a ``create_agent`` middleware.

- :class:`ChatMemoryHistory`: a ``BaseChatMessageHistory`` over one conversation (any
  LangChain code that takes a chat history, and Langflow's Message History).
- :func:`search_tools`: ``conversation_search`` and ``fetch_tool_result`` as LangChain tools.
- :class:`ChatMemoryMiddleware`: an agent middleware for LangChain v1's ``create_agent``
  that stores every step and shows the model chat-memory's window (needs the ``langchain``
  package: ``pip install 'chat-memory[langchain-agents]'``).
- :func:`events_from_messages` / :func:`history_messages` / :func:`messages_from_window`: the
  mapping itself (a history's messages with their ids; a model request's).

Needs ``langchain-core`` (``pip install 'chat-memory[langchain]'``). The mapping is in
docs/integrations.md."""

from __future__ import annotations

from typing import Any

from .. import missing_extra

try:
    import langchain_core  # noqa: F401
except ImportError:  # pragma: no cover - exercised by the architecture test's subprocess
    raise missing_extra("langchain-core", "langchain") from None

from .convert import events_from_messages, history_messages, messages_from_window
from .history import ChatMemoryHistory
from .tools import search_tools

__all__ = [
    "ChatMemoryHistory",
    "ChatMemoryMiddleware",
    "events_from_messages",
    "history_messages",
    "messages_from_window",
    "search_tools",
]


def __getattr__(name: str) -> Any:
    # the middleware needs the `langchain` package, the rest only langchain-core
    if name == "ChatMemoryMiddleware":
        from .middleware import ChatMemoryMiddleware

        return ChatMemoryMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
