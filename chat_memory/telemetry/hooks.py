"""The hooks the engine, the compactor and the memory tool carry: decorators and wrappers that
cost one :func:`~chat_memory.telemetry.switch.current` call while telemetry is off (see
:mod:`chat_memory.telemetry`)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .instruments import Instruments, capture_content, failed
from .switch import current

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..backends.base import CompactionPlan, Snapshot

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Operation:
    """What one decorated method reports: its span's name and fixed attributes, the
    attributes its arguments and its result give."""

    name: str
    fixed: dict[str, Any]
    #: whether the method's first argument is a conversation id
    conversation: bool
    before: Callable[[tuple[Any, ...], dict[str, Any], bool], dict[str, Any]]
    after: Callable[[Instruments, Span, Any, bool], None]


def traced(operation: _Operation) -> Callable[[F], F]:
    """Decorate a method ``(self, conversation_id, …)`` (sync or ``async def``) to run under
    ``operation``'s span, the current span for what it calls."""

    def decorate(method: F) -> F:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def awrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                instruments = current()
                if instruments is None:
                    return await method(self, *args, **kwargs)
                with _Current(instruments, operation, args, kwargs) as scope:
                    result = await method(self, *args, **kwargs)
                    scope.finish(result)
                    return result

            return cast(F, awrapper)

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            instruments = current()
            if instruments is None:
                return method(self, *args, **kwargs)
            with _Current(instruments, operation, args, kwargs) as scope:
                result = method(self, *args, **kwargs)
                scope.finish(result)
                return result

        return cast(F, wrapper)

    return decorate


