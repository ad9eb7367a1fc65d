"""Node definitions: a node is data (name, version, title, fields, outputs, sub-node slots),
rendered as JSON Schema 2020-12 with canvas hints under ``x-ui``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..backends import BUILTIN_NODE, Store, StoreNode, store_classes
from ..errors import ConfigurationError
from .fields import (
    CONVERSATION_ID,
    MAX_MESSAGES_V1,
    SCOPE_FIELDS,
    FieldSpec,
    ShowIf,
    connection_fields,
    memory_fields,
    summarizing_strategies,
)

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: Node kinds; a sub-node slot accepts some of them.
TRIGGER, AGENT, MODEL, MEMORY, ACTION = "trigger", "agent", "model", "memory", "action"


def is_expression(value: Any) -> bool:
    """True for a parameter value holding a ``${node.path}`` expression: such values are
    checked once resolved, at run time."""
    return isinstance(value, str) and "${" in value


@dataclass(frozen=True)
class ClusterSlot:
    """A place on a node where a sub-node (cluster element) attaches, e.g. the agent's model."""

    name: str
    label: str
    accepts: tuple[str, ...]
    required: bool = False
    show_if: ShowIf | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "label": self.label,
            "accepts": list(self.accepts),
            "required": self.required,
        }
        if self.show_if:
            data["showIf"] = {key: list(values) for key, values in self.show_if.items()}
        return data


@dataclass(frozen=True)
class NodeDefinition:
    """One version of one node type. ``type`` (``name/vN``) is what a workflow names."""

    name: str
    version: int
    title: str
    description: str
    kind: str
    fields: tuple[FieldSpec, ...] = ()
    outputs: tuple[str, ...] = ()
    cluster_elements: tuple[ClusterSlot, ...] = ()
    storage: str | None = None

    @property
    def type(self) -> str:
        """The versioned type name, e.g. ``chatMemory/v2``."""
        return f"{self.name}/v{self.version}"

    def field(self, name: str) -> FieldSpec | None:
        """The field called ``name``, or None."""
        return next((f for f in self.fields if f.name == name), None)

    def slot(self, name: str) -> ClusterSlot | None:
        """The sub-node slot called ``name``, or None."""
        return next((s for s in self.cluster_elements if s.name == name), None)

    def defaults(self) -> dict[str, Any]:
        """Every field's default value."""
        return {f.name: f.schema["default"] for f in self.fields if "default" in f.schema}

    def visible_fields(self, parameters: Mapping[str, Any]) -> list[str]:
        """Names of the fields the canvas shows for these parameters, in canvas order."""
        values = {**self.defaults(), **parameters}
        return [f.name for f in sorted(self.fields, key=lambda f: f.order) if f.is_shown(values)]

    def schema(self) -> dict[str, Any]:
        """The parameters' JSON Schema (2020-12), each property carrying its ``x-ui`` hints."""
        return {
            "$schema": JSON_SCHEMA_DIALECT,
            "$id": f"urn:chat-memory:node:{self.type}",
            "title": self.title,
            "type": "object",
            "properties": {f.name: f.property_schema() for f in self.fields},
            "required": [f.name for f in self.fields if f.required],
            "additionalProperties": False,
        }

    def to_json(self) -> dict[str, Any]:
        """The whole definition as the canvas loads it."""
        data: dict[str, Any] = {
            "type": self.type,
            "name": self.name,
            "version": self.version,
            "title": self.title,
            "description": self.description,
            "kind": self.kind,
            "parameters": self.schema(),
            "outputs": list(self.outputs),
            "clusterElements": {slot.name: slot.to_json() for slot in self.cluster_elements},
        }
        if self.storage:
            data["storage"] = self.storage
        return data

    def check_parameters(
        self, parameters: Mapping[str, Any], skip: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Refuse unknown fields, missing required ones and literal values of the wrong type
        (expressions are left for run time; fields in ``skip`` are checked by their owner).
        Returns the parameters with defaults filled in."""
        if not isinstance(parameters, Mapping):
            raise ConfigurationError(f"parameters ({parameters!r}) must be an object")
        known = {f.name for f in self.fields}
        unknown = [name for name in parameters if name not in known]
        if unknown:
            name = unknown[0]
            fields = ", ".join(sorted(known)) or "no fields"
            raise ConfigurationError(
                f"Unknown field {name!r} (value {parameters[name]!r}); {self.type} has: {fields}"
            )
        for spec in self.fields:
            value = parameters.get(spec.name)
            if spec.required and value is None:
                raise ConfigurationError(f"{spec.label} ({value!r}) is required")
            if spec.name in parameters and spec.name not in skip and not is_expression(value):
                spec.check(value)
        return {**self.defaults(), **parameters}


# -- the nodes ------------------------------------------------------------------------------


def store_nodes() -> list[tuple[StoreNode, type[Store] | None]]:
    """Each Chat Memory node's declaration and the store class behind it (None for the
    built-in node, which follows ``CHAT_MEMORY_URL``), in canvas order."""
    declared: list[tuple[StoreNode, type[Store] | None]] = [(BUILTIN_NODE, None)]
    declared += [(cls.node, cls) for cls in store_classes() if cls.node is not None]
    return sorted(declared, key=lambda pair: pair[0].order)


def store_node(storage: str) -> tuple[StoreNode, type[Store] | None]:
    """The declaration and store class of one storage kind (``builtin``, ``jdbc``, ``redis``…)."""
    for node, store_class in store_nodes():
        if node.storage == storage:
            return node, store_class
    known = ", ".join(node.storage for node, _ in store_nodes())
    raise ConfigurationError(f"no Chat Memory node has storage {storage!r}; storages: {known}")


def summarizer_slot() -> ClusterSlot:
    """Where a summarizer model sub-node attaches, shown for the strategies that summarise."""
    return ClusterSlot(
        "summarizerModel",
        "Summarizer model",
        (MODEL,),
        show_if={"compactionStrategy": summarizing_strategies()},
    )


def memory_node(storage: str, version: int = 2) -> NodeDefinition:
    """The Chat Memory node of one storage kind: version 2 has the scope fields (User ID, App)
    and the full memory field set, version 1 the old plain message-count window."""
    node, _ = store_node(storage)
    name, title, description = node.name, node.title, node.description
    if version == 2:
        memory = memory_fields()
        connection = connection_fields(node, memory[-1].order + 1)
        fields = (CONVERSATION_ID, *SCOPE_FIELDS, *memory, *connection)
        slots: tuple[ClusterSlot, ...] = (summarizer_slot(),)
    elif version == 1:
        fields, slots = (CONVERSATION_ID, MAX_MESSAGES_V1, *connection_fields(node)), ()
        description += " Version 1: a plain message-count window."
    else:
        raise ConfigurationError(f"{name} has no version {version}")
    return NodeDefinition(name, version, title, description, MEMORY, fields, (), slots, storage)


def memory_definitions() -> list[NodeDefinition]:
    """The Chat Memory nodes, one per storage (the built-in store and every registered store
    that declares a node): version 2, and version 1 kept for old workflows."""
    return [memory_node(node.storage, version) for node, _ in store_nodes() for version in (2, 1)]
