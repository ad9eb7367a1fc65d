"""MemoryConfig: the settings of a ChatMemory (and of every Chat Memory node), validated
when built so that a bad value never surfaces mid-run."""

from __future__ import annotations

import math
import os
import sys
import warnings
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .errors import ConfigurationError
from .strategies import strategy_class, strategy_names


class SummaryPlacement(str, Enum):
    """Where the summary is rendered for the model."""

    USER_MESSAGE = "user_message"
    SYSTEM_PROMPT = "system_prompt"


#: Human labels of the fields, as the canvas shows them; error messages use them.
FIELD_LABELS: dict[str, str] = {
    "compaction_strategy": "Compaction strategy",
    "max_events": "Max events",
    "max_turns": "Max turns",
    "max_tokens": "Max tokens",
    "max_events_to_keep": "Max events to keep",
    "overlap_size": "Overlap size",
    "enable_conversation_search_tool": "Enable conversation search tool",
    "search_page_size": "Search page size",
    "max_archived_events": "Max archived events",
    "summary_placement": "Summary placement",
    "compress_tool_results": "Compress tool results",
    "min_tool_result_compress_tokens": "Min tool result compress tokens",
    "keep_recent_tool_results": "Keep recent tool results",
    "context_window_tokens": "Context window tokens",
    "compact_at_ratio": "Compact at ratio",
    "summarizer_failures_before_fallback": "Summarizer failures before fallback",
    "max_tool_result_tokens": "Max tool result tokens",
    "compact_to_ratio": "Compact to ratio",
}

_POSITIVE = (
    "max_events",
    "max_turns",
    "max_tokens",
    "max_events_to_keep",
    "search_page_size",
    "max_archived_events",
    "min_tool_result_compress_tokens",
    "context_window_tokens",
    "summarizer_failures_before_fallback",
    "max_tool_result_tokens",
)
_AT_LEAST_ZERO = ("overlap_size", "keep_recent_tool_results")
#: Whole-number settings where None means "off" / "the default".
_NULLABLE = ("max_archived_events", "max_tool_result_tokens")
#: Settings that are a share: greater than 0, at most 1.
_RATIOS = ("compact_at_ratio", "compact_to_ratio")
#: Settings some strategies declare that the engine also reads whatever the strategy (the
#: largest event allowed; where a forced compaction's summary goes): never "ignored".
_READ_BY_EVERY_STRATEGY = ("context_window_tokens", "summary_placement")


class _Refusal(ValueError):
    """A validation failure whose message is already complete (field label and value)."""