class _Current:
    """A span made current for the length of a ``with`` (never across a generator's yield)."""

    def __init__(
        self,
        instruments: Instruments,
        operation: _Operation,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.instruments = instruments
        self.operation = operation
        self.capture = capture_content()
        conversation_id = (
            (args[0] if args else kwargs.get("conversation_id")) if operation.conversation else None
        )
        nothing: dict[str, Any] = {}
        given = _guarded(operation.before, nothing, args, kwargs, self.capture)
        attributes = {**operation.fixed, **given}
        self.span = instruments.span(operation.name, conversation_id, **attributes)

    def __enter__(self) -> _Current:
        from opentelemetry import context, trace

        self.token = context.attach(trace.set_span_in_context(self.span))
        return self

    def finish(self, result: Any) -> None:
        _guarded(self.operation.after, None, self.instruments, self.span, result, self.capture)

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        from opentelemetry import context

        context.detach(self.token)
        if exc is not None:
            failed(self.span, exc)
        self.span.end()


def _guarded(hook: Callable[..., T], otherwise: T, *args: Any) -> T:
    """``hook(*args)``, or ``otherwise`` when it raises: reading an odd argument or result
    for a span's attributes must never fail the operation (the memory tool never raises)."""
    try:
        return hook(*args)
    except Exception:
        log.debug("chat-memory: a telemetry hook failed", exc_info=True)
        return otherwise


def _nothing_before(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> dict[str, Any]:
    return {}


def _add_before(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> dict[str, Any]:
    events = args[1] if len(args) > 1 else kwargs.get("events")
    if events is None or hasattr(events, "type"):  # one Event
        events = [events] if events is not None else []
    elif not isinstance(events, (list, tuple)):
        return {}  # an iterator: leave it to the method, which reads it once
    attributes: dict[str, Any] = {"chat_memory.events.count": len(events)}
    if capture:
        attributes["chat_memory.events.content"] = [str(getattr(e, "content", "")) for e in events]
    return attributes


def _add_after(instruments: Instruments, span: Span, stored: Any, capture: bool) -> None:
    span.set_attribute("chat_memory.events.stored", len(stored))


def _window_after(instruments: Instruments, span: Span, window: Any, capture: bool) -> None:
    tokens = sum(e.tokens or 0 for e in window)
    instruments.window_tokens.record(tokens)
    span.set_attributes(
        {"chat_memory.window.events": len(window), "chat_memory.window.tokens": tokens}
    )


def _search_before(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> dict[str, Any]:
    query = args[1] if len(args) > 1 else kwargs.get("query")
    mode = getattr(query, "match_mode", "")
    attributes: dict[str, Any] = {
        "chat_memory.search.match_mode": str(getattr(mode, "value", mode)),
        "chat_memory.search.limit": int(getattr(query, "limit", 0)),
        "chat_memory.search.offset": int(getattr(query, "offset", 0)),
    }
    if capture:
        attributes["gen_ai.retrieval.query.text"] = str(getattr(query, "keyword", ""))
    return attributes


def _search_after(instruments: Instruments, span: Span, page: Any, capture: bool) -> None:
    span.set_attributes(
        {"chat_memory.search.hits": len(page.hits), "chat_memory.search.total": page.total}
    )


def _tool_before(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> dict[str, Any]:
    arguments = args[0] if args else kwargs.get("arguments")
    attributes: dict[str, Any] = {}
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        attributes["chat_memory.memory.command"] = arguments["command"][:32]
    if capture:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
        attributes["gen_ai.tool.call.arguments"] = text
    return attributes


def _tool_after(instruments: Instruments, span: Span, output: Any, capture: bool) -> None:
    span.set_attribute("chat_memory.tool.is_error", bool(output.is_error))
    if output.is_error:
        span.set_attribute("error.type", "tool_error")
    if capture:
        span.set_attribute("gen_ai.tool.call.result", output.text)


ADD = _Operation("chat_memory.add", {}, True, _add_before, _add_after)
WINDOW = _Operation("chat_memory.window", {}, True, _nothing_before, _window_after)
SEARCH = _Operation(
    "chat_memory.search",
    {"gen_ai.operation.name": "retrieval"},
    True,
    _search_before,
    _search_after,
)
MEMORY_TOOL = _Operation(
    "chat_memory.memory_tool",
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "memory"},
    False,
    _tool_before,
    _tool_after,
)


def traced_compaction(method: F) -> F:
    """Decorate ``Compactor.compact(self, cid, snapshot, …)`` so that the steps it returns run
    under a ``chat_memory.compact`` span (see :meth:`Instruments.compaction`)."""

    @functools.wraps(method)
    def wrapper(self: Any, conversation_id: str, *args: Any, **kwargs: Any) -> Any:
        steps = method(self, conversation_id, *args, **kwargs)
        instruments = current()
        if instruments is None:
            return steps
        forced = bool(kwargs.get("force", False))
        return instruments.compaction(steps, conversation_id, self.strategy.name, forced)

    return cast(F, wrapper)


def watched_planner(
    conversation_id: str, planner: Callable[[Snapshot], CompactionPlan | None]
) -> Callable[[Snapshot], CompactionPlan | None]:
    """``planner`` (a compaction the store applies in its append's write) as is when telemetry
    is off; on, a planner that remembers its last plan for :func:`store_compacted`."""
    instruments = current()
    if instruments is None:
        return planner
    return _WatchedPlanner(instruments, conversation_id, planner)


def store_compacted(planner: Callable[[Snapshot], CompactionPlan | None], applied: bool) -> None:
    """Report the compaction a store applied with a :func:`watched_planner` (the last plan it
    made: a store retrying its write plans again)."""
    if applied and isinstance(planner, _WatchedPlanner) and planner.plan is not None:
        planner.report(planner.plan)


class _WatchedPlanner:
    """A store-side compaction's planner that keeps its last plan and when it made it."""

    def __init__(
        self,
        instruments: Instruments,
        conversation_id: str,
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> None:
        self.instruments = instruments
        self.conversation_id = conversation_id
        self.planner = planner
        self.plan: CompactionPlan | None = None
        self.planned_at = 0

    def __call__(self, snapshot: Snapshot) -> CompactionPlan | None:
        self.planned_at = time.time_ns()
        self.plan = self.planner(snapshot)
        return self.plan

    def report(self, plan: CompactionPlan) -> None:
        if plan.record is None:
            return
        # the compaction ran inside the store's write, from its planning to now
        span = self.instruments.tracer.start_span("chat_memory.compact", start_time=self.planned_at)
        if capture_content():
            span.set_attribute("gen_ai.conversation.id", self.conversation_id)
        self.instruments.compacted(span, plan.record)
        span.end()


__all__ = [
    "ADD",
    "MEMORY_TOOL",
    "SEARCH",
    "WINDOW",
    "store_compacted",
    "traced",
    "traced_compaction",
    "watched_planner",
]
