"""The request the model gets now, exactly as rendered for Anthropic and OpenAI (token
counts, cache breakpoints marked, compressed tool results shown as their stubs), and the
``conversation_search`` tool the agent has, answering with the same pages the agent sees."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .conversation import ids, require_stored
from .html import badge, esc, hidden, link, table
from .web import InspectorError, Request, Response, json_response

if TYPE_CHECKING:
    from .app import Inspector


def request_page(ins: Inspector, request: Request) -> Response:
    """``/request?id=…&format=anthropic|openai[&raw=1]``: ``raw`` answers the JSON itself
    (``{"system", "messages"}`` for Anthropic, ``{"messages"}`` for OpenAI)."""
    cid, user, app = require_stored(ins, request)
    memory = ins.memory(user, app)
    form = request.get("format") or "anthropic"
    if form not in ("anthropic", "openai"):
        raise InspectorError(400, f"format ({form!r}) must be anthropic or openai")
    where = ids(cid, user, app)
    if form == "anthropic":
        system, messages = memory.to_anthropic(cid)
        data: dict[str, Any] = {"system": system, "messages": messages}
    else:
        data = {"messages": memory.to_openai(cid)}
    if request.get("raw"):
        return json_response(data)
    window = memory.window(cid)
    model = memory.model_window(cid)
    stored = {e.id: e.text() for e in window}
    # a stub is a result whose text the model is shown differs from the stored one
    stubs = {e.text() for e in model if e.id in stored and stored[e.id] != e.text()}
    count = memory.token_counter
    blocks_total = 0
    parts = [
        f"<h1>Request for {esc(cid)} ({'Anthropic' if form == 'anthropic' else 'OpenAI'})</h1>"
    ]
    other = "openai" if form == "anthropic" else "anthropic"
    parts.append(
        '<nav class="pager" aria-label="views">'
        + link("← conversation", "/conversation", where)
        + link(f"as {other}", "/request", {**where, "format": other})
        + link("raw JSON", "/request", {**where, "format": form, "raw": 1})
        + "</nav>"
    )
    rendered: list[str] = []
    if form == "anthropic":
        system_blocks = (
            data["system"]
            if isinstance(data["system"], list)
            else ([{"type": "text", "text": data["system"]}] if data["system"] else [])
        )
        if system_blocks:
            html, tokens = _message("system", system_blocks, stubs, count)
            rendered.append(html)
            blocks_total += tokens
    for message in data["messages"]:
        content = message.get("content")
        if form == "openai":
            blocks = _openai_blocks(message)
        else:
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        html, tokens = _message(message["role"], blocks, stubs, count)
        rendered.append(html)
        blocks_total += tokens
    marks = sum(json.dumps(data).count('"cache_control"') for _ in (0,))
    parts.append(
        table(
            [
                "Messages",
                "Window tokens (stored)",
                "Rendered tokens (estimate)",
                "Cache breakpoints",
                "Stubs",
            ],
            [
                [
                    str(len(data["messages"])),
                    str(sum(e.tokens or 0 for e in model)),
                    str(blocks_total),
                    str(marks),
                    str(len(stubs)),
                ]
            ],
            numeric=(0, 1, 2, 3, 4),
        )
    )
    parts.append(
        '<p class="note">Rendered tokens are counted with the memory\'s token counter over each '
        "block's text (the provider's own count differs a little). A "
        + badge("cache breakpoint", "cache")
        + " marks a <code>cache_control</code> block; a "
        + badge("stub", "stub")
        + " is a tool result the model is shown compressed (<code>compress_tool_results</code>).</p>"
    )
    parts += rendered
    return ins.render(f"Request {cid}", "".join(parts))


def _openai_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("content") is not None:
        kind = "tool_result" if message["role"] == "tool" else "text"
        block: dict[str, Any] = {"type": kind, "text": message["content"]}
        if kind == "tool_result":
            block["tool_use_id"] = message.get("tool_call_id")
        blocks.append(block)
    for call in message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": call["function"]["arguments"],
            }
        )
    return blocks


def _message(
    role: str, blocks: list[dict[str, Any]], stubs: set[str], count: Any
) -> tuple[str, int]:
    total = 0
    shown: list[str] = []
    for block in blocks:
        kind = block.get("type", "text")
        marks = []
        if "cache_control" in block:
            marks.append(badge("cache breakpoint", "cache"))
        if kind == "tool_use":
            text = (
                json.dumps(block.get("input"), ensure_ascii=False)
                if not isinstance(block.get("input"), str)
                else block["input"]
            )
            head = f"tool_use <code>{esc(block.get('name'))}</code> id <code>{esc(block.get('id'))}</code>"
        elif kind == "tool_result":
            content = block.get("content", block.get("text"))
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            head = f"tool_result for <code>{esc(block.get('tool_use_id'))}</code>"
            if text in stubs:
                marks.append(badge("stub", "stub"))
            if block.get("is_error"):
                marks.append(badge("error", "retracted"))
        else:
            text = str(block.get("text", ""))
            head = "text"
        tokens = int(count(text))
        total += tokens
        shown.append(
            f'<div class="block"><span class="muted">{head} · {tokens} tokens</span> '
            f"{' '.join(marks)}<pre>{esc(text)}</pre></div>"
        )
    html = f'<section class="msg"><h3>{esc(role)} <span class="muted">· {total} tokens</span></h3>{"".join(shown)}</section>'
    return html, total


def search_page(ins: Inspector, request: Request) -> Response:
    """``/search?id=…&q=…&page=N&mode=…``: the agent's ``conversation_search`` tool, called
    with those arguments; the text shown is exactly what the model would read."""
    cid, user, app = require_stored(ins, request)
    memory = ins.memory(user, app)
    tool = memory.search_tool(cid)
    keyword = request.get("q")
    page = request.number("page", 1)
    mode = request.get("mode") or "phrase"
    where = ids(cid, user, app)
    modes = "".join(
        f"<option{' selected' if m == mode else ''}>{m}</option>" for m in ("phrase", "all", "any")
    )
    parts = [
        f"<h1>conversation_search of {esc(cid)}</h1>",
        '<nav class="pager">' + link("← conversation", "/conversation", where) + "</nav>",
        '<form class="inline" method="get" action="/search">',
        hidden("id", cid),
        hidden("user", user),
        hidden("app", app),
        f'<label>Keyword <input name="q" value="{esc(keyword or "")}" required></label>',
        f'<label>Match <select name="mode">{modes}</select></label>',
        "<button>Search</button></form>",
        "<details><summary>The tool as the agent has it</summary><pre>"
        + esc(json.dumps(tool.definition(), indent=2, ensure_ascii=False))
        + "</pre></details>",
    ]
    if keyword:
        arguments = {"keyword": keyword, "page": page, "match_mode": mode}
        output = tool.run(arguments)
        parts.append(f"<h2>Tool input</h2><pre>{esc(json.dumps(arguments))}</pre>")
        parts.append(f"<h2>Tool output{' (error)' if output.is_error else ''}</h2>")
        parts.append(f"<pre>{esc(output.text)}</pre>")
        if not output.is_error:
            found = memory.search(cid, keyword, page=page - 1, match_mode=mode)
            pager = []
            if page > 1:
                pager.append(
                    link(
                        "← previous page",
                        "/search",
                        {**where, "q": keyword, "mode": mode, "page": page - 1},
                    )
                )
            if found.has_more:
                pager.append(
                    link(
                        "next page →",
                        "/search",
                        {**where, "q": keyword, "mode": mode, "page": page + 1},
                    )
                )
            parts.append(f'<nav class="pager" aria-label="result pages">{"".join(pager)}</nav>')
    return ins.render(f"Search {cid}", "".join(parts))
