"""Validators of provider requests, written from the providers' documented rules.

``validate_anthropic_request(system, messages)`` checks a Messages API request
(platform.claude.com docs: "Messages", "Handle tool calls", "Prompt caching");
``validate_openai_messages(messages)`` checks Chat Completions ``messages`` (the API
reference and its 400 errors, e.g. "messages with role 'tool' must be a response to a
preceding message with 'tool_calls'"). Each raises ``AssertionError`` with the reason and the
path of the offending part. Where a rule is ours and stricter than the provider's, it says so."""

from __future__ import annotations

import json
import re
from typing import Any

ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # Anthropic: tool_use.id pattern
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # tool names (Anthropic and OpenAI function names)
OPENAI_MAX_ID = 40  # OpenAI: "string too long. Expected a string with maximum length 40"
MAX_BREAKPOINTS = 4  # Anthropic: at most 4 blocks with cache_control per request
CACHEABLE = {"text", "image", "document", "tool_use", "tool_result", "search_result"}
BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "title", "context", "citations", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
}
USER_BLOCKS = {"text", "image", "document", "tool_result"}
ASSISTANT_BLOCKS = {"text", "tool_use"}


def _fail(where: str, why: str) -> None:
    raise AssertionError(f"{where}: {why}")


def _check(condition: bool, where: str, why: str) -> None:
    if not condition:
        _fail(where, why)


def _cache_control(block: dict[str, Any], where: str) -> int:
    if "cache_control" not in block:
        return 0
    _check(
        block.get("type") in CACHEABLE,
        where,
        f"a {block.get('type')!r} block cannot carry cache_control",
    )
    value = block["cache_control"]
    _check(
        isinstance(value, dict) and value.get("type") == "ephemeral",
        where,
        f"cache_control ({value!r}) must be {{'type': 'ephemeral'}}",
    )
    _check(
        set(value) <= {"type", "ttl"} and value.get("ttl", "5m") in ("5m", "1h"),
        where,
        f"cache_control ({value!r}) has unknown keys or ttl",
    )
    return 1


def _text_block(block: dict[str, Any], where: str) -> None:
    text = block.get("text")
    _check(isinstance(text, str), where, "text block without a string 'text'")
    _check(text.strip() != "", where, "text content blocks must contain non-whitespace text")


def _block(block: Any, where: str, allowed: set[str]) -> int:
    _check(isinstance(block, dict), where, f"a content block must be an object, got {block!r}")
    kind = block.get("type")
    _check(
        kind in allowed,
        where,
        f"block type {kind!r} is not allowed here (allowed: {sorted(allowed)})",
    )
    extra = set(block) - BLOCK_KEYS.get(kind, set(block))
    _check(not extra, where, f"unknown fields {sorted(extra)} on a {kind} block")
    if kind == "text":
        _text_block(block, where)
    elif kind == "tool_use":
        _check(
            isinstance(block.get("id"), str) and bool(ID.match(block["id"])),
            where,
            f"tool_use.id ({block.get('id')!r}) must match {ID.pattern}",
        )
        _check(
            isinstance(block.get("name"), str) and bool(NAME.match(block["name"])),
            where,
            f"tool_use.name ({block.get('name')!r}) must match {NAME.pattern}",
        )
        _check(
            isinstance(block.get("input"), dict),
            where,
            f"tool_use.input ({block.get('input')!r}) must be an object",
        )
    elif kind == "tool_result":
        _check(
            isinstance(block.get("tool_use_id"), str) and bool(ID.match(block["tool_use_id"])),
            where,
            f"tool_result.tool_use_id ({block.get('tool_use_id')!r}) must match {ID.pattern}",
        )
        _check(
            isinstance(block.get("is_error", False), bool),
            where,
            "tool_result.is_error must be a boolean",
        )
        content = block.get("content", "")
        if isinstance(content, list):
            for k, inner in enumerate(content):
                _check(
                    isinstance(inner, dict)
                    and inner.get("type") in {"text", "image", "document", "search_result"},
                    f"{where}.content[{k}]",
                    f"tool_result content block {inner!r} is not text/image/document",
                )
                if inner.get("type") == "text":
                    _text_block(inner, f"{where}.content[{k}]")
        else:
            _check(
                isinstance(content, str),
                where,
                f"tool_result.content ({content!r}) must be a string or a list of blocks",
            )
    return _cache_control(block, where)


