"""Settings described once: a pydantic model whose ``Field`` metadata says everything about a
setting (label: ``title``; help text: ``description``; bounds: ``gt``/``ge``/``lt``/``le``;
canvas hints: ``json_schema_extra=ui(...)``). :class:`~chat_memory.MemoryConfig` and the
settings a strategy declares are such models; validation messages and the canvas fields are
derived from the same metadata."""

from __future__ import annotations

import math
import types
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

#: For which strategies the canvas shows a setting when no ``show_if`` says otherwise:
#: ``readers`` (default) the strategies that read it (list it in ``settings`` or declare it);
#: ``every strategy``; ``compacting``/``summarizing`` the strategies with that ability.
ShownFor = Literal["readers", "every strategy", "compacting", "summarizing"]

#: The key of ``json_schema_extra`` holding the canvas hints (as in the node definitions).
UI_KEY = "x-ui"
#: The key of ``json_schema_extra`` marking a setting the engine reads whatever the strategy.
ENGINE_KEY = "x-read-by-engine"


def ui(
    *,
    advanced: bool = False,
    show_if: dict[str, list[Any]] | None = None,
    shown_for: ShownFor = "readers",
    read_by_engine: bool = False,
) -> dict[str, Any]:
    """The ``json_schema_extra`` of a setting: its canvas hints. ``show_if`` ties it to another
    field (``{"enableConversationSearchTool": [True]}``); otherwise ``shown_for`` says for
    which strategies it shows. ``read_by_engine``: the engine reads it whatever the strategy,
    so it is never reported as having no effect."""
    hints: dict[str, Any] = {}
    if advanced:
        hints["advanced"] = True
    if show_if:
        hints["showIf"] = show_if
    if shown_for != "readers":
        hints["shownFor"] = shown_for
    extra: dict[str, Any] = {UI_KEY: hints}
    if read_by_engine:
        extra[ENGINE_KEY] = True
    return extra


def ui_hints(field: FieldInfo) -> dict[str, Any]:
    """The canvas hints :func:`ui` stored on a field (empty when it has none)."""
    extra = field.json_schema_extra
    hints = extra.get(UI_KEY) if isinstance(extra, dict) else None
    return dict(hints) if isinstance(hints, dict) else {}


def read_by_engine(field: FieldInfo) -> bool:
    """Whether the engine reads this setting whatever the strategy (see :func:`ui`)."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get(ENGINE_KEY) is True


def label_of(name: str, field: FieldInfo) -> str:
    """How the canvas and the error messages name a setting: its ``title``, else its name in
    words (``keep_turns`` → ``Keep turns``)."""
    return field.title or name.replace("_", " ").capitalize()


def bounds_of(field: FieldInfo) -> dict[str, float]:
    """The bounds declared on a field, by kind: ``gt``, ``ge``, ``lt``, ``le``."""
    found: dict[str, float] = {}
    for item in field.metadata:  # pydantic keeps Field(gt=…) as annotated_types.Gt(gt=…) and so on
        for kind in ("gt", "ge", "lt", "le"):
            value = getattr(item, kind, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[kind] = value
    return found


def bounds_text(bounds: dict[str, float]) -> str:
    """``greater than 0 and at most 1``: the bounds as a sentence ends."""
    words = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}
    return " and ".join(f"{words[kind]} {_plain(value)}" for kind, value in bounds.items())


def number_kind(field: FieldInfo) -> tuple[type[int] | type[float] | None, bool]:
    """(``int`` or ``float`` or None, nullable) for a field annotated ``int``, ``float``,
    ``int | None``…; bool is not a number here."""
    annotation = field.annotation
    args = (
        get_args(annotation)
        if get_origin(annotation) in (Union, types.UnionType)
        else (annotation,)
    )
    nullable = type(None) in args
    kinds = [a for a in args if a is not type(None)]
    if len(kinds) == 1 and kinds[0] in (int, float):
        return kinds[0], nullable
    return None, nullable


def enum_values(field: FieldInfo) -> list[Any] | None:
    """The values of a field annotated with an :class:`Enum` (None for other fields)."""
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [member.value for member in annotation]
    return None


def plain_default(field: FieldInfo) -> Any:
    """The field's default as JSON shows it (an enum member as its value)."""
    value = field.get_default(call_default_factory=True)
    return value.value if isinstance(value, Enum) else value


class SettingRefusal(ValueError):
    """A validation failure whose message is already complete (field label and value)."""


class SettingsModel(BaseModel):
    """A frozen model of settings: snake_case names and their camelCase aliases both accepted,
    unknown names refused, and every number checked against the bounds its ``Field``
    declares, with a message naming the setting's label and the value."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _number_within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        field = cls.model_fields.get(name)
        if field is None:
            return value
        kind, nullable = number_kind(field)
        if kind is None or (value is None and nullable):
            return value
        label = label_of(name, field)
        bounds = bounds_of(field)
        if kind is int:
            return _whole_number(label, value, bounds)
        return _number(label, value, bounds)


def describe_validation_error(exc: ValidationError, model: type[SettingsModel]) -> str:
    """One readable line per problem, each naming the field (by its label) and the value."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ())]
        key = loc[0] if loc else ""
        name = setting_name(model, key)
        label = label_of(name, model.model_fields[name]) if name else (key or "Settings")
        value = error.get("input")
        message = str(error.get("msg", ""))
        cause = error.get("ctx", {}).get("error")
        if error.get("type") == "value_error" and isinstance(cause, SettingRefusal):
            lines.append(str(cause))
        elif error.get("type") == "value_error" and not key and isinstance(cause, ValueError):
            lines.append(str(cause))  # a model-level check of a strategy's own settings
        elif error.get("type") == "extra_forbidden":
            known = ", ".join(model.model_fields)
            lines.append(f"Unknown setting {key!r} (value {value!r}); known settings: {known}")
        elif error.get("type") == "enum":
            expected = error.get("ctx", {}).get("expected", "")
            lines.append(f"{label} ({value!r}) must be one of {expected}")
        else:
            lines.append(f"{label} ({value!r}): {message}")
    return "; ".join(lines)


def setting_name(model: type[SettingsModel], key: str) -> str | None:
    """The field of ``model`` that ``key`` names (its name or its camelCase alias), or None."""
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return name
    return None


def _whole_number(label: str, value: Any, bounds: dict[str, float]) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise SettingRefusal(f"{label} ({value!r}) must be a whole number")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SettingRefusal(f"{label} ({value!r}) must be a whole number") from None
    if not isinstance(value, (int, float)):
        raise SettingRefusal(f"{label} ({value!r}) must be a whole number")
    number = int(value)
    if not _within(number, bounds):
        raise SettingRefusal(f"{label} ({number}) must be {bounds_text(bounds)}")
    return number


def _number(label: str, value: Any, bounds: dict[str, float]) -> float:
    number: Any = value
    if isinstance(number, str):
        try:
            number = float(number.strip())
        except ValueError:
            number = None
    if (
        isinstance(number, bool)
        or not isinstance(number, (int, float))
        or not math.isfinite(number)
    ):
        wanted = f"a number {bounds_text(bounds)}" if bounds else "a number"
        raise SettingRefusal(f"{label} ({value!r}) must be {wanted}")
    if not _within(number, bounds):
        raise SettingRefusal(f"{label} ({value!r}) must be {bounds_text(bounds)}")
    return float(number)


def _within(number: float, bounds: dict[str, float]) -> bool:
    return (
        number > bounds.get("gt", -math.inf)
        and number >= bounds.get("ge", -math.inf)
        and number < bounds.get("lt", math.inf)
        and number <= bounds.get("le", math.inf)
    )


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
