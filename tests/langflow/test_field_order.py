"""Field order on the Langflow canvas: the order a user fills the fields in (the node
definition's order: conversation, strategy, then its limits…), not alphabetical.

The canvas sorts a node's fields with ``sortFields`` (Langflow's frontend,
src/frontend/src/CustomNodes/utils/sort-fields.tsx), ported below: priority fields first,
then by position in ``field_order`` looked up in lowercase, then alphabetically. lfx itself
orders the template by exact name (``reorder_fields``)."""

from __future__ import annotations

import functools
import inspect

import pytest
from lfx.custom.utils import create_component_template

from chat_memory.components import auto_memory_tool_node, memory_node
from chat_memory.integrations.langflow.export import component_templates

PRIORITY_FIELDS = {"code", "template", "mode"}
TEMPLATES = component_templates()
MEMORY_COMPONENTS = {
    "chatMemory": "builtin",
    "jdbcChatMemory": "jdbc",
    "redisChatMemory": "redis",
    "awsS3ChatMemory": "s3",
    "inMemoryChatMemory": "memory",
}


def sort_fields(a: str, b: str, field_order: list[str]) -> int:
    """Langflow's canvas comparator, line for line."""
    na, nb = a.lower(), b.lower()
    if (na in PRIORITY_FIELDS) != (nb in PRIORITY_FIELDS):
        return -1 if na in PRIORITY_FIELDS else 1
    ia = field_order.index(na) if na in field_order else -1
    ib = field_order.index(nb) if nb in field_order else -1
    if ia != -1 and ib != -1:
        return ia - ib
    if ia != -1:
        return -1
    if ib != -1:
        return 1
    # JavaScript's localeCompare: letters first compared without case
    return ((a.lower(), a) > (b.lower(), b)) - ((a.lower(), a) < (b.lower(), b))


def canvas_order(node: dict) -> list[str]:
    """The fields as the canvas lists them (the code field aside)."""
    names = [k for k, v in node["template"].items() if isinstance(v, dict) and k != "code"]
    return sorted(
        names, key=functools.cmp_to_key(lambda a, b: sort_fields(a, b, node["field_order"]))
    )


def test_the_port_orders_langflow_components_as_langflow_does() -> None:
    # Langflow's own components have lowercase names: the canvas follows their field_order
    from lfx.components.input_output import chat

    node, _ = create_component_template({"code": inspect.getsource(chat), "output_types": []})
    assert canvas_order(node) == [
        n for n in node["field_order"] if n in node["template"] and n != "code"
    ]
    # camelCase names listed once, as lfx lists them, fall back to alphabetical on the canvas
    names = [f.name for f in sorted(memory_node("builtin").fields, key=lambda f: f.order)]
    plain = {"template": TEMPLATES["chatMemory"]["template"], "field_order": names}
    camel = [n for n in canvas_order(plain) if n != n.lower()]
    assert camel[:3] == ["compactAtRatio", "compactionStrategy", "compactToRatio"]


@pytest.mark.parametrize("component, storage", sorted(MEMORY_COMPONENTS.items()))
def test_memory_fields_stand_in_the_order_a_user_fills_them_in(
    component: str, storage: str
) -> None:
    definition = memory_node(storage)
    expected = [f.name for f in sorted(definition.fields, key=lambda f: f.order)]
    assert canvas_order(TEMPLATES[component]) == expected
    assert expected[:6] == [
        "conversationId",
        "userId",
        "app",
        "compactionStrategy",
        "maxEvents",
        "maxTurns",
    ]
    # lfx's own lookups (exact names) see the same order
    assert [
        n for n in TEMPLATES[component]["field_order"] if n in TEMPLATES[component]["template"]
    ] == expected


def test_memory_tool_fields_stand_in_the_order_a_user_fills_them_in() -> None:
    node = TEMPLATES["autoMemoryTool"]
    order = canvas_order(node)
    assert order[:4] == ["memoryOwner", "namespace", "chat_memory", "storage"]
    connection = [
        f.name for f in sorted(auto_memory_tool_node().fields, key=lambda f: f.order) if f.show_if
    ]
    assert [n for n in order if n in connection] == connection