class MemoryConfig(BaseModel):
    """Settings of a :class:`~chat_memory.ChatMemory`.

    Field names are snake_case; the camelCase names of the canvas nodes
    (``compactionStrategy``, ``maxTurns``…) are accepted too. A bad value raises
    :class:`~chat_memory.ConfigurationError` naming the field and the value.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    #: the name of a registered strategy (:mod:`chat_memory.strategies`)
    compaction_strategy: str = "none"
    max_events: int = 20
    max_turns: int = 10
    max_tokens: int = 4000
    max_events_to_keep: int = 10
    overlap_size: int = 2
    enable_conversation_search_tool: bool = False
    search_page_size: int = 10
    max_archived_events: int | None = None
    summary_placement: SummaryPlacement = SummaryPlacement.USER_MESSAGE
    #: off by default: a stub points the model at the fetch_tool_result tool, which the host
    #: must then offer, and stubbing rewrites an earlier message once (a prompt-cache miss
    #: from there); see docs/lean-window.md
    compress_tool_results: bool = False
    min_tool_result_compress_tokens: int = 500
    keep_recent_tool_results: int = 3
    #: the model's context window; auto_compact compacts at ``compact_at_ratio`` of it, and
    #: no single event may be larger (see docs/safety-nets.md)
    context_window_tokens: int = 200_000
    compact_at_ratio: float = 0.8
    #: consecutive summarizer failures after which a compaction archives without a new summary
    summarizer_failures_before_fallback: int = 3
    #: tool results longer than this are cut when stored, with a visible note (None: never)
    max_tool_result_tokens: int | None = None
    #: what a compaction leaves, as a fraction of the strategy's limit: below 1 the window
    #: then grows for several turns with an unchanged prefix, which a prompt cache serves at
    #: a tenth of the price; 0.5 measured cheapest for its context (docs/prompt-caching.md).
    #: Never fewer than the newest 2 turns when the limit itself allows them (a turn window
    #: of 3 keeps 2 turns, not 1; docs/lean-window.md, "Small windows")
    compact_to_ratio: float = 0.5

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigurationError(describe_validation_error(exc)) from None
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
        for field in type(self).model_fields:
            if (
                field not in self.model_fields_set
                or field in strategy.settings
                or field in _READ_BY_EVERY_STRATEGY
            ):
                continue
            readers = [n for n in strategy_names() if field in strategy_class(n).settings]
            value = getattr(self, field)
            if not readers or value == type(self).model_fields[field].default:
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
            raise _Refusal(str(exc)) from None

    @field_validator(*_POSITIVE, *_AT_LEAST_ZERO, mode="before")
    @classmethod
    def _whole_number(cls, value: Any, info: Any) -> Any:
        label = FIELD_LABELS[info.field_name]
        if value is None and info.field_name in _NULLABLE:
            return None
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise _Refusal(f"{label} ({value!r}) must be a whole number")
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise _Refusal(f"{label} ({value!r}) must be a whole number") from None
        if not isinstance(value, (int, float)):
            raise _Refusal(f"{label} ({value!r}) must be a whole number")
        value = int(value)
        if info.field_name in _POSITIVE and value <= 0:
            raise _Refusal(f"{label} ({value}) must be greater than 0")
        if info.field_name in _AT_LEAST_ZERO and value < 0:
            raise _Refusal(f"{label} ({value}) must be at least 0")
        return value

    @field_validator(*_RATIOS, mode="before")
    @classmethod
    def _ratio(cls, value: Any, info: Any) -> float:
        label = FIELD_LABELS[info.field_name]
        number: Any = value
        if isinstance(number, str):
            try:
                number = float(number.strip())
            except ValueError:
                raise _Refusal(
                    f"{label} ({value!r}) must be a number greater than 0 and at most 1"
                ) from None
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
        ):
            raise _Refusal(f"{label} ({value!r}) must be a number greater than 0 and at most 1")
        if not 0 < number <= 1:
            raise _Refusal(f"{label} ({value!r}) must be greater than 0 and at most 1")
        return float(number)

    @model_validator(mode="after")
    def _strategy_limits(self) -> MemoryConfig:
        try:
            strategy_class(self.compaction_strategy).check_config(self)
        except ConfigurationError as exc:
            raise _Refusal(str(exc)) from None
        return self


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


def describe_validation_error(exc: ValidationError) -> str:
    """One readable line per problem, each naming the field (by its label) and the value."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ())]
        field = loc[0] if loc else ""
        snake = _snake(field)
        label = FIELD_LABELS.get(snake, field or "Settings")
        value = error.get("input")
        message = str(error.get("msg", ""))
        if error.get("type") == "value_error" and isinstance(
            error.get("ctx", {}).get("error"), _Refusal
        ):
            lines.append(str(error["ctx"]["error"]))
        elif error.get("type") == "extra_forbidden":
            lines.append(
                f"Unknown setting {field!r} (value {value!r}); known settings: {', '.join(FIELD_LABELS)}"
            )
        elif error.get("type") == "enum":
            expected = error.get("ctx", {}).get("expected", "")
            lines.append(f"{label} ({value!r}) must be one of {expected}")
        else:
            lines.append(f"{label} ({value!r}): {message}")
    return "; ".join(lines)


def _snake(name: str) -> str:
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out)
