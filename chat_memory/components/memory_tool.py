"""The "Auto Memory Tool" canvas node: long-term memory (the ``memory`` tool) for an AI Agent's
tools slot. Its store follows the same backend choice as the Chat Memory nodes, from the
same store declarations: by default the store of the agent's Chat Memory node (one URL to
configure), or any storage kind with that kind's connection fields (shown only for it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .definitions import NodeDefinition, store_node, store_nodes
from .fields import FieldSpec, connection_field

TOOL = "tool"
#: the storage choice meaning "the store of the agent's Chat Memory node"
SAME_AS_CHAT_MEMORY = "chatMemory"
_CONNECTION_ORDER = 10


def _connection_name(storage: str, field: str) -> str:
    return f"{storage}{field[:1].upper()}{field[1:]}"


def _fields() -> tuple[FieldSpec, ...]:
    storages = [node.storage for node, _ in store_nodes()]
    fields = [
        FieldSpec(
            "namespace",
            {"type": "string", "minLength": 1},
            "Namespace",
            "Whose memory this is: one namespace per user (or agent, or team). Usually ${chat_1.userId}.",
            0,
            required=True,
            placeholder="${chat_1.userId}",
        ),
        FieldSpec(
            "storage",
            {
                "type": "string",
                "enum": [SAME_AS_CHAT_MEMORY, *storages],
                "default": SAME_AS_CHAT_MEMORY,
            },
            "Storage",
            "Where the memory files live: the agent's Chat Memory store, or another storage.",
            1,
        ),
        FieldSpec(
            "maxFileBytes",
            {"type": "integer", "minimum": 1, "default": 100_000},
            "Max file size (bytes)",
            "Largest memory file.",
            2,
            advanced=True,
        ),
        FieldSpec(
            "maxFiles",
            {"type": "integer", "minimum": 1, "default": 200},
            "Max files",
            "Most files in one namespace.",
            3,
            advanced=True,
        ),
    ]
    order = _CONNECTION_ORDER
    for node, store_class in store_nodes():
        if store_class is None:
            continue
        for declared in node.fields:
            spec = connection_field(declared, order)
            order += 1
            fields.append(
                FieldSpec(
                    _connection_name(node.storage, declared.name),
                    spec.schema,
                    f"{node.title}: {spec.label}",
                    spec.description,
                    spec.order,
                    advanced=spec.advanced,
                    show_if={"storage": [node.storage]},
                    placeholder=spec.placeholder,
                )
            )
    return tuple(fields)


def auto_memory_tool_node() -> NodeDefinition:
    """The ``autoMemoryTool/v1`` node definition."""
    return NodeDefinition(
        "autoMemoryTool",
        1,
        "Auto Memory Tool",
        "Long-term memory across conversations: the agent reads and edits notes under /memories (Anthropic's "
        "memory tool). Notes are shown to the model as reference, never as instructions.",
        TOOL,
        _fields(),
    )


def memory_tool_store_target(values: Mapping[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """(storage, URL, options) of a node's checked parameters: storage ``chatMemory`` means the
    Chat Memory node's store (URL None); the built-in storage has URL None too."""
    storage = values.get("storage") or SAME_AS_CHAT_MEMORY
    if storage == SAME_AS_CHAT_MEMORY:
        return storage, None, {}
    node, store_class = store_node(storage)
    if store_class is None:
        return storage, None, {}
    connection = {
        f.name: values.get(_connection_name(storage, f.name), f.default) for f in node.fields
    }
    missing = [f.label for f in node.fields if f.required and connection.get(f.name) in (None, "")]
    if missing:
        raise ConfigurationError(
            f"{node.title}: {missing[0]} ({connection.get(missing[0])!r}) is required for storage {storage!r}"
        )
    url, options = store_class.node_target(connection)
    return storage, url, options
