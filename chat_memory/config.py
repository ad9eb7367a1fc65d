"""MemoryConfig: the settings of a ChatMemory (and of every Chat Memory node), validated
when built so that a bad value never surfaces mid-run.

Each setting is described once, by its pydantic ``Field``: ``title`` is the label the canvas
shows and the error messages use, ``description`` the canvas help text, ``gt``/``ge``/``le``
the bounds (checked by :class:`~chat_memory.settings_model.SettingsModel` with a message
naming the label and the value) and ``json_schema_extra=ui(...)`` the canvas hints; the
declaration order is the canvas order. The Chat Memory node fields
(:mod:`chat_memory.components.fields`) are derived from these. A strategy adds settings of its
own through :attr:`Strategy.extra_settings <chat_memory.strategies.Strategy.extra_settings>`."""

from __future__ import annotations

import os
import sys
import warnings
from enum import Enum
from functools import cache
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

# not `from pydantic import`: the top-level name is newer than the pydantic>=2.7 we support
from pydantic.functional_validators import ModelWrapValidatorHandler

from .errors import ConfigurationError
from .settings_model import (
    SettingRefusal,
    SettingsModel,
    describe_validation_error,
    label_of,
    read_by_engine,
    setting_name,
    ui,
)
from .strategies import Strategy, strategy_class, strategy_names
from .strategies.registry import declaring_strategy


class SummaryPlacement(str, Enum):
    """Where the summary is rendered for the model."""

    USER_MESSAGE = "user_message"
    SYSTEM_PROMPT = "system_prompt"


