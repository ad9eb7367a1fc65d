"""Compare: two conversations (typically a conversation and its fork) side by side from the
point they part. Events match when their type, text, tool name, arguments and call id match,
so a fork compares equal to its source up to its fork point whatever ids the store gave."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .. import Event
from .conversation import shown, state_badges
from .html import esc, hidden, link
from .listing import conversation_link, scope_of
from .web import InspectorError, Request, Response

#: at most this many events of each side are shown after the parting point
SHOWN_AFTER = 300

if TYPE_CHECKING:
    from .app import Inspector


def same(a: Event, b: Event) -> bool:
    """Whether two events say the same thing (ids and times aside)."""
    return (
        a.type,
        a.text(),
        a.tool_name,
        a.tool_call_id,
        json.dumps(a.arguments, sort_keys=True),
    ) == (b.type, b.text(), b.tool_name, b.tool_call_id, json.dumps(b.arguments, sort_keys=True))


def parting(left: list[Event], right: list[Event]) -> tuple[int, int]:
    """How many leading events of each history the two share. A fork keeps its source's seqs,
    so the histories are compared seq by seq over the seqs both still hold (the archive cap
    may have dropped more of one than of the other); histories whose seqs do not line up
    (events replayed, not forked) are compared in order."""
    ours = {e.seq: e for e in left}
    theirs = {e.seq: e for e in right}
    agreed = None
    for seq in sorted(set(ours) & set(theirs), key=lambda s: s or 0):
        if not same(ours[seq], theirs[seq]):
            break
        agreed = seq or 0
    if agreed is not None and agreed > 1:
        return (
            sum((e.seq or 0) <= agreed for e in left),
            sum((e.seq or 0) <= agreed for e in right),
        )
    n = 0
    while n < len(left) and n < len(right) and same(left[n], right[n]):
        n += 1
    return n, n


def compare_page(ins: Inspector, request: Request) -> Response:
    """``/compare?a=…&b=…[&user=…&app=…]``."""
    user, app = scope_of(request)
    a, b = request.get("a"), request.get("b")
    form = (
        '<form class="inline" method="get" action="/compare">'
        f"{hidden('user', user)}{hidden('app', app)}"
        f'<label>Conversation <input name="a" value="{esc(a or "")}" required></label>'
        f'<label>Fork <input name="b" value="{esc(b or "")}" required></label>'
        "<button>Compare</button></form>"
    )
    parts = ["<h1>Compare two conversations</h1>", form]
    if a and b:
        memory = ins.memory(user, app)
        sides = []
        for cid in (a, b):
            if memory.stats(cid).version == 0:
                raise InspectorError(404, f"no conversation {cid!r} is stored in this scope")
            sides.append(memory.history(cid))
        left, right = sides
        n, m = parting(left, right)
        seq = left[n - 1].seq if n else 0
        parts.append(
            f"<p>{conversation_link(a, a, user, app)} and {conversation_link(b, b, user, app)} "
            f"agree through seq {seq}; they part after that.</p>"
        )
        columns = []
        for cid, events, kept in ((a, left, n), (b, right, m)):
            rest = events[kept : kept + SHOWN_AFTER]
            more = len(events) - kept - len(rest)
            items = "".join(
                f'<li><span class="muted">seq {e.seq}</span> {state_badges(e)} '
                f"<strong>{esc(e.type.value)}</strong> {shown(e.text())}</li>"
                for e in rest
            )
            tail = f"<p class='muted'>and {more} more</p>" if more > 0 else ""
            columns.append(
                f"<section><h2>{esc(cid)} <span class='muted'>({len(events) - kept} after)</span></h2>"
                f"<ol>{items or '<li>nothing after the parting point</li>'}</ol>{tail}</section>"
            )
        parts.append(f'<div class="cols">{"".join(columns)}</div>')
        parts.append(
            '<nav class="pager">'
            + link("← " + a, "/conversation", {"id": a, "user": user, "app": app})
            + "</nav>"
        )
    return ins.render("Compare", "".join(parts))
