"""The Langflow names of our nodes: the component name is the node's name (``redisChatMemory``)."""

from __future__ import annotations

from ...components import memory_node


def node_texts(storage: str) -> tuple[str, str, str]:
    """(name, title, description) of the version-2 Chat Memory node of ``storage``."""
    definition = memory_node(storage)
    return definition.name, definition.title, definition.description