class MemoryConfig(SettingsModel):
    """Settings of a :class:`~chat_memory.ChatMemory`.

    Field names are snake_case; the camelCase names of the canvas nodes
    (``compactionStrategy``, ``maxTurns``…) are accepted too, and so are the settings the
    chosen strategy declares (its ``extra_settings``), held like the others
    (``config.keep_turns``; all of them in ``config.model_extra``). A bad value raises
    :class:`~chat_memory.ConfigurationError` naming the field and the value.
    """

    # extra settings are allowed only as the strategies declare them (checked below); they
    # live in pydantic's extras so that equality, repr, model_dump and attribute access see them
    model_config = ConfigDict(extra="allow")

    #: the name of a registered strategy (:mod:`chat_memory.strategies`)
    compaction_strategy: str = Field(
        "none",
        title="Compaction strategy",
        description="How the window the model sees is kept bounded; compacted turns are archived, never deleted.",
        json_schema_extra=ui(shown_for="every strategy"),
    )
    max_events: int = Field(
        20,
        title="Max events",
        description="Most real events (messages, tool calls, tool results) kept in view before compaction.",
        gt=0,
    )
    max_turns: int = Field(
        10,
        title="Max turns",
        description="Most turns (a user message and everything after it) kept in view.",
        gt=0,
    )
    max_tokens: int = Field(
        4000,
        title="Max tokens",
        description="Most estimated tokens in view (pinned instructions and summary included).",
        gt=0,
    )
    max_events_to_keep: int = Field(
        10,
        title="Max events to keep",
        description="Newest events kept in view when older ones are summarised.",
        gt=0,
    )
    overlap_size: int = Field(
        2,
        title="Overlap size",
        description="Kept events the summarizer also sees as upcoming context (not summarised).",
        ge=0,
    )
    #: below 1 the window then grows for several turns with an unchanged prefix, which a prompt
    #: cache serves at a tenth of the price; 0.5 measured cheapest for its context
    #: (docs/prompt-caching.md). Never fewer than the newest 2 turns when the limit itself
    #: allows them (a turn window of 3 keeps 2 turns, not 1; docs/lean-window.md, "Small windows")
    compact_to_ratio: float = Field(
        0.5,
        title="Compact to ratio",
        description="What a compaction leaves, as a fraction of the limit (0.5: compact to half). Below 1 the oldest "
        "messages stay unchanged for several turns, so the provider's prompt cache serves them cheaply; "
        "1 compacts just below the limit on every turn.",
        gt=0,
        le=1,
    )
    summary_placement: SummaryPlacement = Field(
        SummaryPlacement.USER_MESSAGE,
        title="Summary placement",
        description="Where the model sees the summary: as a leading user message or in the system prompt.",
        # a forced compaction (context overflow) writes a summary whatever the strategy
        json_schema_extra=ui(advanced=True, read_by_engine=True),
    )
    enable_conversation_search_tool: bool = Field(
        False,
        title="Enable conversation search tool",
        description="Give the agent the conversation_search tool over the whole history, archive included.",
        json_schema_extra=ui(shown_for="every strategy"),
    )
    search_page_size: int = Field(
        10,
        title="Search page size",
        description="Results per page of conversation_search.",
        gt=0,
        json_schema_extra=ui(advanced=True, show_if={"enableConversationSearchTool": [True]}),
    )
    max_archived_events: int | None = Field(
        None,
        title="Max archived events",
        description="Oldest archived events beyond this many are dropped; empty means the storage's default.",
        gt=0,
        json_schema_extra=ui(advanced=True, shown_for="compacting"),
    )
    #: off by default: a stub points the model at the fetch_tool_result tool, which the host
    #: must then offer, and stubbing rewrites an earlier message once (a prompt-cache miss
    #: from there); see docs/lean-window.md
    compress_tool_results: bool = Field(
        False,
        title="Compress tool results",
        description="Show large tool results the model has already read as a short preview once the window fills up; "
        "the full text stays stored and the agent gets fetch_tool_result to read it again.",
        json_schema_extra=ui(shown_for="every strategy"),
    )
    min_tool_result_compress_tokens: int = Field(
        500,
        title="Min tool result compress tokens",
        description="Tool results smaller than this many tokens are never shortened.",
        gt=0,
        json_schema_extra=ui(advanced=True, show_if={"compressToolResults": [True]}),
    )
    keep_recent_tool_results: int = Field(
        3,
        title="Keep recent tool results",
        description="Newest tool results always shown in full.",
        ge=0,
        json_schema_extra=ui(advanced=True, show_if={"compressToolResults": [True]}),
    )
    #: auto_compact compacts at ``compact_at_ratio`` of it, and no single event may be larger
    #: whatever the strategy (see docs/safety-nets.md)
    context_window_tokens: int = Field(
        200_000,
        title="Context window tokens",
        description="The model's context window in tokens; no single event may be larger.",
        gt=0,
        json_schema_extra=ui(read_by_engine=True),
    )
    compact_at_ratio: float = Field(
        0.8,
        title="Compact at ratio",
        description="Compact when the window reaches this share of the context window (0.8: at 80%).",
        gt=0,
        le=1,
    )
    summarizer_failures_before_fallback: int = Field(
        3,
        title="Summarizer failures before fallback",
        description="After this many failed summaries in a row, compaction archives without a new summary (the window "
        "stays bounded; the archived turns stay searchable).",
        gt=0,
        json_schema_extra=ui(advanced=True, shown_for="summarizing"),
    )
    max_tool_result_tokens: int | None = Field(
        None,
        title="Max tool result tokens",
        description="Tool results longer than this are cut when stored, with a visible note; empty keeps them whole.",
        gt=0,
        json_schema_extra=ui(advanced=True, shown_for="every strategy"),
    )
    #: memory.sweep() deletes conversations idle longer than this (docs/lifecycle.md)
    retention_seconds: int | None = Field(
        None,
        title="Retention seconds",
        description="Conversations idle longer than this many seconds are deleted (with their archive, summaries "
        "and records) by memory.sweep() or `chat-memory sweep` run on a schedule; empty keeps them forever.",
        gt=0,
        json_schema_extra=ui(advanced=True, shown_for="every strategy", read_by_engine=True),
    )

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigurationError(describe_validation_error(exc, MemoryConfig)) from None
        for message in self.ignored_settings():
            warnings.warn(message, UserWarning, stacklevel=_first_caller_outside_package())

    def ignored_settings(self) -> list[str]:
        """One sentence per setting given explicitly, with a value other than its default,
        that the chosen strategy does not read (``max_turns`` with strategy ``none``); each
        names the setting, its value, the strategy and the strategies that read it.

        Building the config warns with these (a :class:`UserWarning`), never refuses: a
        config that loaded before keeps loading. Defaults filled in by a canvas node are
        not flagged (they equal the default)."""
        strategy = strategy_class(self.compaction_strategy)
        messages = []
        given = [f for f in [*type(self).model_fields, *(self.model_extra or {})]]
        for field in given:
            if field not in self.model_fields_set or strategy.reads(field):
                continue
            info = type(self).model_fields.get(field)
            if info is not None and read_by_engine(info):
                continue
            value = getattr(self, field)
            if value == _default_of(field):
                continue
            readers = [n for n in strategy_names() if strategy_class(n).reads(field)]
            if not readers:
                continue
            use = (
                f"set compaction_strategy={readers[0]!r}"
                if len(readers) == 1
                else "set compaction_strategy to one that reads it: "
                + " or ".join(repr(r) for r in readers)
            )
            messages.append(
                f"{field} ({value!r}) has no effect with compaction_strategy {strategy.name!r}; {use}"
            )
        return messages

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> MemoryConfig:
        """Build from a dict of snake_case or camelCase names, ignoring ``None`` values."""
        return cls(**{k: v for k, v in (data or {}).items() if v is not None})

    @field_validator("compaction_strategy", mode="before")
    @classmethod
    def _registered_strategy(cls, value: Any) -> str:
        if isinstance(value, Enum):
            value = value.value
        try:
            return strategy_class(value).name
        except ConfigurationError as exc:
            raise SettingRefusal(str(exc)) from None

    @model_validator(mode="wrap")
    @classmethod
    def _with_strategy_settings(
        cls, data: Any, handler: ModelWrapValidatorHandler[MemoryConfig]
    ) -> MemoryConfig:
        """Validate MemoryConfig's own settings, then the settings strategies declare (the
        chosen strategy's with their defaults; another strategy's only when given, to warn
        that they have no effect), then the strategy's own checks across settings."""
        if not isinstance(data, dict):
            return handler(data)
        own = _own_keys()
        problems: list[str] = []
        try:
            config: MemoryConfig | None = handler({k: v for k, v in data.items() if k in own})
        except ValidationError as exc:
            problems.append(describe_validation_error(exc, MemoryConfig))
            config = None
        strategy = _chosen_strategy(data if config is None else config.compaction_strategy)
        declared = {k: v for k, v in data.items() if k not in own}
        values, given = _strategy_settings(strategy, declared, problems)
        if config is None or problems:
            raise SettingRefusal("; ".join(problems))
        object.__setattr__(config, "__pydantic_extra__", values)
        config.__pydantic_fields_set__.update(given)
        try:
            strategy_class(config.compaction_strategy).check_config(config)
        except ConfigurationError as exc:
            raise SettingRefusal(str(exc)) from None
        return config


