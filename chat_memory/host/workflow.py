"""The workflow format (JSON) and its import: every node's type and version is known, every
parameter is valid, every ``${node.output}`` names a node and an output that exist, every
sub-node sits in a slot that accepts it. Errors say which node and which field."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import ConfigurationError
from ..components import NodeDefinition, NodeRegistry, memory_settings
from ..components.definitions import MEMORY, MODEL, is_expression
from ..safe_json import MAX_DOCUMENT_DEPTH, JSONLimitError, check, loads
from ..templates import template_source
from .expressions import references
from .nodes import default_registry

FORMAT_VERSION = 1
_NODE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class WorkflowError(ConfigurationError):
    """A workflow that cannot be imported; the message names the node and the problem."""


@dataclass(frozen=True)
class WorkflowNode:
    """A node of a workflow: its name (``chat_1``), definition, parameters and sub-nodes."""

    name: str
    definition: NodeDefinition
    parameters: dict[str, Any]
    cluster_elements: dict[str, WorkflowNode] = field(default_factory=dict)
    parent: str | None = None

    @property
    def type(self) -> str:
        return self.definition.type

    def element(self, slot: str) -> WorkflowNode | None:
        """The sub-node attached to ``slot``, if any."""
        return self.cluster_elements.get(slot)

    def walk(self) -> Iterator[WorkflowNode]:
        """This node and its sub-nodes, depth first."""
        yield self
        for child in self.cluster_elements.values():
            yield from child.walk()


@dataclass(frozen=True)
class Workflow:
    """An imported, validated workflow."""

    name: str
    title: str
    description: str
    nodes: tuple[WorkflowNode, ...]
    edges: tuple[tuple[str, str], ...]
    source: dict[str, Any]

    def all_nodes(self) -> list[WorkflowNode]:
        """Top-level nodes and every sub-node."""
        return [n for top in self.nodes for n in top.walk()]

    def node(self, name: str) -> WorkflowNode:
        """The node called ``name`` (sub-nodes included)."""
        for candidate in self.all_nodes():
            if candidate.name == name:
                return candidate
        raise WorkflowError(f"workflow {self.name!r} has no node {name!r}")

    def of_kind(self, kind: str) -> list[WorkflowNode]:
        """Top-level nodes of one kind (trigger, agent, action…), in file order."""
        return [n for n in self.nodes if n.definition.kind == kind]

    def order(self) -> list[WorkflowNode]:
        """Top-level nodes in run order: edges first (topologically), file order breaking ties."""
        position = {n.name: i for i, n in enumerate(self.nodes)}
        incoming = {n.name: {a for a, b in self.edges if b == n.name} for n in self.nodes}
        done: list[str] = []
        while len(done) < len(self.nodes):
            ready = [n for n in incoming if n not in done and incoming[n] <= set(done)]
            if not ready:
                raise WorkflowError(f"workflow {self.name!r} has a cycle among its edges")
            done.append(min(ready, key=position.__getitem__))
        return [self.nodes[position[name]] for name in done]


def import_workflow(
    data: Mapping[str, Any] | str, registry: NodeRegistry | None = None
) -> Workflow:
    """Parse and validate a workflow (a dict or JSON text). Raises :class:`WorkflowError`,
    also for a workflow nested more than :data:`~chat_memory.safe_json.MAX_DOCUMENT_DEPTH`
    levels deep or holding an integer of more than
    :data:`~chat_memory.safe_json.MAX_INT_DIGITS` digits (checked before anything recurses)."""
    registry = registry or default_registry()
    try:
        if isinstance(data, str):
            data = loads(data, "the workflow", MAX_DOCUMENT_DEPTH)
        else:
            check(data, "the workflow", MAX_DOCUMENT_DEPTH)
    except JSONLimitError as exc:
        raise WorkflowError(str(exc)) from None
    if not isinstance(data, Mapping):
        raise WorkflowError(f"workflow ({type(data).__name__}) must be a JSON object")
    version = data.get("formatVersion", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise WorkflowError(
            f"formatVersion ({version!r}) is not supported; this version reads {FORMAT_VERSION}"
        )
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise WorkflowError(f"nodes ({raw_nodes!r}) must be a non-empty list")
    seen: set[str] = set()
    nodes = tuple(
        _node(raw, registry, seen, parent=None, where=f"nodes[{i}]")
        for i, raw in enumerate(raw_nodes)
    )
    workflow = Workflow(
        name=str(data.get("name") or "workflow"),
        title=str(data.get("title") or data.get("name") or "Workflow"),
        description=str(data.get("description") or ""),
        nodes=nodes,
        edges=_edges(data.get("edges", []), {n.name for n in nodes}),
        source=dict(data),
    )
    _check_references(workflow)
    workflow.order()
    return workflow


def _node(
    raw: Any, registry: NodeRegistry, seen: set[str], parent: str | None, where: str
) -> WorkflowNode:
    if not isinstance(raw, Mapping):
        raise WorkflowError(f"{where} ({raw!r}) must be an object with name, type and parameters")
    name = raw.get("name")
    if not isinstance(name, str) or not _NODE_NAME.match(name):
        raise WorkflowError(
            f"{where}: node name ({name!r}) must be letters, digits and _ (e.g. chat_1)"
        )
    if name in seen:
        raise WorkflowError(f"node {name!r} is defined twice")
    seen.add(name)
    try:
        definition = registry.get(raw.get("type"))
    except ConfigurationError as exc:
        raise WorkflowError(f"node {name!r}: {exc}") from None
    children: dict[str, WorkflowNode] = {}
    raw_children = raw.get("clusterElements") or {}
    if not isinstance(raw_children, Mapping):
        raise WorkflowError(
            f"node {name!r}: clusterElements ({raw_children!r}) must be an object of slot: node"
        )
    for slot_name, raw_child in raw_children.items():
        slot = definition.slot(slot_name)
        if slot is None:
            slots = ", ".join(s.name for s in definition.cluster_elements) or "none"
            raise WorkflowError(
                f"node {name!r} ({definition.type}) has no sub-node slot {slot_name!r}; slots: {slots}"
            )
        child = _node(
            raw_child, registry, seen, parent=name, where=f"{name}.clusterElements.{slot_name}"
        )
        if child.definition.kind not in slot.accepts:
            raise WorkflowError(
                f"node {name!r}: slot {slot_name!r} takes a {' or '.join(slot.accepts)} node, not {child.type}"
            )
        children[slot_name] = child
    for slot in definition.cluster_elements:
        if slot.required and slot.name not in children:
            raise WorkflowError(
                f"node {name!r} ({definition.type}) needs a sub-node in its {slot.name!r} slot"
            )
    parameters = raw.get("parameters") or {}
    try:
        if definition.kind == MEMORY:
            memory_settings(definition, parameters, model_name(children.get("summarizerModel")))
        else:
            definition.check_parameters(parameters)
    except ConfigurationError as exc:
        raise WorkflowError(f"node {name!r} ({definition.type}): {exc}") from None
    return WorkflowNode(name, definition, dict(parameters), children, parent)


def model_name(node: WorkflowNode | None) -> str | None:
    """The model name of a model sub-node (its default when not set)."""
    if node is None or node.definition.kind != MODEL:
        return None
    model = {**node.definition.defaults(), **node.parameters}.get("model")
    return model if isinstance(model, str) and model and not is_expression(model) else None


def _edges(raw: Any, names: set[str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise WorkflowError(f"edges ({raw!r}) must be a list of {{'from': node, 'to': node}}")
    edges = []
    for i, edge in enumerate(raw):
        if not isinstance(edge, Mapping):
            raise WorkflowError(f"edges[{i}] ({edge!r}) must be an object with from and to")
        for end in ("from", "to"):
            if not isinstance(edge.get(end), str) or edge.get(end) not in names:
                raise WorkflowError(
                    f"edges[{i}].{end} ({edge.get(end)!r}) is not a top-level node of this workflow"
                )
        edges.append((edge["from"], edge["to"]))
    return tuple(edges)


def _check_references(workflow: Workflow) -> None:
    by_name = {n.name: n for n in workflow.all_nodes()}
    for node in workflow.all_nodes():
        for key, value in node.parameters.items():
            try:
                refs = references(value)
            except ConfigurationError as exc:
                raise WorkflowError(f"node {node.name!r}, field {key!r}: {exc}") from None
            for ref in refs:
                target = by_name.get(ref.node)
                if target is None:
                    raise WorkflowError(
                        f"node {node.name!r}, field {key!r}: {ref} refers to a missing node {ref.node!r}"
                    )
                if target is node:
                    raise WorkflowError(
                        f"node {node.name!r}, field {key!r}: {ref} refers to the node itself"
                    )
                if ref.path[0] not in target.definition.outputs:
                    outputs = ", ".join(target.definition.outputs) or "none"
                    raise WorkflowError(
                        f"node {node.name!r}, field {key!r}: {ref}: node {ref.node!r} ({target.type}) "
                        f"has no output {ref.path[0]!r}; outputs: {outputs}"
                    )


# -- the templates shipped with the package -------------------------------------------------


def load_template(name: str, registry: NodeRegistry | None = None) -> Workflow:
    """Import a bundled template (``compacting-chat``…)."""
    try:
        source = template_source(name)
    except ConfigurationError as exc:
        raise WorkflowError(str(exc)) from None
    return import_workflow(source, registry)
