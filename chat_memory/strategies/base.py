"""What every strategy shares: where a window may be cut, the shape of a cut, the
:class:`Strategy` class (a subclass with a ``name`` joins the registry,
:mod:`chat_memory.strategies.registry`) and :class:`StrategySettings`, the settings a
strategy adds to :class:`~chat_memory.MemoryConfig`.

Strategies are pure: a window in, a cut (or nothing) out. They know no storage."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..events import Event, EventType, Window, turn_starts
from ..settings_model import SettingsModel
from .registry import _REGISTRY as _REGISTRY  # importable from here as before (tests unregister)
from .registry import register, strategy_class

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


#: Turns after which a tool call is *superseded*: once this many newer turns have started
#: after the turn holding a call, the call no longer holds its turn in the window. Until
#: then a call still waiting for its result (pending) is never archived; and this is also
#: the most turns a window over its limit keeps for the sake of tool pairing (see
#: :func:`choose_cut`). Two: a user who interrupts a slow tool once ("hurry up") still gets
#: the late result paired with its call; a second message means the conversation moved on.
SUPERSEDING_TURNS = 2


def safe_cuts(active: Sequence[Event]) -> list[int]:
    """Indexes where the window may be cut without breaking a tool pair: turn starts after
    the first, up to and including the newest turn's start, that

    - do not separate a tool call from its result (which may have come turns later), and
    - do not archive a pending call (no result yet) that is not yet superseded, i.e. that
      has fewer than :data:`SUPERSEDING_TURNS` newer turns after its own turn.

    A result whose call is not in ``active`` (archived earlier) constrains nothing."""
    starts = turn_starts(active)
    cuts = starts[1:]
    if not cuts:
        return []
    # blocked[s] > 0: a cut at s would break a pair; marked as ranges (lo..hi] of event indexes
    blocked = [0] * (len(active) + 2)
    call_at: dict[str | None, int] = {}
    pending: set[int] = set()
    for j, event in enumerate(active):
        if event.type is EventType.TOOL_CALL:
            call_at[event.tool_call_id] = j
            pending.add(j)
        elif event.type is EventType.TOOL_RESULT:
            k = call_at.get(event.tool_call_id)
            if k is not None and k < j:
                pending.discard(k)
                blocked[k + 1] += 1
                blocked[j + 1] -= 1
    for k in pending:
        if not is_superseded(starts, k):
            blocked[k + 1] += 1
    safe: list[int] = []
    depth = 0
    position = 0
    for s in cuts:
        while position <= s:
            depth += blocked[position]
            position += 1
        if depth == 0:
            safe.append(s)
    return safe


def is_superseded(starts: Sequence[int], index: int) -> bool:
    """Whether the event at ``index`` has at least :data:`SUPERSEDING_TURNS` turn starts
    (``starts``, from :func:`~chat_memory.events.turn_starts`) after it."""
    return len(starts) - bisect_right(starts, index) >= SUPERSEDING_TURNS


def choose_cut(active: Sequence[Event], required: int, *, within: int | None = None) -> Cut | None:
    """The cut archiving at least ``required`` events, at the nearest safe point (see
    :func:`safe_cuts`) at or after it. ``within`` is how many the window must lose to be
    within the strategy's limit (``required`` when not given; fewer for a strategy that
    compacts below its trigger, like recursive summarization).

    When no safe point is that far, the furthest safe point, as long as it archives at least
    ``within`` events or leaves at most the newest :data:`SUPERSEDING_TURNS` turns.
    Otherwise (tool results that keep arriving
    a turn late chain every turn to the next, so no cut keeps every pair together) the
    window's bound wins over pairing: the cut falls at the first turn start at or after
    ``required`` or at the start of the :data:`SUPERSEDING_TURNS`-th newest turn, whichever
    comes first. It archives only superseded calls (never a pending call still in its grace
    turns); a late result left behind renders without its call, like the result of a call
    archived while it was pending.

    The bound every strategy gets from this: after a compaction the window is within the
    strategy's limit, or holds at most the newest :data:`SUPERSEDING_TURNS` turns."""
    if required <= 0:
        return None
    candidates = safe_cuts(active)
    later = [c for c in candidates if c >= required]
    if later:
        return Cut.at(active, later[0])
    starts = turn_starts(active)
    best = candidates[-1] if candidates else 0
    if len(starts) > SUPERSEDING_TURNS and best < (required if within is None else within):
        floor = starts[-SUPERSEDING_TURNS]
        if best < floor:
            target = min(required, floor)
            return Cut.at(active, next(s for s in starts if s >= target))
    return Cut.at(active, candidates[-1]) if candidates else None


def compact_target(limit: int, ratio: float) -> int:
    """What a compaction leaves of a ``limit`` (events, turns or tokens) under
    ``compact_to_ratio``: ``floor(ratio × limit)``, at least 1. Below the limit, the window
    grows again for a while with its leading events unchanged, so a provider's prompt cache
    keeps serving them (docs/prompt-caching.md)."""
    # the epsilon keeps 0.7 × 10 at 7 despite binary floating point
    return max(1, math.floor(limit * ratio + 1e-9))


