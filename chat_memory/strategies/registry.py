"""The strategy registry: ``compaction_strategy`` names to strategy classes.

A :class:`~chat_memory.strategies.Strategy` subclass that sets ``name`` registers itself when
it is defined. The built-in strategies are the modules of this package (found, not listed: a
new strategy is one new module); installed packages add theirs through the
``chat_memory.strategies`` entry-point group, e.g. in their ``pyproject.toml``::

    [project.entry-points."chat_memory.strategies"]
    keep_newest = "my_package.strategy:KeepNewest"

The built-in modules are imported on the first look-up; the entry points the first time a
name is not among them, or when every strategy is listed (the canvas, error messages). Listing
order is each class's ``order`` (built-ins 10, 20…; others 100 unless they say), then the
order of registration."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..plugins import import_modules_of, load_entry_points
from ..settings_model import SettingsModel, setting_name

if TYPE_CHECKING:
    from .base import Strategy

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "chat_memory.strategies"

_REGISTRY: dict[str, type[Strategy]] = {}
_builtins_loaded = False
_plugins_loaded = False
_load_lock = threading.RLock()


def register(strategy: type[Strategy]) -> None:
    """Make ``strategy`` selectable by its ``name``. A name or a declared setting another
    class already owns is a :class:`ConfigurationError` (re-registering the same class, as a
    module reload does, is not); so is a declared setting without a default."""
    name = strategy.name
    existing = _REGISTRY.get(name)
    if existing is not None and _qualified(existing) != _qualified(strategy):
        raise ConfigurationError(
            f"compaction strategy name {name!r} is taken by {_qualified(existing)}"
        )
    model = strategy.extra_settings
    if model is not None:
        _check_declared_settings(strategy, model)
    _REGISTRY[name] = strategy


def unregister(strategy: type[Strategy]) -> None:
    """Forget ``strategy`` (for tests and plugin reloads)."""
    if _REGISTRY.get(strategy.name) is strategy:
        del _REGISTRY[strategy.name]


def strategy_classes() -> list[type[Strategy]]:
    """Every strategy (built-in and installed), in listing order."""
    _load_builtins()
    _load_plugins()
    return sorted(_REGISTRY.values(), key=lambda cls: cls.order)


def strategy_names() -> list[str]:
    """Every strategy name, in listing order (the order the canvas and the errors use)."""
    return [cls.name for cls in strategy_classes()]


def strategy_class(name: Any) -> type[Strategy]:
    """The strategy registered as ``name``; an unknown name is a :class:`ConfigurationError`
    listing the known ones."""
    _load_builtins()
    if not _known(name):
        _load_plugins()
    if not _known(name):
        known = ", ".join(repr(n) for n in strategy_names())
        raise ConfigurationError(f"Compaction strategy ({name!r}) must be one of {known}")
    return _REGISTRY[name]


def declaring_strategy(setting: str) -> type[Strategy] | None:
    """The strategy whose ``extra_settings`` declare ``setting`` (by name or camelCase alias)."""
    for strategy in strategy_classes():
        model = strategy.extra_settings
        if model is not None and setting_name(model, setting) is not None:
            return strategy
    return None


def _known(name: Any) -> bool:
    try:
        return name in _REGISTRY
    except TypeError:  # an unhashable value is not a name
        return False


def _check_declared_settings(strategy: type[Strategy], model: Any) -> None:
    if not (isinstance(model, type) and issubclass(model, SettingsModel)):
        raise ConfigurationError(
            f"extra_settings of {_qualified(strategy)} ({model!r}) must be a StrategySettings subclass"
        )
    for setting, field in model.model_fields.items():
        if field.is_required():
            raise ConfigurationError(
                f"setting {setting!r} of {_qualified(strategy)} needs a default (a canvas node "
                "and a config that does not name it use it)"
            )
        for other in _REGISTRY.values():
            if (
                other.extra_settings is not None
                and _qualified(other) != _qualified(strategy)
                and setting in other.extra_settings.model_fields
            ):
                raise ConfigurationError(
                    f"setting {setting!r} of {_qualified(strategy)} is already declared by "
                    f"{_qualified(other)}; list it in settings to read it"
                )


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _load_lock:
        if _builtins_loaded:
            return
        import_modules_of(__package__ or "chat_memory.strategies")
        _builtins_loaded = True


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    with _load_lock:
        if _plugins_loaded:
            return
        load_entry_points(
            ENTRY_POINT_GROUP, "strategy", "a Strategy subclass with a name", _is_registered
        )
        _plugins_loaded = True


def _is_registered(loaded: object) -> bool:
    name = getattr(loaded, "name", None)
    return isinstance(loaded, type) and isinstance(name, str) and _REGISTRY.get(name) is loaded


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
