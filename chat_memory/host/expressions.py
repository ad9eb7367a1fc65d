"""``${node.path}`` expressions in workflow parameters: parsing (for import-time checks)
and resolving against the outputs of nodes that already ran."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import ConfigurationError

_OPEN = "${"
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class Reference:
    """One ``${node.path}``: the node's name and the path into its outputs."""

    node: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return "${" + ".".join((self.node, *self.path)) + "}"


def _spans(text: str) -> list[tuple[int, int, Reference]]:
    """Where each expression starts and ends in ``text``, and what it references."""
    spans = []
    at = text.find(_OPEN)
    while at >= 0:
        end = text.find("}", at)
        if end < 0:
            raise ConfigurationError(
                f"expression in {text!r} is not closed: '${{' without a matching '}}'"
            )
        inner = text[at + 2 : end].strip()
        if not _PATH.match(inner):
            raise ConfigurationError(
                f"expression ${{{inner}}} in {text!r} must be ${{node.output}}, e.g. ${{chat_1.conversationId}}"
            )
        node, *path = inner.split(".")
        spans.append((at, end + 1, Reference(node, tuple(path))))
        at = text.find(_OPEN, end)
    return spans


def references(value: Any) -> list[Reference]:
    """Every reference in a parameter value (strings, and lists and objects of them)."""
    if isinstance(value, str):
        return [ref for _, _, ref in _spans(value)]
    if isinstance(value, Mapping):
        return [ref for item in value.values() for ref in references(item)]
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in references(item)]
    return []


def resolve(value: Any, outputs: Mapping[str, Mapping[str, Any]]) -> Any:
    """Replace expressions by node outputs. A string that is exactly one expression takes the
    output's value as is (a number stays a number); otherwise outputs are put into the text."""
    if isinstance(value, Mapping):
        return {key: resolve(item, outputs) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, outputs) for item in value]
    if not isinstance(value, str) or _OPEN not in value:
        return value
    spans = _spans(value)
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(value):
        return _lookup(spans[0][2], outputs)
    parts, last = [], 0
    for start, end, ref in spans:
        parts += [value[last:start], str(_lookup(ref, outputs))]
        last = end
    return "".join(parts) + value[last:]


def _lookup(ref: Reference, outputs: Mapping[str, Mapping[str, Any]]) -> Any:
    if ref.node not in outputs:
        raise ConfigurationError(f"{ref} refers to node {ref.node!r}, which has not run yet")
    current: Any = outputs[ref.node]
    for part in ref.path:
        if not isinstance(current, Mapping) or part not in current:
            raise ConfigurationError(
                f"{ref}: node {ref.node!r} has no output {'.'.join(ref.path)!r}"
            )
        current = current[part]
    return current
