"""Long-term memory pages: the namespaces of the store (users' own ones shown with their
scope), a namespace's files, and a file's kept versions with the diff of each against the one
before (restoring one is a write action, behind its confirmation)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from .. import ChatMemoryError, ConfigurationError
from ..lifecycle import is_scoped, parse_scoped_key
from ..longterm import MemoryFiles, long_term_memory
from .html import esc, link, table
from .web import InspectorError, Request, Response

if TYPE_CHECKING:
    from .app import Inspector


def files_of(ins: Inspector, name: str) -> MemoryFiles:
    """The files of a namespace as the store names it (a user's under its scope's name)."""
    if is_scoped(name):
        scope, bare = parse_scoped_key(name)
        if scope is None:
            raise InspectorError(400, f"namespace ({name!r}) is not a valid scoped name")
        return long_term_memory(ins.store, bare, user=scope.user, app=scope.app)
    return long_term_memory(ins.store, name)


def _label(name: str) -> str:
    if not is_scoped(name):
        return name
    scope, bare = parse_scoped_key(name)
    if scope is None:
        return name
    return f"{bare} (user {scope.user}" + (f", app {scope.app})" if scope.app else ")")


def namespaces_page(ins: Inspector, request: Request) -> Response:
    """``/memory``: every namespace that holds files."""
    try:
        names = long_term_memory(ins.store, "default").namespaces()
    except ConfigurationError as exc:
        return ins.render("Long-term memory", f"<h1>Long-term memory</h1><p>{esc(exc)}</p>")
    rows = [[link(_label(n), "/memory/namespace", {"ns": n})] for n in names]
    body = "<h1>Long-term memory</h1>" + (
        table(["Namespace"], rows) if rows else "<p>No namespace holds files.</p>"
    )
    return ins.render("Long-term memory", body)


def namespace_page(ins: Inspector, request: Request) -> Response:
    """``/memory/namespace?ns=…``: the namespace's files."""
    name = _required(request, "ns")
    files = files_of(ins, name)
    rows = [
        [link(e.path, "/memory/file", {"ns": name, "path": e.path}), str(e.size), str(e.revision)]
        for e in files.files()
    ]
    body = f"<h1>{esc(_label(name))}</h1>" + (
        table(["Path", "Bytes", "Revision"], rows, numeric=(1, 2)) if rows else "<p>No files.</p>"
    )
    return ins.render(_label(name), body)


def file_page(ins: Inspector, request: Request) -> Response:
    """``/memory/file?ns=…&path=…``: the content and every kept version, with diffs."""
    name, path = _required(request, "ns"), _required(request, "path")
    files = files_of(ins, name)
    try:
        current: str | None = files.read(path)
    except ChatMemoryError:
        current = None
    versions = files.versions(path)
    parts = [
        f"<h1>{esc(path)}</h1><p class='muted'>{esc(_label(name))}</p>",
        '<nav class="pager">' + link("← namespace", "/memory/namespace", {"ns": name}) + "</nav>",
        "<h2>Current content</h2>",
        f"<pre>{esc(current)}</pre>" if current is not None else "<p>Deleted.</p>",
        f"<h2>Versions ({len(versions)}, newest first)</h2>",
    ]
    previous: list[str] = []
    shown: list[str] = []
    for version in versions:
        lines = [] if version.content is None else version.content.splitlines()
        diff = difflib.unified_diff(
            previous, lines, "before", f"revision {version.revision}", lineterm=""
        )
        rendered = "\n".join(
            f'<span class="diff-add">{esc(line)}</span>'
            if line.startswith("+")
            else f'<span class="diff-del">{esc(line)}</span>'
            if line.startswith("-")
            else esc(line)
            for line in diff
        )
        what = "deleted" if version.content is None else f"{len(version.content.encode())} bytes"
        action = ""
        if ins.writable and version.content is not None and version.content != current:
            action = " " + link(
                "Restore this version…",
                "/confirm",
                {"action": "restore", "ns": name, "path": path, "revision": version.revision},
            )
        shown.append(
            f"<h3>Revision {version.revision} · {version.created_at:%Y-%m-%d %H:%M:%S} UTC · "
            f"{what}{action}</h3><pre>{rendered or '(no change)'}</pre>"
        )
        previous = lines
    parts += reversed(shown)
    return ins.render(path, "".join(parts))


def _required(request: Request, name: str) -> str:
    value = request.get(name)
    if value is None:
        raise InspectorError(400, f"{name} is required")
    return value