#: The fewest whole turns a compaction leaves when the strategy's limit allows that many: the
#: model then always sees at least the exchange before the current one. ``compact_to_ratio``
#: can ask for less (a turn window of 3 at 0.5 would keep 1 turn); the floor wins over the
#: ratio, never over the limit itself (docs/lean-window.md, "Small windows").
MIN_KEPT_TURNS = 2


def keep_min_turns(active: Sequence[Event], required: int, within: int) -> int:
    """``required`` (events to archive to reach the ratio's target) lowered so that the newest
    :data:`MIN_KEPT_TURNS` turns stay, but never below ``within`` (events to archive to be
    within the strategy's limit): a limit too small for that many turns still wins.

    When a tool pair makes the floor's turn start unsafe, it is the nearest safe cut before
    it that still brings the window within the limit (:func:`choose_cut` would otherwise
    move the cut forward, past the floor); with none, the tool-pair rules win."""
    starts = turn_starts(active)
    if len(starts) <= MIN_KEPT_TURNS:
        return required
    floor = starts[-MIN_KEPT_TURNS]
    if within > floor:
        return required
    target = min(required, floor)
    safe = safe_cuts(active)
    after = next((c for c in safe if c >= target), None)
    if after is not None and after <= floor:
        return target
    before = [c for c in safe if within <= c <= floor]
    return before[-1] if before else target


class StrategySettings(SettingsModel):
    """The settings a strategy adds to :class:`~chat_memory.MemoryConfig`, each described once
    by its pydantic ``Field``: ``title`` (the label), ``description`` (the help text),
    ``gt``/``ge``/``lt``/``le`` (bounds, checked with a message naming the label and the value)
    and ``json_schema_extra=ui(...)`` (canvas hints). Every field needs a default.

    ``MemoryConfig`` accepts them (snake_case or camelCase) when its ``compaction_strategy`` is
    the strategy declaring them, and holds them like its own settings (``config.keep_turns``);
    the canvas shows them for the strategies that read them."""


class Strategy(ABC):
    """A compaction strategy: decides whether a window is over its limit and where to cut.

    A subclass that sets ``name`` registers itself: ``MemoryConfig(compaction_strategy=name)``
    selects it, and the Chat Memory nodes offer it (``label``, listed by ``order``) and show
    the config fields it lists in ``settings`` and those it declares in ``extra_settings``.
    Nothing else in chat-memory needs to know about it.

    Rules every strategy follows by making its cut with :func:`choose_cut`:

    - cuts fall only at turn starts, and the newest turn is never archived;
    - a tool call and its result (even one that came turns later) stay together or leave
      together;
    - a pending tool call (no result yet) is not archived until it is answered or
      superseded: :data:`SUPERSEDING_TURNS` newer turns have started after its turn;
    - a compaction goes down to ``compact_to_ratio`` of the limit (:func:`compact_target`;
      the trigger stays the limit itself), so between compactions the window's leading
      events do not change; but it leaves at least the newest :data:`MIN_KEPT_TURNS` turns
      whenever they are within the limit itself (:func:`keep_min_turns`);
    - the window stays bounded: after a compaction it is within the strategy's limit or
      holds at most the newest :data:`SUPERSEDING_TURNS` turns. Only when tool pairs chain
      every turn to the next (results that keep arriving a turn late) does this bound
      separate a superseded call from its late result.
    """

    #: The value of ``compaction_strategy`` that selects this strategy.
    name: ClassVar[str]
    #: How the canvas lists it.
    label: ClassVar[str]
    #: The :class:`~chat_memory.MemoryConfig` settings this strategy reads beside those it
    #: declares (the canvas shows exactly these and its own for it).
    settings: ClassVar[tuple[str, ...]] = ()
    #: Whether a cut also needs a summary written by a summarizer model.
    summarizes: ClassVar[bool] = False
    #: Whether it ever archives (so the archive cap matters).
    compacts: ClassVar[bool] = True
    #: Settings it adds to :class:`~chat_memory.MemoryConfig` (a :class:`StrategySettings`
    #: subclass), read as ``self.config.<name>``; the canvas shows them for this strategy only.
    extra_settings: ClassVar[type[StrategySettings] | None] = None
    #: Where the canvas and the error messages list it: lower first (the built-ins are 10,
    #: 20…60); ties keep the order of registration.
    order: ClassVar[int] = 100

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            register(cls)

    @classmethod
    def reads(cls, setting: str) -> bool:
        """Whether this strategy reads a config setting: it lists it in ``settings`` or
        declares it in ``extra_settings``."""
        return setting in cls.settings or (
            cls.extra_settings is not None and setting in cls.extra_settings.model_fields
        )

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

    def pressure(self, window: Window) -> float:
        """How full the window is against this strategy's limit (1.0: at the limit). A
        summarizing strategy whose summarizer keeps failing falls back to archiving without a
        new summary once this passes 2 (see :mod:`chat_memory.compaction`)."""
        return 0.0

    def forced_cut(self, window: Window) -> Cut | None:
        """The cut of a forced compaction: every turn but the newest (at the furthest safe
        point), whatever the limit says; None when only the newest turn is there."""
        starts = turn_starts(window.active)
        return choose_cut(window.active, starts[-1]) if len(starts) > 1 else None


def strategy_for(config: MemoryConfig) -> Strategy:
    """The strategy a config selects, built with that config."""
    return strategy_class(config.compaction_strategy)(config)
