"""The conversations page (by scope, user and tag, newest activity first, a page at a time,
through the store's index) and the search across one user's conversations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import ChatMemoryError
from ..lifecycle import parse_scoped_key
from .html import badge, esc, hidden, href, link, table
from .web import Request, Response

PAGE_SIZE = 50
#: the user-wide search reads at most this many of the user's conversations (newest first)
SEARCH_SCAN = 500
SEARCH_HITS = 3

if TYPE_CHECKING:
    from .app import Inspector


def scope_of(request: Request) -> tuple[str | None, str | None]:
    """The (user, app) of a request's query."""
    return request.get("user"), request.get("app")


def conversation_link(text: str, cid: str, user: str | None, app: str | None) -> str:
    """A link to one conversation's page."""
    return link(text, "/conversation", {"id": cid, "user": user, "app": app})


def conversations_page(ins: Inspector, request: Request) -> Response:
    """``/``: the conversations of a scope (or the unscoped ones), newest activity first."""
    user, app = scope_of(request)
    tag = request.get("tag")
    page = request.number("page", 1)
    size = min(request.number("page_size", PAGE_SIZE), 500)
    memory = ins.memory(user, app)
    form = (
        '<form class="inline" method="get" action="/">'
        f'<label>User <input name="user" value="{esc(user or "")}"></label>'
        f'<label>App <input name="app" value="{esc(app or "")}"></label>'
        f'<label>Tag <input name="tag" value="{esc(tag or "")}"></label>'
        "<button>List</button></form>"
    )
    rows: list[list[str]] = []
    note = ""
    if ins.keeps_lifecycle:
        infos = memory.conversations(tag=tag, page=page, page_size=size)
        more = len(infos) == size
        for info in infos:
            rows.append(
                _row(
                    ins,
                    user,
                    app,
                    info.id,
                    info.title or "",
                    ", ".join(info.tags),
                    str(info.events),
                    info.last_active_at.isoformat(timespec="seconds"),
                )
            )
    else:
        if user or tag:
            note = (
                '<p class="note">This store does not keep the scope and tag index '
                "(the KeepsLifecycle ability) yet: only the unscoped listing is available.</p>"
            )
            more = False
        else:
            note = (
                '<p class="note">This store keeps no activity index (the KeepsLifecycle '
                "ability) yet: every stored conversation is listed sorted by key, not by "
                "activity.</p>"
            )
            ids = ins.store.conversations()
            first = (page - 1) * size
            more = first + size < len(ids)
            for key in ids[first : first + size]:
                # every stored key: a scoped one names its user (and app) and its bare id
                scope, cid = parse_scoped_key(key)
                owner, owner_app = (scope.user, scope.app) if scope else (None, None)
                rows.append(_row(ins, owner, owner_app, cid, "", "", "", ""))
    if not user and ins.keeps_lifecycle:
        note = (
            '<p class="note">Listed here: conversations stored without a user. A user\'s '
            "conversations (<code>memory.for_user(...)</code>) are listed by their user id: "
            "enter it above.</p>"
        )
    heading = f"Conversations of user {user!r}" + (f" in app {app!r}" if app else "")
    title = heading if user else "Conversations"
    body = [f"<h1>{esc(title)}</h1>", form, note]
    if rows:
        body.append(
            table(
                [
                    "Conversation",
                    "Title",
                    "Tags",
                    "Events",
                    "Window tokens",
                    "Archived",
                    "Last active (UTC)",
                    "Last compaction",
                ],
                rows,
                numeric=(3, 4, 5),
            )
        )
    else:
        body.append("<p>No conversations on this page.</p>")
    params = {"user": user, "app": app, "tag": tag}
    pager = []
    if page > 1:
        pager.append(link("← newer", "/", {**params, "page": page - 1}))
    if more:
        pager.append(link("older →", "/", {**params, "page": page + 1}))
    body.append(
        f'<nav class="pager" aria-label="pages">{"".join(pager)} <span>page {page}</span></nav>'
    )
    if user and ins.keeps_lifecycle:
        body.append(
            "<h2>Search this user's conversations</h2>"
            '<form class="inline" method="get" action="/search/user">'
            f"{hidden('user', user)}{hidden('app', app)}"
            '<label>Keyword <input name="q" required></label><button>Search</button></form>'
        )
    return ins.render(title, "".join(body))


def _row(
    ins: Inspector,
    user: str | None,
    app: str | None,
    cid: str,
    title: str,
    tags: str,
    events: str,
    active: str,
) -> list[str]:
    try:
        stats = ins.memory(user, app).stats(cid)
    except ChatMemoryError as exc:
        return [
            conversation_link(cid, cid, user, app),
            esc(title),
            esc(tags),
            esc(events),
            "",
            "",
            esc(active),
            f'<span class="error">{esc(exc)}</span>',
        ]
    error = (
        f'<span class="error" title="{esc(stats.last_compaction_error)}">failed</span>'
        if stats.last_compaction_error
        else badge("ok", "window")
    )
    return [
        conversation_link(cid, cid, user, app),
        esc(title),
        esc(tags),
        esc(events or stats.active_events + stats.archived_events),
        str(stats.window_tokens),
        str(stats.archived_events),
        esc(active),
        error,
    ]


def user_search_page(ins: Inspector, request: Request) -> Response:
    """``/search/user``: a keyword across one user's conversations (newest first, at most
    :data:`SEARCH_SCAN` of them, :data:`SEARCH_HITS` hits shown per conversation)."""
    user, app = scope_of(request)
    keyword = request.get("q")
    if user is None or keyword is None:
        return ins.render("Search", "<h1>Search</h1><p>Give a user and a keyword.</p>")
    memory = ins.memory(user, app)
    found: list[str] = []
    scanned = 0
    page = 1
    while scanned < SEARCH_SCAN:
        infos = memory.conversations(page=page, page_size=100)
        for info in infos:
            scanned += 1
            hits = memory.search(info.id, keyword, page=0, page_size=SEARCH_HITS)
            if hits.total:
                items = "".join(
                    f"<li>seq {h.seq} ({esc(h.type)}{', archived' if h.archived else ''}): "
                    f"{esc(h.content[:200])}</li>"
                    for h in hits.hits
                )
                search = href("/search", {"id": info.id, "user": user, "app": app, "q": keyword})
                found.append(
                    f"<h3>{conversation_link(info.id, info.id, user, app)} "
                    f'<span class="muted">{hits.total} hits</span> '
                    f'<a href="{search}">all hits</a></h3><ul>{items}</ul>'
                )
        if len(infos) < 100:
            break
        page += 1
    summary = f"{len(found)} of {scanned} conversations match {keyword!r}"
    body = f"<h1>Search of user {esc(user)!s}</h1><p>{esc(summary)}</p>" + "".join(found)
    return ins.render("Search", body)
