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
