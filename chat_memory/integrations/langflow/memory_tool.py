"""The Auto Memory Tool in Langflow: long-term memory (Anthropic's ``memory`` tool over
/memories) as a Tool for an agent, generated from the ``autoMemoryTool/v1`` node definition
like the Chat Memory components are from theirs.

Whose memory it is comes from **Whose memory**: the **User ID** field (the same user finds
their notes again in every session; type it, wire a text to it, or pick a global variable)
or Langflow's session id (notes last as long as the session id). The notes live in the wired
Chat Memory component's store (Storage ``chatMemory``, the template's choice) or in another
storage with its connection fields."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool
from lfx.custom.custom_component.component import Component
from lfx.io import DropdownInput, HandleInput, MessageTextInput, Output

from ...backends.base import Store
from ...components import (
    SAME_AS_CHAT_MEMORY,
    FieldSpec,
    auto_memory_tool_node,
    memory_tool_store_target,
)
from ...components.definitions import NodeDefinition
from ...errors import ConfigurationError
from ...lifecycle import Scope
from ...lifecycle.scoped import ScopedStore
from ...longterm import MemoryLimits, MemoryTool, long_term_memory
from ..langchain import ChatMemoryHistory
from ..langchain.tools import as_langchain_tool
from .base import shared_store
from .fields import (
    SECRET_FIELDS,
    applicable,
    canvas_field_order,
    controlling_fields,
    field_value,
    input_for,
    show_for_form,
    shown,
)

#: The choices of Whose memory: the User ID field, or the run's Langflow session id.
USER_ID, SESSION_ID = "User ID", "Session ID"
OWNER = "memoryOwner"
NAMESPACE = "namespace"
CHAT_MEMORY = "chat_memory"


class ExampleMemoryTool(MemoryTool):
    """The memory tool with the example a refusal of malformed arguments shows (what
    :func:`as_langchain_tool` screens input with)."""

    example = '{"command": "view", "path": "/memories"}'


def _connection_secret(spec: FieldSpec) -> bool:
    # connection fields are named storage + field (redisUrl, s3EndpointUrl): secret like the field
    return (
        any(spec.name.lower().endswith(name.lower()) for name in SECRET_FIELDS)
        and spec.show_if is not None
    )


def memory_tool_inputs() -> list[Any]:
    """The Langflow inputs of the Auto Memory Tool, in the order a user fills them in: whose
    memory, the user id, where the notes live (with that storage's connection fields), limits."""
    definition = auto_memory_tool_node()
    refresh = controlling_fields(definition)
    visible = shown(definition, {})
    namespace = definition.field(NAMESPACE)
    assert namespace is not None  # declared by auto_memory_tool_node
    inputs: list[Any] = [
        DropdownInput(
            name=OWNER,
            display_name="Whose memory",
            info=f"{USER_ID}: the User ID field below, so a user finds their notes again in every session. "
            f"{SESSION_ID}: Langflow's session id of the run (lfx run --session-id, the API's session_id), "
            "so the notes last as long as the session id does.",
            options=[USER_ID, SESSION_ID],
            value=USER_ID,
            real_time_refresh=True,
        ),
        MessageTextInput(
            name=NAMESPACE,
            display_name="User ID",
            info=f"{namespace.description} Type it, wire a text to it, or pick a global variable.",
            value="",
            dynamic=True,
            override_skip=True,
        ),
        HandleInput(
            name=CHAT_MEMORY,
            display_name="Chat Memory",
            info="Storage chatMemory keeps the notes in this Chat Memory component's store: wire its Memory output.",
            input_types=["Memory"],
            required=False,
        ),
    ]
    for spec in sorted(definition.fields, key=lambda f: f.order):
        if spec.name != NAMESPACE:
            inputs.append(
                input_for(
                    spec, spec.name in refresh, visible[spec.name], secret=_connection_secret(spec)
                )
            )
    return inputs


class MemoryToolComponent(Component):
    """The Auto Memory Tool: the ``memory`` tool over one namespace of long-term memory."""

    icon = "brain"

    @classmethod
    def definition(cls) -> NodeDefinition:
        """Our node definition this component is generated from."""
        return auto_memory_tool_node()

    def _get_field_order(self) -> list[str]:
        return canvas_field_order(super()._get_field_order())

    def owner_namespace(self) -> str:
        """Whose memory: the User ID field, or the run's session id (refused when blank)."""
        owner = getattr(self, OWNER, None) or USER_ID
        if owner not in (USER_ID, SESSION_ID):
            raise ConfigurationError(
                f"Whose memory ({owner!r}) must be {USER_ID!r} or {SESSION_ID!r}"
            )
        if owner == SESSION_ID:
            session = getattr(getattr(self, "graph", None), "session_id", None)
            if not session:
                raise ConfigurationError(
                    f"Whose memory ({SESSION_ID!r}) needs a run with a session id"
                )
            return str(session)
        spec = self.definition().field(NAMESPACE)
        assert spec is not None
        value = field_value(spec, getattr(self, NAMESPACE, None))
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(
                f"User ID ({value!r}) is blank: type the user's id, wire a text or a global variable to it, "
                f"or set Whose memory to {SESSION_ID!r}"
            )
        return value.strip()

    def parameters(self) -> dict[str, Any]:
        """The node's checked parameters (defaults filled in; fields the storage does not use
        left out, whatever their stored ``show`` flag)."""
        definition = self.definition()
        params: dict[str, Any] = {NAMESPACE: self.owner_namespace()}
        for spec in definition.fields:
            if spec.name != NAMESPACE:
                value = field_value(spec, getattr(self, spec.name, None))
                if value is not None and value != "":
                    params[spec.name] = value
        return definition.check_parameters(applicable(definition, params))

    def store(self, params: dict[str, Any]) -> Store:
        """Where the notes live: the wired Chat Memory's store, or the chosen storage's."""
        return self._store_and_scope(params)[0]

    def _store_and_scope(self, params: dict[str, Any]) -> tuple[Store, Scope | None]:
        """The store, and the scope of the wired Chat Memory when it is bound to a user (its
        User ID): the user's notes are then kept in that scope, so that forgetting the user
        erases them (docs/lifecycle.md, "Erasure")."""
        storage, url, options = memory_tool_store_target(params)
        history = getattr(self, CHAT_MEMORY, None)
        scope = history.memory.scope if isinstance(history, ChatMemoryHistory) else None
        if storage != SAME_AS_CHAT_MEMORY:
            return shared_store(url, options), scope
        history = getattr(self, CHAT_MEMORY, None)
        if not isinstance(history, ChatMemoryHistory):
            got = "nothing wired" if history in (None, "") else type(history).__name__
            raise ConfigurationError(
                f"Chat Memory ({got}) must be a Chat Memory component's Memory output: "
                f"Storage {SAME_AS_CHAT_MEMORY!r} keeps the notes in its store (or choose another Storage)"
            )
        store = history.memory.store
        if isinstance(store, ScopedStore):  # a memory bound to a user: the notes go in its scope
            store = store.store
        if not isinstance(store, Store):
            raise ConfigurationError(
                f"Chat Memory's store ({type(store).__name__}) must be a sync store: Storage "
                f"{SAME_AS_CHAT_MEMORY!r} keeps the notes in it (or choose another Storage)"
            )
        return store, scope

    def build_tool(self) -> StructuredTool:
        """The ``memory`` tool over this namespace, as a Tool for an agent's Tools."""
        params = self.parameters()
        limits = MemoryLimits(max_file_bytes=params["maxFileBytes"], max_files=params["maxFiles"])
        store, scope = self._store_and_scope(params)
        files = long_term_memory(
            store,
            params[NAMESPACE],
            user=scope.user if scope else None,
            app=scope.app if scope else None,
            limits=limits,
        )
        return as_langchain_tool(ExampleMemoryTool(files))

    def update_build_config(
        self, build_config: Any, field_value: Any, field_name: str | None = None
    ) -> Any:
        """Show the User ID for Whose memory = User ID, and only the chosen storage's fields."""
        show_for_form(self.definition(), build_config, field_value, field_name, keep=(NAMESPACE,))
        owner = field_value if field_name == OWNER else build_config.get(OWNER, {}).get("value")
        if NAMESPACE in build_config:
            build_config[NAMESPACE]["show"] = owner != SESSION_ID
        return build_config


MEMORY_TOOL_OUTPUTS = [
    Output(display_name="Tool", name="tool", method="build_tool", types=["Tool"])
]

__all__ = [
    "MEMORY_TOOL_OUTPUTS",
    "SESSION_ID",
    "USER_ID",
    "MemoryToolComponent",
    "memory_tool_inputs",
]
