"""The Auto Memory Tool as a Langflow component: long-term memory (/memories) for an agent's Tools."""

from __future__ import annotations

from chat_memory.components import auto_memory_tool_node
from chat_memory.integrations.langflow.memory_tool import (
    MEMORY_TOOL_OUTPUTS,
    MemoryToolComponent,
    memory_tool_inputs,
)

_NODE = auto_memory_tool_node()


class ChatMemoryAutoMemoryToolComponent(MemoryToolComponent):
    name = _NODE.name
    display_name = _NODE.title
    description = _NODE.description
    inputs = memory_tool_inputs()
    outputs = MEMORY_TOOL_OUTPUTS
