"""The 'jdbc' Chat Memory node as a Langflow component (fields from our node definition)."""

from __future__ import annotations

from chat_memory.integrations.langflow.base import (
    MEMORY_OUTPUTS,
    ChatMemoryComponent,
    memory_inputs,
)
from chat_memory.integrations.langflow.naming import node_texts

_NAME, _TITLE, _DESCRIPTION = node_texts("jdbc")


class ChatMemorySQLComponent(ChatMemoryComponent):
    storage = "jdbc"
    name = _NAME
    display_name = _TITLE
    description = _DESCRIPTION
    inputs = memory_inputs("jdbc")
    outputs = MEMORY_OUTPUTS
