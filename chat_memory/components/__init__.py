"""The Chat Memory canvas nodes as data: five components with the same memory fields and
different storage, derived from :class:`~chat_memory.MemoryConfig`, the registered
strategies and the registered stores; plus the generic node model (definitions, fields, a
registry by ``name/vN``) that a workflow host builds on."""

from __future__ import annotations

from .definitions import ClusterSlot, NodeDefinition, memory_definitions, memory_node, store_nodes
from .fields import APP, USER_ID, FieldSpec
from .memory_tool import SAME_AS_CHAT_MEMORY, TOOL, auto_memory_tool_node, memory_tool_store_target
from .registry import NodeRegistry, parse_type
from .settings import MemoryNodeSettings, memory_settings

#: The version-2 Chat Memory node names, one per storage.
MEMORY_NODE_NAMES = tuple(node.name for node, _ in store_nodes())

__all__ = [
    "APP",
    "MEMORY_NODE_NAMES",
    "SAME_AS_CHAT_MEMORY",
    "TOOL",
    "USER_ID",
    "ClusterSlot",
    "FieldSpec",
    "MemoryNodeSettings",
    "NodeDefinition",
    "NodeRegistry",
    "auto_memory_tool_node",
    "memory_definitions",
    "memory_node",
    "memory_settings",
    "memory_tool_store_target",
    "parse_type",
]
