"""Node fields: one JSON Schema property plus its canvas hints (``x-ui``), and the field sets
the Chat Memory nodes share. Memory fields are derived from :class:`MemoryConfig` (defaults,
enums) and :data:`FIELD_LABELS` (labels), so the canvas and the library cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..backends import ConnectionField, StoreNode
from ..config import FIELD_LABELS, MemoryConfig, SummaryPlacement
from ..errors import ConfigurationError
from ..strategies import strategy_class, strategy_names

#: ``showIf`` maps another field's name to the values that show this field: keys AND, values OR.
ShowIf = Mapping[str, list[Any]]

_POSITIVE_INT: dict[str, Any] = {"type": "integer", "minimum": 1}


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


def _default(name: str) -> Any:
    value = MemoryConfig.model_fields[name].default
    return value.value if isinstance(value, Enum) else value


def _memory_field(
    name: str, schema: dict[str, Any], description: str, order: int, **hints: Any
) -> FieldSpec:
    alias = MemoryConfig.model_fields[name].alias or name
    default = _default(name)
    if default is not None:
        schema = {**schema, "default": default}
    return FieldSpec(alias, schema, FIELD_LABELS[name], description, order, **hints)


CONVERSATION_ID = FieldSpec(
    "conversationId",
    {"type": "string", "minLength": 1},
    "Conversation ID",
    "Which conversation to remember, usually an expression such as ${chat_1.conversationId}.",
    order=0,
    required=True,
    placeholder="${chat_1.conversationId}",
)

#: The memory fields of the version-2 nodes, in canvas order: (config field, JSON Schema,
#: description, advanced). Which strategies show a field comes from the strategies' own
#: declarations (:func:`shown_for`), so a new strategy needs no edit here.
_MEMORY_FIELD_TEXTS: tuple[tuple[str, dict[str, Any], str, bool], ...] = (
    (
        "compaction_strategy",
        {"type": "string"},
        "How the window the model sees is kept bounded; compacted turns are archived, never deleted.",
        False,
    ),
    (
        "max_events",
        _POSITIVE_INT,
        "Most real events (messages, tool calls, tool results) kept in view before compaction.",
        False,
    ),
    (
        "max_turns",
        _POSITIVE_INT,
        "Most turns (a user message and everything after it) kept in view.",
        False,
    ),
    (
        "max_tokens",
        _POSITIVE_INT,
        "Most estimated tokens in view (pinned instructions and summary included).",
        False,
    ),
    (
        "max_events_to_keep",
        _POSITIVE_INT,
        "Newest events kept in view when older ones are summarised.",
        False,
    ),
    (
        "overlap_size",
        {"type": "integer", "minimum": 0},
        "Kept events the summarizer also sees as upcoming context (not summarised).",
        False,
    ),
    (
        "compact_to_ratio",
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "What a compaction leaves, as a fraction of the limit (0.5: compact to half). Below 1 the oldest "
        "messages stay unchanged for several turns, so the provider's prompt cache serves them cheaply; "
        "1 compacts just below the limit on every turn.",
        False,
    ),
    (
        "summary_placement",
        {"type": "string", "enum": [p.value for p in SummaryPlacement]},
        "Where the model sees the summary: as a leading user message or in the system prompt.",
        True,
    ),
    (
        "enable_conversation_search_tool",
        {"type": "boolean"},
        "Give the agent the conversation_search tool over the whole history, archive included.",
        False,
    ),
    ("search_page_size", _POSITIVE_INT, "Results per page of conversation_search.", True),
    (
        "max_archived_events",
        {"type": ["integer", "null"], "minimum": 1},
        "Oldest archived events beyond this many are dropped; empty means the storage's default.",
        True,
    ),
    (
        "compress_tool_results",
        {"type": "boolean"},
        "Show large tool results the model has already read as a short preview once the window fills up; "
        "the full text stays stored and the agent gets fetch_tool_result to read it again.",
        False,
    ),
    (
        "min_tool_result_compress_tokens",
        _POSITIVE_INT,
        "Tool results smaller than this many tokens are never shortened.",
        True,
    ),
    (
        "keep_recent_tool_results",
        {"type": "integer", "minimum": 0},
        "Newest tool results always shown in full.",
        True,
    ),
    (
        "context_window_tokens",
        _POSITIVE_INT,
        "The model's context window in tokens; no single event may be larger.",
        False,
    ),
    (
        "compact_at_ratio",
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "Compact when the window reaches this share of the context window (0.8: at 80%).",
        False,
    ),
    (
        "summarizer_failures_before_fallback",
        _POSITIVE_INT,
        "After this many failed summaries in a row, compaction archives without a new summary (the window "
        "stays bounded; the archived turns stay searchable).",
        True,
    ),
    (
        "max_tool_result_tokens",
        {"type": ["integer", "null"], "minimum": 1},
        "Tool results longer than this are cut when stored, with a visible note; empty keeps them whole.",
        True,
    ),
)
#: Memory fields every strategy shows, and those that follow another field instead.
_ALWAYS_SHOWN = frozenset(
    {
        "compaction_strategy",
        "enable_conversation_search_tool",
        "compress_tool_results",
        "max_tool_result_tokens",
    }
)
_SHOWN_BY_FIELD: dict[str, ShowIf] = {
    "search_page_size": {"enableConversationSearchTool": [True]},
    "min_tool_result_compress_tokens": {"compressToolResults": [True]},
    "keep_recent_tool_results": {"compressToolResults": [True]},
}


def shown_for(config_field: str) -> list[str]:
    """The strategies for which the canvas shows a config field: those listing it in their
    ``settings``, every compacting one for the archive cap, every summarizing one for the
    summarizer's fallback."""
    implied = {
        "max_archived_events": "compacts",
        "summarizer_failures_before_fallback": "summarizes",
    }
    shown = []
    for name in strategy_names():
        strategy = strategy_class(name)
        if config_field in strategy.settings or getattr(
            strategy, implied.get(config_field, ""), False
        ):
            shown.append(name)
    return shown


def summarizing_strategies() -> list[str]:
    """The strategies that need a summarizer model."""
    return [name for name in strategy_names() if strategy_class(name).summarizes]


def memory_fields() -> tuple[FieldSpec, ...]:
    """The memory fields of every version-2 Chat Memory node, in canvas order (the summarizer
    model field among them), built from the registered strategies."""
    fields: list[FieldSpec] = []
    for name, schema, description, advanced in _MEMORY_FIELD_TEXTS:
        order = len(fields) + 1
        hints: dict[str, Any] = {"advanced": advanced}
        if name == "compaction_strategy":
            names = strategy_names()
            schema = {**schema, "enum": names}
            hints["extra_ui"] = {"options": {n: strategy_class(n).label for n in names}}
        elif name in _SHOWN_BY_FIELD:
            hints["show_if"] = _SHOWN_BY_FIELD[name]
        elif name not in _ALWAYS_SHOWN:
            hints["show_if"] = {"compactionStrategy": shown_for(name)}
        fields.append(_memory_field(name, schema, description, order, **hints))
        if name == "summary_placement":
            fields.append(summarizer_model_field(order + 1))
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


#: Where connection fields start in canvas order: after the memory fields.
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


def connection_fields(node: StoreNode) -> tuple[FieldSpec, ...]:
    """The connection fields of a store's node, in canvas order after the memory fields."""
    return tuple(connection_field(f, CONNECTION_ORDER + i) for i, f in enumerate(node.fields))
