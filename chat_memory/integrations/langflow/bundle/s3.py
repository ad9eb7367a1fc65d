"""The 's3' Chat Memory node as a Langflow component (fields from our node definition)."""

from __future__ import annotations

from chat_memory.integrations.langflow.base import (
    MEMORY_OUTPUTS,
    ChatMemoryComponent,
    memory_inputs,
)
from chat_memory.integrations.langflow.naming import node_texts

_NAME, _TITLE, _DESCRIPTION = node_texts("s3")


class ChatMemoryS3Component(ChatMemoryComponent):
    storage = "s3"
    name = _NAME
    display_name = _TITLE
    description = _DESCRIPTION
    inputs = memory_inputs("s3")
    outputs = MEMORY_OUTPUTS
