"""What every strategy shares: where a window may be cut, the shape of a cut, and the
registry strategies join by subclassing :class:`Strategy` with a ``name``.

Strategies are pure: a window in, a cut (or nothing) out. They know no storage."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import ConfigurationError
from ..events import Event, EventType, Window, turn_starts

if TYPE_CHECKING:  # config validates strategy names against this registry, so no runtime import
    from ..config import MemoryConfig


@dataclass(frozen=True)
class Cut:
    """Archive ``window.active[:index]``; keep the rest."""

    index: int
    archived: tuple[Event, ...]
    kept: tuple[Event, ...]

    @classmethod
    def at(cls, active: Sequence[Event], index: int) -> Cut:
        return cls(index=index, archived=tuple(active[:index]), kept=tuple(active[index:]))

    @property
    def through_seq(self) -> int:
        """The seq of the last archived event."""
        return self.archived[-1].seq or 0


def safe_cuts(active: Sequence[Event]) -> list[int]:
    """Indexes where the window may be cut: turn starts after the first, up to and including
    the newest turn's start, that do not separate a tool result from its tool call."""
    starts = turn_starts(active)[1:]
    if not starts:
        return []
    call_at = {e.tool_call_id: i for i, e in enumerate(active) if e.type is EventType.TOOL_CALL}
    unsafe: set[int] = set()
    for j, event in enumerate(active):
        if event.type is EventType.TOOL_RESULT:
            k = call_at.get(event.tool_call_id)
            if k is not None and k < j:
                unsafe.update(s for s in starts if k < s <= j)
    return [s for s in starts if s not in unsafe]


def choose_cut(active: Sequence[Event], required: int) -> Cut | None:
    """The cut archiving at least ``required`` events at the nearest safe point at or after
    it; when none is that far, the furthest safe point (only the newest turn may be left)."""
    if required <= 0:
        return None
    candidates = safe_cuts(active)
    if not candidates:
        return None
    later = [c for c in candidates if c >= required]
    return Cut.at(active, later[0] if later else candidates[-1])


_REGISTRY: dict[str, type[Strategy]] = {}


class Strategy(ABC):
    """A compaction strategy: decides whether a window is over its limit and where to cut.

    A subclass that sets ``name`` registers itself: ``MemoryConfig(compaction_strategy=name)``
    selects it, and the Chat Memory nodes offer it (``label``) and show the config fields it
    lists in ``settings``. Nothing else in chat-memory needs to know about it.
    """

    #: The value of ``compaction_strategy`` that selects this strategy.
    name: ClassVar[str]
    #: How the canvas lists it.
    label: ClassVar[str]
    #: The :class:`~chat_memory.MemoryConfig` fields this strategy reads (the canvas shows
    #: exactly these for it).
    settings: ClassVar[tuple[str, ...]] = ()
    #: Whether a cut also needs a summary written by a summarizer model.
    summarizes: ClassVar[bool] = False
    #: Whether it ever archives (so the archive cap matters).
    compacts: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name is None:
            return
        existing = _REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ConfigurationError(
                f"compaction strategy name {name!r} is taken by {existing.__module__}.{existing.__qualname__}"
            )
        _REGISTRY[name] = cls

    def __init__(self, config: MemoryConfig) -> None:
        self.config = config

    @classmethod
    def check_config(cls, config: MemoryConfig) -> None:
        """Refuse settings this strategy cannot work with (raise :class:`ConfigurationError`
        naming the field and the value); called when the config is built."""

    @abstractmethod
    def plan(self, window: Window) -> Cut | None:
        """The cut to make now, or None when the window is within its limit (or cannot be cut)."""

    def upcoming(self, cut: Cut) -> list[Event]:
        """Kept events a summarizer sees as context after the archived ones (not summarised)."""
        return []


def strategy_names() -> list[str]:
    """The registered strategy names, in registration order (built-ins first)."""
    return list(_REGISTRY)


def strategy_class(name: str) -> type[Strategy]:
    """The strategy registered as ``name``; an unknown name is a :class:`ConfigurationError`."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(n) for n in _REGISTRY)
        raise ConfigurationError(f"Compaction strategy ({name!r}) must be one of {known}") from None


def strategy_for(config: MemoryConfig) -> Strategy:
    """The strategy a config selects, built with that config."""
    return strategy_class(config.compaction_strategy)(config)
