"""Our agent for Langflow: Langflow's Agent with a Chat Memory input. Every step (the user's
message, the model's replies with their tool calls, the tool results) is stored in the
memory by :class:`ChatMemoryMiddleware`, the model sees the memory's window, and
``conversation_search`` is added when the memory enables it: agent + chat memory + search
is one wiring, as in the compacting-chat template."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseLanguageModel
from lfx.components.models_and_agents.agent import AgentComponent
from lfx.io import HandleInput

from ...errors import ConfigurationError
from ...tools import ConversationSearchTool, FetchToolResultTool
from ..langchain import ChatMemoryHistory
from ..langchain.middleware import ChatMemoryMiddleware
from ..langchain.tools import as_langchain_tool

CHAT_MEMORY_INPUT = HandleInput(
    name="chat_memory",
    display_name="Chat Memory",
    info="A Chat Memory component's Memory output: it keeps every step and gives the model its window.",
    input_types=["Memory"],
    required=True,
)


class BaseChatMemoryAgentComponent(AgentComponent):
    """Langflow's Agent that remembers with a Chat Memory component."""

    def history(self) -> ChatMemoryHistory:
        """The wired Chat Memory (our LangChain history; anything else is refused)."""
        history = getattr(self, "chat_memory", None)
        if not isinstance(history, ChatMemoryHistory):
            raise ConfigurationError(
                f"Chat Memory ({type(history).__name__}) must be a Chat Memory component's Memory output"
            )
        return history

    def _get_llm(self) -> Any:
        if isinstance(self.model, BaseLanguageModel):  # a wired model component (or the stand-in)
            return self.model
        return super()._get_llm()

    async def get_memory_data(self) -> list[Any]:
        # the window comes from the middleware, not Langflow's message table
        return []

    async def get_agent_requirements(self) -> Any:
        llm, chat_history, tools = await super().get_agent_requirements()
        history = self.history()
        config = history.memory.config
        recall: list[ConversationSearchTool | FetchToolResultTool] = []
        if config.enable_conversation_search_tool:
            recall.append(history.memory.search_tool(history.conversation_id))
        if config.compress_tool_results:
            recall.append(history.memory.fetch_tool(history.conversation_id))
        tools = list(tools or [])
        names = {getattr(t, "name", None) for t in tools}
        tools += [as_langchain_tool(t) for t in recall if t.name not in names]
        self.tools = tools
        return llm, chat_history, tools

    def _build_middleware(self, llm: Any, *, allow_interrupts: bool = True) -> list[Any]:
        history = self.history()
        ours = ChatMemoryMiddleware(history.memory, conversation_id=history.conversation_id)
        return [ours, *super()._build_middleware(llm, allow_interrupts=allow_interrupts)]