def validate_anthropic_request(
    system: Any, messages: Any, tools: list[dict[str, Any]] | None = None
) -> None:
    """Raise AssertionError unless ``system`` and ``messages`` form a valid Messages API request."""
    breakpoints = 0
    if isinstance(system, list):
        for i, block in enumerate(system):
            breakpoints += _block(block, f"system[{i}]", {"text"})
    else:
        _check(
            system is None or isinstance(system, str),
            "system",
            f"must be a string or a list of text blocks, got {type(system).__name__}",
        )
    for i, tool in enumerate(tools or []):
        breakpoints += 1 if "cache_control" in tool else 0
        _check(
            bool(NAME.match(str(tool.get("name", "")))),
            f"tools[{i}]",
            f"tool name ({tool.get('name')!r}) must match {NAME.pattern}",
        )

    _check(
        isinstance(messages, list) and len(messages) > 0,
        "messages",
        "at least one message is required",
    )
    _check(
        messages[0].get("role") == "user",
        "messages[0]",
        f"the first message must use the user role, got {messages[0].get('role')!r}",
    )
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        _check(
            isinstance(message, dict) and set(message) <= {"role", "content"},
            where,
            f"a message has only role and content, got {message!r}",
        )
        role = message.get("role")
        _check(role in ("user", "assistant"), where, f"role ({role!r}) must be user or assistant")
        if i:
            _check(
                role != messages[i - 1]["role"],
                where,
                "roles must alternate between user and assistant",
            )
        content = message.get("content")
        if isinstance(content, str):
            _check(content.strip() != "", where, "text content must contain non-whitespace text")
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
        else:
            _check(
                isinstance(content, list) and len(content) > 0,
                where,
                "content must be a non-empty string or list of blocks",
            )
            blocks = content
            for k, block in enumerate(blocks):
                breakpoints += _block(
                    block,
                    f"{where}.content[{k}]",
                    USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS,
                )
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        previous = messages[i - 1]["content"] if i else []
        called = (
            [b.get("id") for b in previous if isinstance(b, dict) and b.get("type") == "tool_use"]
            if isinstance(previous, list)
            else []
        )
        if results:
            _check(
                all(b.get("type") == "tool_result" for b in blocks[: len(results)]),
                where,
                "tool_result blocks must come first in the content array, before any text",
            )
            for result in results:
                _check(
                    result in called,
                    where,
                    f"tool_result {result!r} has no matching tool_use in the previous message (unexpected tool_use_id)",
                )
        if called:
            # the API requires every tool_use answered in the next message, results first; the order is our (stricter) rule
            _check(
                results == called,
                where,
                f"must start with exactly the tool_result blocks {called} of the previous message, in that order; got {results}",
            )
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        for use in uses:
            _check(
                use not in seen_ids, where, f"tool_use ids must be unique: {use!r} appears twice"
            )
            seen_ids.add(use)
        if uses:
            _check(
                i + 1 < len(messages),
                where,
                f"tool_use ids {uses} were found without tool_result blocks immediately after",
            )
    last = messages[-1]
    if last["role"] == "assistant":
        final = (
            last["content"]
            if isinstance(last["content"], str)
            else (
                last["content"][-1].get("text")
                if last["content"][-1].get("type") == "text"
                else None
            )
        )
        if final is not None:
            _check(
                final == final.rstrip(),
                f"messages[{len(messages) - 1}]",
                "final assistant content cannot end with trailing whitespace",
            )
    _check(
        breakpoints <= MAX_BREAKPOINTS,
        "request",
        f"{breakpoints} cache_control breakpoints; at most {MAX_BREAKPOINTS} are allowed",
    )


