"""Node fields: one JSON Schema property plus its canvas hints (``x-ui``), and the field sets
the Chat Memory nodes share. Memory fields are derived from the settings' own descriptions
(the ``Field`` metadata of :class:`MemoryConfig` and of each strategy's ``extra_settings``:
label, help text, default, enum, bounds, canvas hints), so the canvas and the library cannot
drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic.fields import FieldInfo

from ..backends import ConnectionField, StoreNode
from ..config import MemoryConfig
from ..errors import ConfigurationError
from ..settings_model import (
    bounds_of,
    enum_values,
    label_of,
    number_kind,
    plain_default,
    ui_hints,
)
from ..strategies import Strategy, strategy_classes

#: ``showIf`` maps another field's name to the values that show this field: keys AND, values OR.
ShowIf = Mapping[str, list[Any]]


@dataclass(frozen=True)
class FieldSpec:
    """One field of a node: its JSON Schema (type, default, enum, bounds) and its UI hints."""

    name: str
    schema: dict[str, Any]
    label: str
    description: str
    order: int
    advanced: bool = False
    show_if: ShowIf | None = None
    required: bool = False
    placeholder: str | None = None
    extra_ui: dict[str, Any] = field(default_factory=dict)

    def property_schema(self) -> dict[str, Any]:
        """The JSON Schema 2020-12 property, with the UI hints under ``x-ui``."""
        ui: dict[str, Any] = {
            "label": self.label,
            "description": self.description,
            "order": self.order,
        }
        if self.advanced:
            ui["advanced"] = True
        if self.show_if:
            ui["showIf"] = {key: list(values) for key, values in self.show_if.items()}
        if self.placeholder:
            ui["placeholder"] = self.placeholder
        ui.update(self.extra_ui)
        return {**self.schema, "title": self.label, "description": self.description, "x-ui": ui}

    def is_shown(self, parameters: Mapping[str, Any]) -> bool:
        """Whether the canvas shows this field for these parameter values (defaults filled in)."""
        if not self.show_if:
            return True
        return all(parameters.get(key) in values for key, values in self.show_if.items())

    def check(self, value: Any) -> Any:
        """Check a literal value against the field's type; raises :class:`ConfigurationError`
        naming the label and the value. (Memory fields are checked by MemoryConfig instead.)"""
        types = self.schema.get("type", [])
        types = [types] if isinstance(types, str) else list(types)
        if value is None and "null" in types:
            return None
        if "enum" in self.schema and value not in self.schema["enum"]:
            raise ConfigurationError(
                f"{self.label} ({value!r}) must be one of {', '.join(map(repr, self.schema['enum']))}"
            )
        if "integer" in types:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(f"{self.label} ({value!r}) must be a whole number")
            if value < self.schema.get("minimum", value):
                raise ConfigurationError(
                    f"{self.label} ({value}) must be at least {self.schema['minimum']}"
                )
            if value > self.schema.get("maximum", value):
                raise ConfigurationError(
                    f"{self.label} ({value}) must be at most {self.schema['maximum']}"
                )
        elif "boolean" in types and not isinstance(value, bool):
            raise ConfigurationError(f"{self.label} ({value!r}) must be true or false")
        elif "string" in types:
            if not isinstance(value, str):
                raise ConfigurationError(f"{self.label} ({value!r}) must be text")
            if len(value.strip()) < self.schema.get("minLength", 0):
                raise ConfigurationError(f"{self.label} ({value!r}) must not be blank")
        return value


CONVERSATION_ID = FieldSpec(
    "conversationId",
    {"type": "string", "minLength": 1},
    "Conversation ID",
    "Which conversation to remember, usually an expression such as ${chat_1.conversationId}.",
    order=0,
    required=True,
    placeholder="${chat_1.conversationId}",
)

#: Whose conversation it is (docs/lifecycle.md, "Scope"): the version-2 nodes bind their memory
#: to this user (``memory.for_user``), so two users of one flow never share a conversation id.
USER_ID = FieldSpec(
    "userId",
    {"type": ["string", "null"]},
    "User ID",
    "Whose conversations these are, usually an expression such as ${chat_1.userId}: each user has "
    "their own conversations, even under the same Conversation ID (and forgetting the user erases "
    "them). Empty: the conversation ids are shared by everyone using this flow.",
    order=1,
    placeholder="${chat_1.userId}",
)

#: The app part of the scope: the same user in two apps has two separate sets of conversations.
APP = FieldSpec(
    "app",
    {"type": ["string", "null"]},
    "App",
    "Which app the user's conversations belong to (with a User ID): the same user id in two apps "
    "names two separate sets of conversations. Empty: no app.",
    order=2,
    advanced=True,
)

#: The scope fields stand right after Conversation ID; the memory settings follow them.
SCOPE_FIELDS = (USER_ID, APP)

#: The strategies' own settings (their ``extra_settings``) stand after this MemoryConfig
#: setting, the last of the strategies' limits, so that a strategy's fields follow its choice.
STRATEGY_SETTINGS_AFTER = "compact_to_ratio"


def summarizing_strategies() -> list[str]:
    """The strategies that need a summarizer model."""
    return [strategy.name for strategy in strategy_classes() if strategy.summarizes]


def shown_for(config_field: str) -> list[str]:
    """The strategies for which the canvas shows a setting shown by strategy: those that read
    it (:meth:`Strategy.reads`), or every compacting one / every summarizing one when its
    ``Field`` says ``shown_for="compacting"`` / ``"summarizing"``."""
    field_info = MemoryConfig.model_fields.get(config_field)
    rule = ui_hints(field_info).get("shownFor", "readers") if field_info else "readers"
    return [s.name for s in strategy_classes() if _shows(s, config_field, rule)]


def _shows(strategy: type[Strategy], setting: str, rule: str) -> bool:
    if rule == "compacting":
        return strategy.compacts
    if rule == "summarizing":
        return strategy.summarizes
    return strategy.reads(setting)


def setting_schema(field_info: FieldInfo) -> dict[str, Any]:
    """The JSON Schema of a setting from its ``Field``: type, enum, bounds (an integer's
    ``gt=0`` is ``minimum: 1``) and default."""
    kind, nullable = number_kind(field_info)
    values = enum_values(field_info)
    if kind is not None:
        base = "integer" if kind is int else "number"
    elif values is not None or field_info.annotation is str:
        base = "string"
    elif field_info.annotation is bool:
        base = "boolean"
    else:
        raise ConfigurationError(
            f"a setting of type {field_info.annotation!r} has no canvas field (use int, float, "
            "bool, str or an Enum)"
        )
    schema: dict[str, Any] = {"type": [base, "null"] if nullable else base}
    if values is not None:
        schema["enum"] = values
    for kind_, bound in bounds_of(field_info).items():
        if kind is int and kind_ in ("gt", "lt"):
            # whole numbers: greater than 0 is at least 1
            schema["minimum" if kind_ == "gt" else "maximum"] = int(bound) + (
                1 if kind_ == "gt" else -1
            )
        else:
            key = {
                "gt": "exclusiveMinimum",
                "ge": "minimum",
                "lt": "exclusiveMaximum",
                "le": "maximum",
            }[kind_]
            schema[key] = bound
    default = plain_default(field_info)
    if default is not None:
        schema["default"] = default
    return schema


def setting_field(
    name: str, field_info: FieldInfo, order: int, readers: list[str] | None = None
) -> FieldSpec:
    """The canvas field of one setting, from its ``Field``. ``readers`` are the strategies
    that show it (computed from the setting's rule when None)."""
    hints = ui_hints(field_info)
    schema = setting_schema(field_info)
    extra_ui: dict[str, Any] = {}
    show_if: ShowIf | None = hints.get("showIf")
    if name == "compaction_strategy":
        strategies = strategy_classes()
        schema = {"type": "string", "enum": [s.name for s in strategies], **schema}
        extra_ui["options"] = {s.name: s.label for s in strategies}
    elif show_if is None and hints.get("shownFor") != "every strategy":
        show_if = {"compactionStrategy": readers if readers is not None else shown_for(name)}
    return FieldSpec(
        field_info.alias or name,
        schema,
        label_of(name, field_info),
        field_info.description or label_of(name, field_info),
        order,
        advanced=bool(hints.get("advanced", False)),
        show_if=show_if,
        extra_ui=extra_ui,
    )


def strategy_setting_fields(first_order: int) -> list[FieldSpec]:
    """The canvas fields of the settings strategies declare, each shown for the strategies
    that read it, from ``first_order`` on."""
    strategies = strategy_classes()
    fields: list[FieldSpec] = []
    for strategy in strategies:
        model = strategy.extra_settings
        if model is None:
            continue
        for name, field_info in model.model_fields.items():
            readers = [s.name for s in strategies if s.reads(name)]
            fields.append(setting_field(name, field_info, first_order + len(fields), readers))
    return fields


def memory_fields() -> tuple[FieldSpec, ...]:
    """The memory fields of every version-2 Chat Memory node, in canvas order: MemoryConfig's
    settings in declaration order, the strategies' own settings after
    :data:`STRATEGY_SETTINGS_AFTER`, and the summarizer model after the summary placement."""
    fields: list[FieldSpec] = []
    first = len(SCOPE_FIELDS) + 1  # after Conversation ID and the scope fields
    for name, field_info in MemoryConfig.model_fields.items():
        fields.append(setting_field(name, field_info, len(fields) + first))
        if name == STRATEGY_SETTINGS_AFTER:
            fields.extend(strategy_setting_fields(len(fields) + first))
        if name == "summary_placement":
            fields.append(summarizer_model_field(len(fields) + first))
    return tuple(fields)


def summarizer_model_field(order: int) -> FieldSpec:
    """The field naming the summarizer model, shown for the strategies that summarise."""
    return FieldSpec(
        "summarizerModel",
        {"type": ["string", "null"]},
        "Summarizer model",
        "The (smaller) model that writes summaries; or attach a model sub-node to the summarizerModel slot.",
        order=order,
        show_if={"compactionStrategy": summarizing_strategies()},
        placeholder="claude-haiku-5-5",
    )


#: The only setting of the version-1 nodes: a plain message-count window.
MAX_MESSAGES_V1 = FieldSpec(
    "maxMessages",
    {"type": "integer", "minimum": 1, "default": 20},
    "Max messages",
    "Most messages kept in view; older ones are archived.",
    order=1,
)


#: Where connection fields start in canvas order: after the memory fields (later when
#: strategies' own settings make those more).
CONNECTION_ORDER = 20


def connection_field(declared: ConnectionField, order: int) -> FieldSpec:
    """A store's declared connection setting as a node field."""
    types: Any = "integer" if declared.kind == "integer" else "string"
    schema: dict[str, Any] = {"type": [types, "null"] if declared.nullable else types}
    if declared.default is not None:
        schema["default"] = declared.default
    if declared.minimum is not None:
        schema["minimum"] = declared.minimum
    min_length = (
        declared.min_length
        if declared.min_length is not None
        else (1 if declared.required else None)
    )
    if min_length is not None:
        schema["minLength"] = min_length
    return FieldSpec(
        declared.name,
        schema,
        declared.label,
        declared.description,
        order,
        advanced=declared.advanced,
        required=declared.required,
        placeholder=declared.placeholder,
    )


def connection_fields(node: StoreNode, start: int = CONNECTION_ORDER) -> tuple[FieldSpec, ...]:
    """The connection fields of a store's node, in canvas order from ``start`` (after the
    memory fields)."""
    start = max(start, CONNECTION_ORDER)
    return tuple(connection_field(f, start + i) for i, f in enumerate(node.fields))
