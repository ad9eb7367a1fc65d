"""From a Chat Memory node's parameters to the library: a validated :class:`MemoryConfig`
(built by the same code as in Python, so the messages are the same) and the store it names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends import open_store
from ..backends.base import Store
from ..config import FIELD_LABELS, MemoryConfig
from ..engine import ChatMemory
from ..errors import ConfigurationError, InvalidInputError
from ..lifecycle import Scope
from ..strategies import strategy_class
from .definitions import MEMORY, NodeDefinition, is_expression, store_node
from .fields import APP, MAX_MESSAGES_V1, SCOPE_FIELDS, USER_ID, memory_fields


def memory_field_names() -> frozenset[str]:
    """The node fields MemoryConfig validates: its settings and those the registered
    strategies declare (so computed when asked: a strategy plugin may load later)."""
    return frozenset(f.name for f in memory_fields()) - {"summarizerModel"}


@dataclass(frozen=True)
class MemoryNodeSettings:
    """What a Chat Memory node configures: the conversation, whose it is (``user_id`` and
    ``app``: None for a node that binds no user), the memory config, the summarizer model and
    the storage connection."""

    definition: NodeDefinition
    conversation_id: str | None
    config: MemoryConfig
    summarizer_model: str | None = None
    connection: dict[str, Any] = field(default_factory=dict)
    user_id: str | None = None
    app: str | None = None

    @property
    def scope(self) -> Scope | None:
        """The scope the node binds its memory to (None: the unscoped conversations)."""
        return None if self.user_id is None else Scope(self.user_id, self.app)

    def bind(self, memory: ChatMemory) -> ChatMemory:
        """``memory`` bound to this node's user (``memory.for_user``), or as it is without one:
        the memory a run of this node reads and writes."""
        scope = self.scope
        return memory if scope is None else memory.for_user(scope.user, scope.app)

    @property
    def summarizes(self) -> bool:
        """Whether the configured strategy needs the summarizer model."""
        return strategy_class(self.config.compaction_strategy).summarizes

    def store_target(self) -> tuple[str | None, dict[str, Any]]:
        """The URL and options :func:`open_store` takes for this node (URL None: the built-in store)."""
        if self.definition.storage is None:
            raise ConfigurationError(f"{self.definition.type} names no storage")
        _, store_class = store_node(self.definition.storage)
        if store_class is None:
            return None, {}
        return store_class.node_target(self.connection)

    def open_store(self) -> Store:
        """Open the store this node names."""
        url, options = self.store_target()
        return open_store(url, **options)


def memory_settings(
    definition: NodeDefinition, parameters: Mapping[str, Any], summarizer_model: str | None = None
) -> MemoryNodeSettings:
    """Validate a memory node's parameters. Literal values are checked now; values that are
    still ``${…}`` expressions are left out (their defaults stand in) until resolved.
    ``summarizer_model`` is the model of an attached summarizer sub-node, if any.

    Raises :class:`ConfigurationError` naming the field by its canvas label and the value."""
    if definition.kind != MEMORY:
        raise ConfigurationError(f"{definition.type} is not a Chat Memory node")
    memory_names = memory_field_names()
    # MemoryConfig checks these (the v1 message count included), not the generic field check
    config_names = memory_names | {MAX_MESSAGES_V1.name}
    values = definition.check_parameters(parameters, skip=config_names)
    literal = {k: v for k, v in values.items() if not is_expression(v)}
    if definition.version == 1:
        config = _config_v1(literal)
    else:
        config = MemoryConfig.from_mapping(
            {k: v for k, v in literal.items() if _passed(definition, k, values, memory_names)}
        )
    model = summarizer_model or literal.get("summarizerModel")
    strategy = strategy_class(config.compaction_strategy)
    if strategy.summarizes and not model:
        raise ConfigurationError(
            f"Summarizer model ({model!r}) must be configured for {strategy.label.lower()}: attach a model "
            "sub-node to the summarizerModel slot or fill in the Summarizer model field"
        )
    scope_names = {f.name for f in SCOPE_FIELDS}
    connection_names = (
        {f.name for f in definition.fields}
        - config_names
        - scope_names
        - {"conversationId", "summarizerModel"}
    )
    conversation_id = values.get("conversationId")
    user_id, app = _scope_values(literal)
    return MemoryNodeSettings(
        definition,
        None if is_expression(conversation_id) else conversation_id,
        config,
        model,
        {k: v for k, v in values.items() if k in connection_names},
        user_id,
        app,
    )


def _scope_values(literal: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(user id, app) of the node's literal values: blank is None (no user: the unscoped
    conversations; no app). An App without a User ID, and a value no scope takes (too long,
    NUL), are refused naming the field by its label."""
    user_id, app = (_blank_is_none(literal.get(spec.name), spec.label) for spec in SCOPE_FIELDS)
    if app is not None and user_id is None:
        raise ConfigurationError(
            f"{APP.label} ({app!r}) needs a {USER_ID.label}: an app scopes a user's conversations"
        )
    if user_id is not None:
        try:
            Scope(user_id, app)
        except InvalidInputError as exc:
            # the scope's message names its part (user, app); the canvas names the field
            label = USER_ID.label if str(exc).startswith("user") else APP.label
            raise ConfigurationError(f"{label}: {exc}") from None
    return user_id, app


def _blank_is_none(value: Any, label: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(f"{label} ({value!r}) must be text")
    return value.strip() or None


def _passed(
    definition: NodeDefinition, name: str, values: Mapping[str, Any], memory_names: frozenset[str]
) -> bool:
    """Whether a node field's value goes to MemoryConfig: every MemoryConfig setting (one the
    strategy ignores is warned about there), a strategy's own setting only while the canvas
    shows it (so that another strategy's defaults do not ride along)."""
    if name in _CONFIG_ALIASES:
        return True
    spec = definition.field(name)
    return spec is not None and name in memory_names and spec.is_shown(values)


_CONFIG_ALIASES = frozenset(f.alias or n for n, f in MemoryConfig.model_fields.items())


def _config_v1(values: Mapping[str, Any]) -> MemoryConfig:
    """Version 1 was a plain message-count window: a sliding window over ``maxMessages``."""
    try:
        return MemoryConfig(
            compaction_strategy="sliding_window", max_events=values.get(MAX_MESSAGES_V1.name, 20)
        )
    except ConfigurationError as exc:
        # Same validation code; the message names the field as the v1 canvas labels it.
        raise ConfigurationError(
            str(exc).replace(FIELD_LABELS["max_events"], MAX_MESSAGES_V1.label)
        ) from None
