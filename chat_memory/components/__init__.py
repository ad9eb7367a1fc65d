"""Canvas nodes over the engine: the five Chat Memory components (same memory fields,
different storage), the chat template's nodes, and the registry that maps ``name/vN`` to
a definition."""

from __future__ import annotations

from .definitions import ClusterSlot, NodeDefinition, builtin_definitions, memory_node
from .fields import FieldSpec
from .memory_nodes import MemoryNodeSettings, memory_settings
from .registry import NodeRegistry, default_registry, parse_type

#: The version-2 Chat Memory node names, one per storage.
MEMORY_NODE_NAMES = ("chatMemory", "jdbcChatMemory", "redisChatMemory", "awsS3ChatMemory", "inMemoryChatMemory")

__all__ = [
    "MEMORY_NODE_NAMES",
    "ClusterSlot",
    "FieldSpec",
    "MemoryNodeSettings",
    "NodeDefinition",
    "NodeRegistry",
    "builtin_definitions",
    "default_registry",
    "memory_node",
    "memory_settings",
    "parse_type",
]
