"""Small builders shared by the tests."""

from __future__ import annotations

import itertools

from chat_memory import Event

_counter = itertools.count()


def turn(text: str = "hello", *, tool: bool = False, reply: str | None = None) -> list[Event]:
    """A user message, optionally a tool call and its result, and an assistant reply."""
    events = [Event.user(text)]
    if tool:
        call_id = f"call-{next(_counter)}"
        events += [
            Event.tool_call("lookup", {"q": text}, call_id=call_id),
            Event.tool_result(call_id, f"result for {text}", name="lookup"),
        ]
    events.append(Event.assistant(reply if reply is not None else f"reply to {text}"))
    return events


def fixed_tokens(text: str) -> int:
    """A token counter whose numbers a test can predict: one token per word."""
    return len(text.split())


def seqs(events: list[Event]) -> list[int]:
    return [e.seq or 0 for e in events]


def check_cut(active, index: int, strategy) -> None:
    """The rules a cut of ``active`` at ``index`` (archive ``active[:index]``) made by
    ``strategy`` must follow (docs/tool-pairs.md):

    - it falls at a turn start and never archives the newest turn;
    - a pending call (no result in ``active``) is archived only when superseded;
    - it separates a call from its result only as the bound's last resort: the call is
      superseded, and no cut that keeps every pair together brings the window within the
      strategy's limit or down to the newest ``SUPERSEDING_TURNS`` turns.
    """
    from chat_memory.events import EventType, Window, turn_starts
    from chat_memory.strategies import SUPERSEDING_TURNS, is_superseded, safe_cuts

    starts = turn_starts(active)
    assert index in starts[1:], f"cut at {index} is not a turn start after the first ({starts})"
    results = {e.tool_call_id for e in active if e.type is EventType.TOOL_RESULT}
    archived_calls = [(i, e) for i, e in enumerate(active[:index]) if e.type is EventType.TOOL_CALL]
    for i, call in archived_calls:
        if call.tool_call_id not in results:
            assert is_superseded(starts, i), (
                f"pending call {call.tool_call_id!r} archived before it was superseded"
            )
    kept_results = {e.tool_call_id for e in active[index:] if e.type is EventType.TOOL_RESULT}
    separated = [(i, c) for i, c in archived_calls if c.tool_call_id in kept_results]
    if separated:
        assert all(is_superseded(starts, i) for i, _ in separated), (
            "a cut separated a call still in its grace turns"
        )
        for s in safe_cuts(active):
            rest = tuple(active[s:])
            within = strategy.plan(Window(active=rest)) is None
            assert not within and len(turn_starts(rest)) > SUPERSEDING_TURNS, (
                f"the cut at {index} separated a tool pair although the safe cut at {s} would do"
            )
