"""Small HTML helpers for the inspector's server-rendered pages: escaping, links, tables and
the page frame (one stylesheet served by the inspector itself: no CDN, no font, no script)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from urllib.parse import urlencode

#: the stylesheet, served at /style.css; readable at 1280x800 and on a phone, visible focus
STYLE = """
:root { color-scheme: light; --fg: #1d2430; --muted: #5b6472; --line: #d6dbe3; --accent: #1f5fbf;
  --bg-soft: #f4f6f9; --warn: #9a3b00; --bad: #a11d2b; --ok: #17663a; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); }
header { background: #14213d; color: #fff; padding: .6rem 1rem; display: flex; flex-wrap: wrap;
  gap: .4rem 1.2rem; align-items: baseline; }
header a { color: #fff; }
header .brand { font-weight: 700; margin-right: 1rem; }
header .mode { margin-left: auto; font-size: .85rem; opacity: .85; }
.skip { position: absolute; left: -9999px; top: .3rem; background: #fff; color: var(--accent);
  padding: .3rem .6rem; z-index: 2; }
.skip:focus { left: .5rem; }
main { padding: 1rem; max-width: 1400px; margin: 0 auto; }
h1 { font-size: 1.35rem; margin: .2rem 0 .8rem; word-break: break-all; }
h2 { font-size: 1.1rem; margin: 1.4rem 0 .5rem; }
a { color: var(--accent); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, summary:focus-visible {
  outline: 3px solid #f2a900; outline-offset: 2px; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; }
th { background: var(--bg-soft); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.scroll { overflow-x: auto; }
pre, code { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { background: var(--bg-soft); padding: .6rem; overflow-x: auto; white-space: pre-wrap;
  word-break: break-word; margin: .3rem 0; }
.badge { display: inline-block; padding: 0 .4rem; border-radius: .6rem; font-size: .78rem;
  border: 1px solid var(--line); background: #fff; white-space: nowrap; }
.b-window { border-color: #4b8; color: var(--ok); }
.b-archived { border-color: #999; color: var(--muted); }
.b-retracted { border-color: var(--bad); color: var(--bad); text-decoration: line-through; }
.b-summary { border-color: #a6f; color: #62a; }
.b-cache { border-color: #f2a900; background: #fff6d6; color: #6b4b00; }
.b-stub { border-color: var(--warn); color: var(--warn); }
.error { color: var(--bad); font-weight: 600; }
.muted { color: var(--muted); }
.note { background: var(--bg-soft); border-left: 4px solid var(--line); padding: .5rem .8rem; margin: .6rem 0; }
form.inline { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin: .5rem 0; }
label { display: flex; flex-direction: column; font-size: .85rem; gap: .15rem; }
input, select, button { font: inherit; padding: .3rem .5rem; }
button { cursor: pointer; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 4px; }
button.danger { background: var(--bad); border-color: var(--bad); }
nav.pager { display: flex; flex-wrap: wrap; gap: .4rem 1rem; margin: .8rem 0; }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
.msg { border: 1px solid var(--line); border-radius: 6px; margin: .5rem 0; padding: .4rem .6rem; }
.msg h3 { font-size: .95rem; margin: 0 0 .3rem; }
.block { border-top: 1px dashed var(--line); padding-top: .3rem; margin-top: .3rem; }
.diff-add { color: var(--ok); } .diff-del { color: var(--bad); }
svg.chart { width: 100%; height: auto; max-width: 1100px; background: #fff; border: 1px solid var(--line); }
@media (max-width: 700px) {
  body { font-size: 14px; } main { padding: .6rem; }
  .cols { grid-template-columns: 1fr; }
  th.opt, td.opt { display: none; }
}
"""


def esc(value: object) -> str:
    """``value`` as HTML text (quotes escaped too: safe inside attributes)."""
    return escape(str(value), quote=True)


def href(path: str, params: Mapping[str, object | None] | None = None) -> str:
    """A same-origin URL with its query string (None values left out), HTML-escaped."""
    query = {k: str(v) for k, v in (params or {}).items() if v is not None and v != ""}
    return esc(path + ("?" + urlencode(query) if query else ""))


def link(text: str, path: str, params: Mapping[str, object | None] | None = None) -> str:
    """An ``<a>`` to an inspector page."""
    return f'<a href="{href(path, params)}">{esc(text)}</a>'


def badge(text: str, kind: str) -> str:
    """A small labelled marker (window, archived, retracted, summary, cache, stub)."""
    return f'<span class="badge b-{esc(kind)}">{esc(text)}</span>'


def table(
    headers: Iterable[str], rows: Iterable[Iterable[str]], numeric: Iterable[int] = ()
) -> str:
    """A table of already-escaped cells; column indexes in ``numeric`` align right."""
    nums = set(numeric)
    head = "".join(
        f'<th scope="col"{" class=num" if i in nums else ""}>{esc(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i in nums else ''}>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def hidden(name: str, value: object | None) -> str:
    """A hidden form field (nothing when ``value`` is None)."""
    if value is None:
        return ""
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def page(title: str, body: str, *, writable: bool, store: str) -> str:
    """A whole page: the frame (navigation, mode, store) around ``body``."""
    mode = "write mode" if writable else "read-only"
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · chat-memory inspector</title>"
        '<link rel="stylesheet" href="/style.css"></head><body>'
        '<a class="skip" href="#main">Skip to content</a>'
        '<header><span class="brand">chat-memory inspector</span>'
        '<nav aria-label="main"><a href="/">Conversations</a> · <a href="/memory">Long-term memory</a>'
        ' · <a href="/compare">Compare</a></nav>'
        f'<span class="mode">{esc(store)} · {mode}</span></header>'
        f'<main id="main">{body}</main></body></html>'
    )
