"""A scripted 50-turn conversation for the framework adapters' agent tests: the user states
facts, asks for order lookups (a tool call) and, late in the conversation, for facts long
archived (the model answers with a ``conversation_search`` call). Both stand-in models (the
LangChain chat model and the OpenAI Agents SDK model) decide with :func:`decide`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TURNS = 50
#: turn -> the earlier turn whose fact the user asks about
RECALL = {30: 2, 49: 10}
LOOKUP = re.compile(r"^Please look up order (\d+)\.$")
ASK = re.compile(r"^What was the code of project (\d+)\?$")


def code(turn: int) -> str:
    """The fact of turn ``turn``: a code no other turn mentions."""
    return f"K{(turn * 7919) % 10007:05d}Q"


def user_line(turn: int) -> str:
    """What the user says at turn ``turn`` (from 0)."""
    if turn in RECALL:
        return f"What was the code of project {RECALL[turn]}?"
    if turn % 4 == 1:
        return f"Please look up order {1000 + turn}."
    return f"Remember: project {turn} has code {code(turn)}."


def lookup_order(order_id: int) -> str:
    """The test's own tool."""
    return f"Order {order_id} shipped on day {order_id % 28 + 1}."


@dataclass(frozen=True)
class Decision:
    """A tool call (``tool`` and ``arguments``) or a text reply."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] | None = None


def decide(last_kind: str, last_text: str) -> Decision:
    """The model's next move from the last thing it was shown (``user`` or ``tool``)."""
    if last_kind == "tool":
        return Decision(text=f"Here is what I found: {last_text[:400]}")
    if m := LOOKUP.match(last_text):
        return Decision(tool="lookup_order", arguments={"order_id": int(m.group(1))})
    if m := ASK.match(last_text):
        return Decision(
            tool="conversation_search", arguments={"keyword": f"project {m.group(1)} has code"}
        )
    return Decision(text="Noted.")