def validate_openai_messages(messages: Any) -> None:
    """Raise AssertionError unless ``messages`` is a valid Chat Completions messages list."""
    _check(
        isinstance(messages, list) and len(messages) > 0,
        "messages",
        "at least one message is required",
    )
    pending: list[str] = []  # tool_call ids of the last assistant message not answered yet
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        _check(isinstance(message, dict), where, "a message must be an object")
        role = message.get("role")
        _check(
            role in ("system", "developer", "user", "assistant", "tool"),
            where,
            f"unknown role {role!r}",
        )
        if role != "tool":
            _check(
                not pending,
                where,
                f"an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; missing {pending}",
            )
        content = message.get("content")
        if role in ("system", "developer", "user"):
            _check(
                isinstance(content, str) and content.strip() != "",
                where,
                f"{role} content must be a non-blank string",
            )
            _check(
                set(message) <= {"role", "content", "name"},
                where,
                f"unknown fields {sorted(set(message) - {'role', 'content', 'name'})}",
            )
        elif role == "assistant":
            _check(
                set(message) <= {"role", "content", "tool_calls", "name", "refusal"},
                where,
                "unknown fields on an assistant message",
            )
            calls = message.get("tool_calls")
            if calls is None:
                _check(
                    isinstance(content, str) and content.strip() != "",
                    where,
                    "an assistant message needs content unless it has tool_calls",
                )
                continue
            _check(
                content is None or (isinstance(content, str) and content.strip() != ""),
                where,
                f"assistant content ({content!r}) must be null or non-blank text",
            )
            _check(
                isinstance(calls, list) and len(calls) > 0,
                where,
                "tool_calls must be a non-empty list",
            )
            for k, call in enumerate(calls):
                cw = f"{where}.tool_calls[{k}]"
                _check(
                    isinstance(call, dict)
                    and call.get("type") == "function"
                    and set(call) == {"id", "type", "function"},
                    cw,
                    f"a tool call is {{id, type: 'function', function}}, got {call!r}",
                )
                cid = call["id"]
                _check(
                    isinstance(cid, str) and bool(ID.match(cid)) and len(cid) <= OPENAI_MAX_ID,
                    cw,
                    f"id ({cid!r}) must match {ID.pattern} with at most {OPENAI_MAX_ID} characters",
                )
                _check(cid not in seen_ids, cw, f"tool_call id {cid!r} appears twice")
                seen_ids.add(cid)
                function = call["function"]
                _check(
                    isinstance(function, dict) and set(function) == {"name", "arguments"},
                    cw,
                    "function must be {name, arguments}",
                )
                _check(
                    isinstance(function["name"], str) and bool(NAME.match(function["name"])),
                    cw,
                    f"function.name ({function['name']!r}) must match {NAME.pattern}",
                )
                _check(
                    isinstance(function["arguments"], str),
                    cw,
                    "function.arguments must be a JSON string",
                )
                try:
                    parsed = json.loads(function["arguments"])
                except ValueError:
                    _fail(cw, f"function.arguments ({function['arguments']!r}) is not valid JSON")
                _check(isinstance(parsed, dict), cw, "function.arguments must encode a JSON object")
                pending.append(cid)
        else:
            _check(
                set(message) == {"role", "tool_call_id", "content"},
                where,
                "a tool message is {role, tool_call_id, content}",
            )
            _check(isinstance(content, str), where, "tool content must be a string")
            answered = message["tool_call_id"]
            # the API requires each tool message to answer a call of the preceding assistant message; the order is our rule
            _check(
                bool(pending) and pending[0] == answered,
                where,
                f"messages with role 'tool' must be a response to a preceding message with 'tool_calls' (expected {pending[:1]}, got {answered!r})",
            )
            pending.pop(0)
    _check(not pending, "messages", f"tool_calls {pending} have no tool message responding to them")


def validate_anthropic_body(body: dict[str, Any]) -> None:
    """Raise AssertionError unless ``body`` (the JSON an SDK sent) is a valid Messages request."""
    _check(isinstance(body.get("model"), str) and body["model"], "model", "a model is required")
    _check(
        isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0,
        "max_tokens",
        "must be a positive integer",
    )
    validate_anthropic_request(body.get("system"), body.get("messages"), body.get("tools"))