#: Human labels of MemoryConfig's own settings, as the canvas shows them; error messages use them.
FIELD_LABELS: dict[str, str] = {
    name: label_of(name, field) for name, field in MemoryConfig.model_fields.items()
}


@cache
def _own_keys() -> frozenset[str]:
    """MemoryConfig's own setting names and their camelCase aliases."""
    fields = MemoryConfig.model_fields.items()
    return frozenset({name for name, _ in fields} | {f.alias for _, f in fields if f.alias})


def _chosen_strategy(source: Any) -> type[Strategy] | None:
    """The strategy a validated name selects, or the one raw settings name (None when they
    name none that exists: that error is reported already)."""
    name = source
    if isinstance(source, dict):
        name = source.get("compaction_strategy", source.get("compactionStrategy", "none"))
    if isinstance(name, Enum):
        name = name.value
    try:
        return strategy_class(name)
    except ConfigurationError:
        return None


def _strategy_settings(
    strategy: type[Strategy] | None, declared: dict[str, Any], problems: list[str]
) -> tuple[dict[str, Any], set[str]]:
    """The values of the settings strategies declare, by name (the chosen strategy's all,
    defaults filled in; another strategy's as given), and the names given explicitly; appends
    a message per bad or unknown one to ``problems``."""
    values: dict[str, Any] = {}
    given: set[str] = set()
    model = strategy.extra_settings if strategy is not None else None
    if strategy is not None and model is not None:
        mine = {k: v for k, v in declared.items() if setting_name(model, k) is not None}
        declared = {k: v for k, v in declared.items() if k not in mine}
        values.update(_validated(strategy, model, mine, problems, every=True))
        given.update(name for k in mine if (name := setting_name(model, k)) is not None)
    for key, value in declared.items():
        owner = declaring_strategy(key)
        if owner is None or owner.extra_settings is None:
            known = [*MemoryConfig.model_fields, *(model.model_fields if model else ())]
            problems.append(
                f"Unknown setting {key!r} (value {value!r}); known settings: {', '.join(known)}"
            )
            continue
        found = _validated(owner, owner.extra_settings, {key: value}, problems, every=False)
        values.update(found)
        given.update(found)
    return values, given


def _validated(
    strategy: type[Strategy],
    model: type[SettingsModel],
    data: dict[str, Any],
    problems: list[str],
    every: bool,
) -> dict[str, Any]:
    """``data`` validated by a strategy's settings model, by setting name: every setting of
    the model (defaults filled in) or only those given. Problems are appended, not raised."""
    clash = sorted(set(model.model_fields) & _own_keys())
    if clash:
        problems.append(
            f"Compaction strategy {strategy.name!r} declares {', '.join(map(repr, clash))}, "
            "which MemoryConfig already has: list it in settings to read it"
        )
        return {}
    try:
        settings = model(**data)
    except ValidationError as exc:
        problems.append(describe_validation_error(exc, model))
        return {}
    names = model.model_fields if every else [setting_name(model, k) for k in data]
    return {name: getattr(settings, name) for name in names if name is not None}


def _default_of(setting: str) -> Any:
    """The default of a setting, MemoryConfig's own or a strategy's."""
    field = MemoryConfig.model_fields.get(setting)
    if field is None:
        owner = declaring_strategy(setting)
        if owner is None or owner.extra_settings is None:
            return None
        field = owner.extra_settings.model_fields[setting]
    return field.get_default(call_default_factory=True)


def _first_caller_outside_package() -> int:
    """The ``stacklevel`` that points a warning at the caller's own line (``ChatMemory(store,
    {"max_turns": 20})``) rather than at chat-memory code that built the config for it."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package
    ):
        frame, level = frame.f_back, level + 1
    return level
