"""Adapters that give other agent frameworks chat-memory's window, archive and search.

Each adapter lives behind its pip extra and is imported on its own:
:mod:`chat_memory.integrations.langchain` (``chat-memory[langchain]``; the agent middleware
needs ``chat-memory[langchain-agents]``) and :mod:`chat_memory.integrations.openai_agents`
(``chat-memory[openai-agents]``). What maps to what is in docs/integrations.md."""

from __future__ import annotations

from ..errors import ConfigurationError


def missing_extra(package: str, extra: str) -> ConfigurationError:
    """The error for an adapter whose framework is not installed, naming the extra."""
    return ConfigurationError(
        f"{package} is not installed; install it with: pip install 'chat-memory[{extra}]'"
    )
