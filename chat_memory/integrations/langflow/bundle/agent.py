"""Chat Memory Agent: Langflow's Agent with a Chat Memory input that stores every step."""

from __future__ import annotations

from chat_memory.integrations.langflow.agent import CHAT_MEMORY_INPUT, BaseChatMemoryAgentComponent


class ChatMemoryAgentComponent(BaseChatMemoryAgentComponent):
    name = "ChatMemoryAgent"
    display_name = "Chat Memory Agent"
    description = "An agent that remembers with a Chat Memory component: every step stored, the window shown, conversation_search added."
    icon = "bot"
    inputs = [*BaseChatMemoryAgentComponent.inputs, CHAT_MEMORY_INPUT]
