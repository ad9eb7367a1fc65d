"""The write actions (``--write`` only): force a compaction, forget a conversation, restore a
long-term version. Each is a GET confirmation page whose form POSTs the action with the CSRF
token; the POST is checked by :class:`~chat_memory.inspector.app.Inspector` first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .conversation import ids, require_stored
from .html import esc, hidden, link
from .listing import scope_of
from .longterm import files_of
from .web import InspectorError, Request, Response

ACTIONS = ("compact", "forget", "restore")

if TYPE_CHECKING:
    from .app import Inspector


def _action(request: Request) -> str:
    action = request.get("action") or ""
    if action not in ACTIONS:
        raise InspectorError(400, f"action ({action!r}) must be one of {', '.join(ACTIONS)}")
    return action


def confirm_page(ins: Inspector, request: Request) -> Response:
    """``/confirm?action=…&…``: what the action will do, and the button that does it."""
    if not ins.writable:
        raise InspectorError(403, "the inspector is read-only (start it with --write)")
    action = _action(request)
    fields = hidden("csrf", ins.csrf) + hidden("action", action)
    if action == "restore":
        ns, path, revision = request.get("ns"), request.get("path"), request.get("revision")
        if not (ns and path and revision):
            raise InspectorError(400, "restore needs ns, path and revision")
        what = f"Restore {path} of namespace {ns} to revision {revision} (a new version)."
        fields += hidden("ns", ns) + hidden("path", path) + hidden("revision", revision)
        back = link("Cancel", "/memory/file", {"ns": ns, "path": path})
        danger = ""
    else:
        cid, user, app = require_stored(ins, request)
        stats = ins.memory(user, app).stats(cid)
        fields += hidden("id", cid) + hidden("user", user) + hidden("app", app)
        back = link("Cancel", "/conversation", ids(cid, user, app))
        if action == "compact":
            what = (
                f"Force a compaction of {cid}: archive every turn but the newest "
                f"({stats.active_events} events in the window now)."
            )
            danger = ""
        else:
            what = (
                f"Forget {cid}: erase its {stats.active_events} window and "
                f"{stats.archived_events} archived events, summaries and records. This cannot be undone."
            )
            danger = ' class="danger"'
    body = (
        f"<h1>Confirm</h1><p>{esc(what)}</p>"
        f'<form method="post" action="/action">{fields}'
        f"<button{danger}>Yes, {esc(action)}</button> {back}</form>"
    )
    return ins.render("Confirm", body)


def action_post(ins: Inspector, request: Request) -> Response:
    """``POST /action``: run a confirmed action and show what it did."""
    action = _action(request)
    if action == "restore":
        ns, path, revision = request.get("ns"), request.get("path"), request.number("revision", 0)
        if not (ns and path):
            raise InspectorError(400, "restore needs ns and path")
        message = files_of(ins, ns).restore(path, revision)
        back = link("Back to the file", "/memory/file", {"ns": ns, "path": path})
    else:
        cid = request.form.get("id") or ""
        user, app = scope_of(request)
        memory = ins.memory(user, app)
        if action == "compact":
            result = memory.compact(cid, force=True)
            message = (
                f"{result.strategy}: archived {result.archived_events} events"
                if result.compacted
                else f"{result.strategy}: nothing to compact"
            )
            back = link("Back to the conversation", "/conversation", ids(cid, user, app))
        else:
            receipt = memory.forget(conversation=cid) if ins.keeps_lifecycle else None
            if receipt is None:
                memory.clear(cid)
                message = f"Cleared {cid} (this store has no erasure receipt)."
            else:
                message = f"Forgot {cid}: {receipt.total} items erased."
            back = link("Back to the conversations", "/", {"user": user, "app": app})
    return ins.render("Done", f"<h1>Done</h1><p>{esc(message)}</p><p>{back}</p>")
