"""The node registry: type name + version → definition. Old versions stay registered so
that workflows saved with them still load."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import ConfigurationError
from .definitions import NodeDefinition

_TYPE_PATTERN = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*)/v(?P<version>[1-9][0-9]*)$")


def parse_type(node_type: object) -> tuple[str, int]:
    """Split ``"chatMemory/v2"`` into ``("chatMemory", 2)``; refuse anything else."""
    match = _TYPE_PATTERN.match(node_type) if isinstance(node_type, str) else None
    if not match:
        raise ConfigurationError(
            f"node type ({node_type!r}) must look like 'chatMemory/v2' (name/vN)"
        )
    return match["name"], int(match["version"])


class NodeRegistry:
    """Node definitions by name and version."""

    def __init__(self, definitions: Iterable[NodeDefinition] = ()) -> None:
        self._definitions: dict[tuple[str, int], NodeDefinition] = {}
        for definition in definitions:
            self.register(definition)

    def register(self, definition: NodeDefinition) -> None:
        """Add a definition; registering the same name and version twice is an error."""
        key = (definition.name, definition.version)
        if key in self._definitions:
            raise ConfigurationError(f"node type {definition.type} is already registered")
        self._definitions[key] = definition

    def get(self, node_type: object) -> NodeDefinition:
        """The definition of ``name/vN``; the error lists the versions that do exist."""
        name, version = parse_type(node_type)
        found = self._definitions.get((name, version))
        if found is not None:
            return found
        versions = self.versions(name)
        if versions:
            listed = ", ".join(f"{name}/v{v}" for v in versions)
            raise ConfigurationError(
                f"node type {node_type!r} has no version {version}; registered: {listed}"
            )
        raise ConfigurationError(
            f"unknown node type {node_type!r}; registered names: {', '.join(self.names())}"
        )

    def latest(self, name: str) -> NodeDefinition:
        """The newest version of ``name``."""
        versions = self.versions(name)
        if not versions:
            raise ConfigurationError(
                f"unknown node type {name!r}; registered names: {', '.join(self.names())}"
            )
        return self._definitions[(name, versions[-1])]

    def versions(self, name: str) -> list[int]:
        """Registered versions of ``name``, oldest first."""
        return sorted(v for (n, v) in self._definitions if n == name)

    def names(self) -> list[str]:
        """Registered node names, sorted."""
        return sorted({n for (n, _) in self._definitions})

    def definitions(self) -> list[NodeDefinition]:
        """Every definition, by name then version."""
        return [self._definitions[key] for key in sorted(self._definitions)]

    def __contains__(self, node_type: object) -> bool:
        try:
            self.get(node_type)
        except ConfigurationError:
            return False
        return True
