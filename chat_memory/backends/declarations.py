"""What a store declares on its class for the registry and the canvas: the options it reads
from its URL (:class:`StoreOption`, parsed alike for every store by :func:`settings_from_url`),
its Chat Memory node (:class:`StoreNode` with its :class:`ConnectionField` s), and the classes
that go with it, named by lazy ``"module:Class"`` strings (:func:`declared_class`: its native
async twin, its long-term memory) so that naming them imports no driver.

Plain data: :mod:`chat_memory.backends.registry` and :mod:`chat_memory.components` read it;
:class:`~chat_memory.backends.base.Store` carries it as ``url_options``, ``node``,
``async_twin`` and ``long_term``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl

from ..errors import ConfigurationError

_NONE_WORDS = ("", "none")
_TRUE_WORDS, _FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class StoreOption:
    """A setting a store reads from its URL's query string (``?max_archived_events=500``) or
    from a keyword of :func:`~chat_memory.open_store`. Every store parses its options with
    :meth:`Store.url_settings`, so ``500``, ``none`` and ``true`` mean the same everywhere."""

    name: str
    kind: type = str
    #: the smallest number allowed (``int`` options)
    minimum: int | None = None
    #: whether an empty value or ``none`` means None (no limit)
    nullable: bool = False

    def parse(self, value: Any, store: str) -> Any:
        """The value as the store takes it; a bad one is a :class:`ConfigurationError`
        naming the store, the option and the value."""
        where = f"{store} option {self.name}"
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
            if self.nullable:
                return None
            if self.kind is not str:
                raise ConfigurationError(f"{where} ({value!r}) must be given")
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word not in (*_TRUE_WORDS, *_FALSE_WORDS):
                raise ConfigurationError(f"{where} ({value!r}) must be true or false")
            return word in _TRUE_WORDS
        if self.kind is int:
            if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
                raise ConfigurationError(f"{where} ({value!r}) must be a whole number")
            try:
                number = int(value.strip() if isinstance(value, str) else value)
            except (TypeError, ValueError):
                raise ConfigurationError(f"{where} ({value!r}) must be a whole number") from None
            if self.minimum is not None and number < self.minimum:
                raise ConfigurationError(
                    f"{where} ({value!r}) must be a whole number, {self.minimum} or more"
                )
            return number
        if self.kind is str and not isinstance(value, str):
            raise ConfigurationError(f"{where} ({value!r}) must be text")
        return value


@dataclass(frozen=True)
class ConnectionField:
    """A connection setting the store's canvas node shows (plain data: the node definitions in
    :mod:`chat_memory.components` turn it into a JSON Schema property)."""

    name: str
    label: str
    description: str
    kind: str = "string"
    default: Any = None
    required: bool = False
    nullable: bool = False
    minimum: int | None = None
    min_length: int | None = None
    placeholder: str | None = None
    advanced: bool = False


@dataclass(frozen=True)
class StoreNode:
    """The Chat Memory canvas node of a store: its name, title, storage kind and connection
    fields. ``order`` places it among the five nodes."""

    name: str
    title: str
    description: str
    storage: str
    fields: tuple[ConnectionField, ...] = ()
    order: int = 100


class DeclaresOptions(Protocol):
    """A store class (sync or async) as :func:`settings_from_url` reads it."""

    @property
    def url_options(self) -> tuple[StoreOption, ...]: ...

    @property
    def passes_query_to_driver(self) -> bool: ...


def settings_from_url(
    store: DeclaresOptions, query: str, keywords: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """:meth:`Store.url_settings` for any class declaring ``url_options`` and
    ``passes_query_to_driver`` (an async store too); messages name the class."""
    name_of_store = str(getattr(store, "__name__", store))
    declared = {option.name: option for option in store.url_options}
    settings: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        option = declared.get(name)
        if option is not None:
            if name in settings:
                raise ConfigurationError(
                    f"{name_of_store} URL option {name} is given more than once"
                )
            settings[name] = option.parse(value, name_of_store)
        elif store.passes_query_to_driver:
            rest.append((name, value))
        else:
            known = ", ".join(sorted(declared)) or "none"
            raise ConfigurationError(
                f"{name_of_store} URL option ({name!r}) is not supported; known options: {known}"
            )
    for name, value in (keywords or {}).items():
        if name in declared:
            settings[name] = declared[name].parse(value, name_of_store)
    return settings, rest


def declared_class(owner: type, attribute: str) -> type | None:
    """The class ``owner.attribute`` names as ``"package.module:Class"`` (looked up along the
    MRO, so a subclass inherits its base's), imported now; None when it names none. A
    malformed value or a missing class is a :class:`ConfigurationError` naming the declaration
    and the value; a module that cannot be imported raises what its import raised
    (``ModuleNotFoundError`` for a missing driver)."""
    value = getattr(owner, attribute, None)
    if value is None:
        return None
    where = f"{owner.__name__}.{attribute}"
    module_name, _, class_name = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not module_name or not class_name.isidentifier():
        raise ConfigurationError(f"{where} ({value!r}) must look like 'package.module:Class'")
    found = getattr(importlib.import_module(module_name), class_name, None)
    if not isinstance(found, type):
        raise ConfigurationError(f"{where} ({value!r}): {module_name} has no class {class_name}")
    return found
