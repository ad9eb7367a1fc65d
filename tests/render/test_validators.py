"""The request validators reject each kind of bad request (so the tests that use them can fail)."""

from __future__ import annotations

import copy

import pytest

from tests.support.validators import validate_anthropic_request, validate_openai_messages


def text(value, **extra):
    return {"type": "text", "text": value, **extra}


def use(call_id, name="t"):
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}}


def result(call_id, content="r"):
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


GOOD = [
    {"role": "user", "content": [text("hi")]},
    {"role": "assistant", "content": [text("Looking."), use("a"), use("b")]},
    {"role": "user", "content": [result("a"), result("b"), text("also this")]},
    {"role": "assistant", "content": "Done."},
]

EPHEMERAL = {"type": "ephemeral"}


def test_a_good_anthropic_request_passes():
    validate_anthropic_request("sys", GOOD)
    validate_anthropic_request([text("sys", cache_control=EPHEMERAL)], GOOD)


def edit(change):
    messages = copy.deepcopy(GOOD)
    change(messages)
    return messages


ANTHROPIC_BAD = {
    "no messages": ("", [], "at least one message"),
    "assistant first": ("", GOOD[1:], "first message must use the user role"),
    "same role twice": ("", [GOOD[0], GOOD[0]], "roles must alternate"),
    "blank text": (
        "",
        edit(lambda m: m[0]["content"].__setitem__(0, text(" \n"))),
        "non-whitespace",
    ),
    "blank string content": (
        "",
        edit(lambda m: m[3].__setitem__("content", "  ")),
        "non-whitespace",
    ),
    "empty content list": ("", edit(lambda m: m[0].__setitem__("content", [])), "non-empty"),
    "text before results": (
        "",
        edit(lambda m: m[2]["content"].insert(0, text("x"))),
        "must come first",
    ),
    "result missing": ("", edit(lambda m: m[2]["content"].pop(1)), "must start with exactly"),
    "results reordered": (
        "",
        edit(lambda m: m[2]["content"].__setitem__(slice(0, 2), [result("b"), result("a")])),
        "must start with exactly",
    ),
    "tool_use at the end": ("", GOOD[:2], "without tool_result blocks"),
    "unknown result id": (
        "",
        edit(lambda m: m[2]["content"].__setitem__(0, result("zzz"))),
        "no matching tool_use",
    ),
    "result in a later message": (
        "",
        edit(lambda m: m.extend([{"role": "user", "content": [result("a")]}])),
        "no matching tool_use",
    ),
    "orphan result": ("", [{"role": "user", "content": [result("a")]}], "no matching tool_use"),
    "duplicate id": (
        "",
        GOOD[:3]
        + [
            {"role": "assistant", "content": [use("a")]},
            {"role": "user", "content": [result("a")]},
        ],
        "unique",
    ),
    "bad id": (
        "",
        edit(
            lambda m: (
                m[1]["content"].__setitem__(1, use("functions.f:0")),
                m[2]["content"].__setitem__(0, result("functions.f:0")),
            )
        ),
        "must match",
    ),
    "bad tool name": (
        "",
        edit(lambda m: m[1]["content"].__setitem__(1, use("a", name="web search"))),
        "tool_use.name",
    ),
    "tool_use from the user": ("", [{"role": "user", "content": [use("a")]}], "not allowed here"),
    "unknown field": (
        "",
        edit(lambda m: m[0]["content"][0].__setitem__("is_error", True)),
        "unknown fields",
    ),
    "bad role": ("", edit(lambda m: m[0].__setitem__("role", "system")), "role"),
    "trailing whitespace at the end": (
        "",
        edit(lambda m: m[3].__setitem__("content", "Done. ")),
        "trailing whitespace",
    ),
    "five breakpoints": (
        [text("s", cache_control=EPHEMERAL)],
        edit(
            lambda m: [
                b.__setitem__("cache_control", EPHEMERAL) for b in m[1]["content"] + m[0]["content"]
            ]
        ),
        "at most 4",
    ),
    "bad cache_control": (
        "",
        edit(lambda m: m[0]["content"][0].__setitem__("cache_control", {"type": "forever"})),
        "ephemeral",
    ),
    "system not text": ([use("a")], GOOD, "not allowed here"),
    "blank system block": ([text(" ")], GOOD, "non-whitespace"),
    "system a number": (3, GOOD, "system"),
}


