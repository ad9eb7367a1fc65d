"""One conversation's page: its numbers, the chart of window tokens and cache-servable share
per turn, the compaction records, and the timeline of every event (window, archived,
retracted, summary; a tool call and its result as one pair)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .. import CompactionRecord, Event, EventType
from .chart import series, svg, turn_starts
from .html import badge, esc, link, table
from .listing import scope_of
from .web import InspectorError, Request, Response

#: turns per timeline page (the newest page is shown first)
TURNS_PER_PAGE = 50
#: longer contents are cut in the timeline (the request page shows them whole)
SHOWN_CHARS = 600

if TYPE_CHECKING:
    from .app import Inspector


def conversation_id(request: Request) -> str:
    """The ``id`` field (400 when missing)."""
    cid = request.query.get("id") if request.method == "GET" else request.form.get("id")
    if not cid:
        raise InspectorError(400, "id (the conversation) is required")
    return cid


def require_stored(ins: Inspector, request: Request) -> tuple[str, str | None, str | None]:
    """The conversation of the request and its scope; 404 when nothing is stored under it."""
    cid = conversation_id(request)
    user, app = scope_of(request)
    if ins.memory(user, app).stats(cid).version == 0:
        raise InspectorError(404, f"no conversation {cid!r} is stored in this scope")
    return cid, user, app


def ids(cid: str, user: str | None, app: str | None) -> dict[str, str | None]:
    """The query fields naming a conversation."""
    return {"id": cid, "user": user, "app": app}


def conversation_page(ins: Inspector, request: Request) -> Response:
    """``/conversation?id=…[&user=…&app=…][&tpage=N]``."""
    cid, user, app = require_stored(ins, request)
    memory = ins.memory(user, app)
    stats = memory.stats(cid)
    history = memory.history(cid, include_retracted=True)
    records = memory.compactions(cid)
    where = ids(cid, user, app)
    scope = f" · user {user}" + (f" · app {app}" if app else "") if user else ""
    parts = [f"<h1>{esc(cid)}</h1><p class='muted'>{esc(scope.strip(' ·'))}</p>"]
    error = (
        f'<span class="error">{esc(stats.last_compaction_error)}</span>'
        if stats.last_compaction_error
        else "none"
    )
    parts.append(
        table(
            [
                "Window events",
                "Archived",
                "Turns",
                "Window tokens",
                "Version",
                "Last compaction error",
            ],
            [
                [
                    str(stats.active_events),
                    str(stats.archived_events),
                    str(stats.turns),
                    str(stats.window_tokens),
                    str(stats.version),
                    error,
                ]
            ],
            numeric=(0, 1, 2, 3, 4),
        )
    )
    nav = [
        link("Request (Anthropic)", "/request", {**where, "format": "anthropic"}),
        link("Request (OpenAI)", "/request", {**where, "format": "openai"}),
        link("conversation_search", "/search", where),
        link("Compare with another", "/compare", {"a": cid, "user": user, "app": app}),
    ]
    if ins.writable:
        nav.append(link("Force a compaction…", "/confirm", {**where, "action": "compact"}))
        nav.append(link("Forget this conversation…", "/confirm", {**where, "action": "forget"}))
    parts.append(f'<nav class="pager" aria-label="views">{"".join(nav)}</nav>')
    data = series([e for e in history], records)
    parts.append("<h2>Window tokens and cache-servable share per turn</h2>")
    parts.append(svg(data))
    cut = (
        f" The store keeps the newest 50 compaction records: turns before {data.first_turn} are "
        "not charted."
        if data.first_turn > 1
        else ""
    )
    parts.append(
        '<p class="note">Rebuilt from the history and the compaction records: a compaction is '
        "placed after the turn whose rebuilt window had its tokens before (else the last turn "
        "started before it); a turn's request is cache-servable up "
        "to the previous request's tail when no compaction ran in between, else up to the "
        f"system prompt (and the summary when it did not change).{cut}</p>"
    )
    parts.append(_records(records))
    parts.append(_timeline(history, request, where))
    return ins.render(cid, "".join(parts))


def _records(records: list[CompactionRecord]) -> str:
    if not records:
        return "<h2>Compactions</h2><p>No compaction has run.</p>"
    rows = [
        [
            esc(r.at.isoformat(timespec="seconds")),
            esc(r.strategy) + (" " + badge("forced", "stub") if r.forced else ""),
            str(r.archived_events),
            str(r.archived_through_seq),
            f"{r.tokens_before} → {r.tokens_after}",
            esc(r.summarizer or ""),
            "" if r.summarizer_seconds is None else f"{r.summarizer_seconds:.2f} s",
            (badge("fallback", "stub") + " " + esc(r.reason or "")) if r.fallback else "",
        ]
        for r in reversed(records)
    ]
    return "<h2>Compactions (newest first)</h2>" + table(
        [
            "At (UTC)",
            "Strategy",
            "Archived",
            "Through seq",
            "Tokens",
            "Summarizer",
            "Took",
            "Fallback",
        ],
        rows,
        numeric=(2, 3),
    )


def state_badges(event: Event) -> str:
    """Where an event stands: window, archived, retracted, summary."""
    marks = []
    if event.retracted:
        marks.append(badge("retracted", "retracted"))
    elif event.archived:
        marks.append(badge("archived", "archived"))
    else:
        marks.append(badge("window", "window"))
    if event.type is EventType.SUMMARY:
        marks.append(badge("summary", "summary"))
    return " ".join(marks)


def shown(text: str) -> str:
    """Content cut for the timeline."""
    return esc(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…")


def _timeline(history: list[Event], request: Request, where: dict[str, str | None]) -> str:
    starts = turn_starts(history)
    pages = max(1, -(-len(starts) // TURNS_PER_PAGE))
    number = min(request.number("tpage", pages), pages)
    first_turn = (number - 1) * TURNS_PER_PAGE
    lo = 0 if number == 1 or not starts else starts[first_turn]
    last = first_turn + TURNS_PER_PAGE
    hi = len(history) if last >= len(starts) else starts[last]
    chunk = history[lo:hi]
    results: dict[str, Event] = {
        e.tool_call_id: e for e in chunk if e.type is EventType.TOOL_RESULT and e.tool_call_id
    }
    paired: set[str] = set()
    turn_at = {i: n + 1 for n, i in enumerate(starts)}
    rows: list[list[str]] = []
    for offset, event in enumerate(chunk):
        turn = turn_at.get(lo + offset)
        label = f"turn {turn}" if turn else ""
        if event.type is EventType.TOOL_RESULT and event.tool_call_id in paired:
            continue
        if event.type is EventType.TOOL_CALL and event.tool_call_id in results:
            result = results[event.tool_call_id]
            paired.add(event.tool_call_id)
            args = json.dumps(event.arguments or {}, ensure_ascii=False)
            error = " " + badge("error", "retracted") if result.is_error else ""
            content = (
                f"<strong>{esc(event.tool_name or '')}</strong>(<code>{shown(args)}</code>)"
                f"<br>→{error} {shown(result.text())}"
            )
            rows.append(
                [
                    esc(label),
                    f"{event.seq}+{result.seq}",
                    state_badges(event),
                    "tool call + result",
                    content,
                    str((event.tokens or 0) + (result.tokens or 0)),
                ]
            )
            continue
        rows.append(
            [
                esc(label),
                str(event.seq),
                state_badges(event),
                esc(event.type.value),
                shown(event.text()),
                str(event.tokens or 0),
            ]
        )
    pager = []
    if number > 1:
        pager.append(link("← older turns", "/conversation", {**where, "tpage": number - 1}))
    if number < pages:
        pager.append(link("newer turns →", "/conversation", {**where, "tpage": number + 1}))
    nav = f'<nav class="pager" aria-label="timeline pages">{"".join(pager)} <span>page {number} of {pages}</span></nav>'
    dropped = ""
    if history and (history[0].seq or 1) > 1:
        dropped = (
            f'<p class="note">The archive cap (<code>max_archived_events</code>) dropped the '
            f"events before seq {history[0].seq}: turns are counted from the oldest kept.</p>"
        )
    return (
        f"<h2>Timeline ({len(history)} events, {len(starts)} turns)</h2>"
        + dropped
        + nav
        + table(["Turn", "Seq", "State", "Type", "Content", "Tokens"], rows, numeric=(5,))
        + nav
    )
