"""Our node fields as Langflow inputs: one mapping from :class:`FieldSpec` (type, default,
enum, label, description, ``showIf``) to an ``lfx.io`` input, so the Langflow components
and the canvas nodes come from the same declarations.

Connection URLs may carry a password, so they are secret inputs (:data:`SECRET_FIELDS`):
masked on the canvas, and able to take a Langflow global variable (Credential type: stored
encrypted by Langflow, the flow JSON holds only its name) instead of the URL itself.

Two Langflow behaviours shape these inputs (lfx 1.13):

- At run time lfx drops every field whose ``show`` is false and the component gets the class
  default instead (``ParameterHandler.should_skip_field``), so a value set while the field
  was hidden, or a flow saved with a stale ``show`` flag, would be lost. Fields that a
  ``showIf`` can hide are ``override_skip`` inputs (lfx's own "persist to runtime" flag):
  their value always reaches the component, which then decides by ``showIf`` itself whether
  the field applies (:func:`applicable`), never by the stored ``show`` flag.
- The canvas orders fields by ``field_order``, but looks each field up in lowercase
  (``sortFields`` in Langflow's frontend, ``src/frontend/src/CustomNodes/utils/sort-fields.tsx``):
  camelCase names are never found and fall back to alphabetical order.
  :func:`canvas_field_order` lists each name and its lowercase form, so both the canvas and
  lfx's exact-name lookups see the order a user fills the fields in."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from lfx.io import (
    BoolInput,
    DropdownInput,
    FloatInput,
    IntInput,
    MessageTextInput,
    SecretStrInput,
    StrInput,
)

from ...backends.urls import strip_userinfo
from ...components import FieldSpec, NodeDefinition
from ...errors import ConfigurationError

#: Fields that hold a URL whose user information may be a password (the SQL and Redis URLs,
#: an S3-compatible endpoint): Langflow password inputs that accept global variables.
SECRET_FIELDS = frozenset({"url", "endpointUrl"})
#: what a secret field's placeholder says after the example URL
SECRET_HINT = "put credentials in a global variable"
#: Text fields that take a wire (a Chat Input's session id, a text with the user's id): empty
#: means the default (the run's session id; no user)
WIRED_TEXT_FIELDS = frozenset({"conversationId", "userId"})


def _types(spec: FieldSpec) -> list[str]:
    types = spec.schema.get("type", [])
    return [types] if isinstance(types, str) else list(types)


def controlling_fields(definition: NodeDefinition) -> set[str]:
    """The fields another field's ``showIf`` names: they refresh the form when changed."""
    return {key for spec in definition.fields for key in (spec.show_if or {})}


def input_for(spec: FieldSpec, refresh: bool, show: bool = True, secret: bool | None = None) -> Any:
    """The Langflow input of one field. A nullable integer without a default is a text box
    (empty: no value), since Langflow's integer box has no empty state. A field a ``showIf``
    can hide is ``override_skip``: its value reaches the component even while hidden.
    ``secret`` (default: the name is in :data:`SECRET_FIELDS`) makes it a password input."""
    common: dict[str, Any] = {
        "name": spec.name,
        "display_name": spec.label,
        "info": spec.description,
        "advanced": spec.advanced,
        "required": spec.required,
        "dynamic": spec.show_if is not None,
        "real_time_refresh": refresh,
        "show": show,
        "override_skip": spec.show_if is not None,
    }
    if spec.placeholder:
        common["placeholder"] = spec.placeholder
    default = spec.schema.get("default")
    types = _types(spec)
    if "enum" in spec.schema:
        return DropdownInput(options=list(spec.schema["enum"]), value=default, **common)
    if "boolean" in types:
        return BoolInput(value=bool(default), **common)
    if "integer" in types and not ("null" in types and default is None):
        return IntInput(value=default, **common)
    if "number" in types:
        return FloatInput(value=default, **common)
    if spec.name in SECRET_FIELDS if secret is None else secret:
        return secret_input(spec, common)
    if spec.name in WIRED_TEXT_FIELDS:
        # takes a wired text (Chat Input's session id, the user's id); empty: the default
        return MessageTextInput(value="", **{**common, "required": False})
    return StrInput(value="" if default is None else str(default), **common)


def secret_input(spec: FieldSpec, common: dict[str, Any]) -> Any:
    """A password input whose placeholder shows an example URL without credentials.
    ``load_from_db`` starts False, so a URL typed or set by a flow is used as written; picking
    a global variable on the canvas turns it on, and Langflow then fills in the variable's
    value at run time (the flow JSON keeps only the variable's name)."""
    example = strip_userinfo(spec.placeholder)[0] if spec.placeholder else None
    placeholder = f"{example} — {SECRET_HINT}" if example else SECRET_HINT
    return SecretStrInput(value="", load_from_db=False, **{**common, "placeholder": placeholder})


def field_value(spec: FieldSpec, value: Any) -> Any:
    """A component's attribute value as our node's parameter value (None: not set, the
    default stands). Text in a nullable-integer box must be a whole number."""
    types = _types(spec)
    if hasattr(value, "text") and not isinstance(value, str):  # a wired Message
        value = value.text
    if hasattr(value, "get_secret_value"):  # a Credential global variable arrives as a SecretStr
        value = value.get_secret_value()
    if value is None or (isinstance(value, str) and not value.strip() and "string" not in types):
        return None
    if (
        isinstance(value, str)
        and value == ""
        and not spec.required
        and spec.schema.get("minLength")
    ):
        return None
    if "integer" in types and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigurationError(f"{spec.label} ({value!r}) must be a whole number") from None
    return value


def shown(definition: NodeDefinition, values: Mapping[str, Any]) -> dict[str, bool]:
    """For every field, whether it shows for these values (defaults filled in): our ``showIf``."""
    filled = {**definition.defaults(), **{k: v for k, v in values.items() if v is not None}}
    return {spec.name: spec.is_shown(filled) for spec in definition.fields}


def show_for_form(
    definition: NodeDefinition,
    build_config: Any,
    field_value: Any,
    field_name: str | None,
    keep: Collection[str] = (),
) -> None:
    """Set ``show`` on every field of a canvas form (``build_config``) as our ``showIf`` decides
    for the form's values, ``field_name`` taking its new ``field_value``; the fields in ``keep``
    are left as they are (their visibility follows another rule)."""
    values = {
        spec.name: build_config[spec.name].get("value")
        for spec in definition.fields
        if spec.name in build_config
    }
    if field_name in values:
        values[field_name] = field_value
    for name, visible in shown(definition, values).items():
        if name in build_config and name not in keep:
            build_config[name]["show"] = visible


def applicable(definition: NodeDefinition, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the fields that apply to these values (their ``showIf`` holds): a field
    hidden by the strategy (or a switch) is one its settings do not use, so its value, which
    reaches the component anyway (``override_skip``), is left to the default."""
    visible = shown(definition, values)
    return {name: value for name, value in values.items() if visible.get(name, True)}


def canvas_field_order(names: list[str]) -> list[str]:
    """``field_order`` for these input names (in the order a user fills them in): each name
    followed by its lowercase form when that differs, because Langflow's canvas looks fields
    up in lowercase while lfx matches names exactly; each sees the same order."""
    order: list[str] = []
    for name in names:
        order += [name] if name == name.lower() else [name, name.lower()]
    return order