@pytest.mark.parametrize("case", sorted(ANTHROPIC_BAD))
def test_each_bad_anthropic_request_is_rejected(case):
    system, messages, reason = ANTHROPIC_BAD[case]
    with pytest.raises(AssertionError, match=reason):
        validate_anthropic_request(system, messages)


def call(call_id, name="t", arguments="{}"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


OPENAI_GOOD = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
    {"role": "tool", "tool_call_id": "a", "content": "r"},
    {"role": "tool", "tool_call_id": "b", "content": "r"},
    {"role": "user", "content": "more"},
    {"role": "assistant", "content": "Done."},
]


def test_good_openai_messages_pass():
    validate_openai_messages(OPENAI_GOOD)


def oedit(change):
    messages = copy.deepcopy(OPENAI_GOOD)
    change(messages)
    return messages


OPENAI_BAD = {
    "no messages": ([], "at least one message"),
    "tool without calls": (
        [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": "r"}],
        "must be a response to a preceding message",
    ),
    "missing tool message": (oedit(lambda m: m.pop(4)), "must be followed by tool messages"),
    "user between calls and results": (
        oedit(lambda m: m.insert(3, {"role": "user", "content": "wait"})),
        "must be followed by tool messages",
    ),
    "calls at the end": (OPENAI_GOOD[:3], "have no tool message"),
    "tool messages reordered": (
        oedit(lambda m: m.__setitem__(slice(3, 5), [m[4], m[3]])),
        "expected \\['a'\\]",
    ),
    "answered twice": (
        oedit(lambda m: m.insert(5, {"role": "tool", "tool_call_id": "b", "content": "r"})),
        "must be a response",
    ),
    "duplicate id": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(1, call("a"))),
        "appears twice",
    ),
    "id too long": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(0, call("x" * 41))),
        "at most 40",
    ),
    "id with a dot": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(0, call("f.0"))),
        "must match",
    ),
    "arguments not JSON": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(0, call("a", arguments="{nope"))),
        "not valid JSON",
    ),
    "arguments an object": (
        oedit(lambda m: m[2]["tool_calls"][0]["function"].__setitem__("arguments", {})),
        "JSON string",
    ),
    "arguments a list": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(0, call("a", arguments="[]"))),
        "JSON object",
    ),
    "bad name": (
        oedit(lambda m: m[2]["tool_calls"].__setitem__(0, call("a", name="a b"))),
        "function.name",
    ),
    "no type": (oedit(lambda m: m[2]["tool_calls"][0].pop("type")), "type: 'function'"),
    "empty assistant": (oedit(lambda m: m[6].__setitem__("content", None)), "needs content"),
    "blank user": (oedit(lambda m: m[1].__setitem__("content", " ")), "non-blank"),
    "blank assistant with calls": (
        oedit(lambda m: m[2].__setitem__("content", "")),
        "null or non-blank",
    ),
    "empty tool_calls": (oedit(lambda m: m[2].__setitem__("tool_calls", [])), "non-empty list"),
    "unknown role": (oedit(lambda m: m[1].__setitem__("role", "human")), "unknown role"),
    "tool content not a string": (
        oedit(lambda m: m[3].__setitem__("content", None)),
        "must be a string",
    ),
}


@pytest.mark.parametrize("case", sorted(OPENAI_BAD))
def test_each_bad_openai_request_is_rejected(case):
    messages, reason = OPENAI_BAD[case]
    with pytest.raises(AssertionError, match=reason):
        validate_openai_messages(messages)
