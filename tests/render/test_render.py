"""Rendering a window as Anthropic and OpenAI requests: the pairing, ordering, id and cache
rules of docs/rendering.md, each checked by the validators as well."""

from __future__ import annotations

import json

import pytest

from chat_memory import ConfigurationError, Event, to_anthropic, to_openai
from chat_memory.render import MISSING_RESULT_TEXT, provider_id
from tests.support.validators import validate_anthropic_request, validate_openai_messages


def render(window, system_prompt=None, **options):
    """Both renderings, each validated."""
    system, messages = to_anthropic(window, system_prompt, **options)
    validate_anthropic_request(system, messages)
    openai = to_openai(
        window, system_prompt, summary_placement=options.get("summary_placement", "user_message")
    )
    validate_openai_messages(openai)
    return system, messages, openai


def strip_cache(messages):
    return json.loads(json.dumps(messages).replace(', "cache_control": {"type": "ephemeral"}', ""))


def test_tool_pairs_roles_and_summary_as_user_message():
    window = [
        Event.system("Be brief."),
        Event.summary("The user is Dana."),
        Event.user("Where is order 4512?"),
        Event.tool_call("get_order", {"id": 4512}, call_id="c1"),
        Event.tool_result("c1", "shipped", is_error=False),
        Event.assistant("It shipped."),
    ]
    system, messages, _ = render(window, "You are helpful.", cache=False)
    assert system == "You are helpful.\n\nBe brief."
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert (
        "<conversation_summary>\nThe user is Dana.\n</conversation_summary>"
        in messages[0]["content"][0]["text"]
    )
    assert messages[0]["content"][1] == {"type": "text", "text": "Where is order 4512?"}
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "get_order", "input": {"id": 4512}}
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "shipped"}
    ]


def test_summary_in_system_prompt_and_leading_assistant_gets_a_user_opener():
    system, messages, openai = render(
        [Event.summary("S"), Event.assistant("Hi")], summary_placement="system_prompt", cache=False
    )
    assert "<conversation_summary>\nS\n</conversation_summary>" in system
    assert messages[0]["role"] == "user" and messages[1]["content"][0]["text"] == "Hi"
    assert openai[0]["role"] == "system" and "<conversation_summary>" in openai[0]["content"]


def test_error_results_are_flagged():
    window = [
        Event.user("x"),
        Event.tool_call("t", {}, call_id="k"),
        Event.tool_result("k", "boom", is_error=True),
    ]
    _, messages, openai = render(window)
    assert messages[-1]["content"][0]["is_error"] is True
    assert openai[-1] == {"role": "tool", "tool_call_id": "k", "content": "Error: boom"}


def test_a_user_message_during_a_pending_call_comes_after_the_late_result():
    window = [
        Event.user("Look it up"),
        Event.tool_call("lookup", {"q": "x"}, call_id="c1"),
        Event.user("hurry up"),
        Event.tool_result("c1", "found"),
        Event.assistant("Found it."),
    ]
    _, messages, openai = render(window, cache=False)
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "found"},
        {"type": "text", "text": "hurry up"},
    ]
    assert [m["role"] for m in openai] == ["user", "assistant", "tool", "user", "assistant"]
    assert openai[2]["content"] == "found" and openai[3]["content"] == "hurry up"


def test_a_call_without_a_result_gets_a_marked_synthetic_error():
    window = [
        Event.user("go"),
        Event.tool_call("slow", {}, call_id="c1"),
        Event.tool_call("fast", {}, call_id="c2"),
        Event.tool_result("c2", "ok"),
    ]
    _, messages, openai = render(window, cache=False)
    assert messages[-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": MISSING_RESULT_TEXT,
            "is_error": True,
        },
        {"type": "tool_result", "tool_use_id": "c2", "content": "ok"},
    ]
    assert "No result was recorded" in MISSING_RESULT_TEXT and "interrupted" in MISSING_RESULT_TEXT
    assert [m.get("tool_call_id") for m in openai[2:]] == ["c1", "c2"]
    assert openai[2]["content"].startswith("Error: ")


def test_a_result_stored_before_its_call_is_shown_after_it():
    window = [
        Event.user("go"),
        Event.tool_result("c1", "early"),
        Event.tool_call("t", {}, call_id="c1"),
        Event.assistant("done"),
    ]
    _, messages, _ = render(window, cache=False)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "early"}
    ]


def test_a_result_whose_call_is_not_in_the_window_becomes_a_note():
    _, messages, openai = render(
        [Event.user("go"), Event.tool_result("gone", "42", name="calc")], cache=False
    )
    note = messages[0]["content"][1]["text"]
    assert note.startswith(
        "[chat-memory] A tool result for call 'gone' (calc), whose call is not in the visible history"
    )
    assert note.endswith("\n42")
    assert openai[-1] == {"role": "user", "content": note}


def test_repeated_call_ids_are_shown_under_distinct_ids_and_pair_in_order():
    # the README example run twice on one store: two calls "c1", two results "c1"
    first = [
        Event.user("a"),
        Event.tool_call("get", {"n": 1}, call_id="c1"),
        Event.tool_result("c1", "one"),
    ]
    second = [
        Event.user("b"),
        Event.tool_call("get", {"n": 2}, call_id="c1"),
        Event.tool_result("c1", "two"),
    ]
    _, messages, openai = render(first + second + [Event.tool_result("c1", "three")], cache=False)
    uses = [b for m in messages for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in messages for b in m["content"] if b["type"] == "tool_result"]
    assert uses[0]["id"] == "c1" and uses[1]["id"] == provider_id("c1#2") != "c1"
    assert [(r["tool_use_id"], r["content"]) for r in results] == [
        ("c1", "one"),
        (uses[1]["id"], "two"),
    ]
    assert (
        "Another tool result for call 'c1', already answered above:\nthree"
        in messages[-1]["content"][-1]["text"]
    )
    assert [c["id"] for m in openai for c in m.get("tool_calls", [])] == [u["id"] for u in uses]


@pytest.mark.parametrize("raw", ["functions.f:0", "call id with spaces", "ü", "", "x" * 41, "a/b"])
def test_ids_providers_refuse_are_mapped_deterministically(raw):
    mapped = provider_id(raw)
    assert (
        mapped == provider_id(raw)
        and len(mapped) <= 40
        and mapped.replace("_", "").replace("-", "").isalnum()
    )
    window = [
        Event.user("go"),
        Event.tool_call("t", {}, call_id=raw or "placeholder"),
        Event.tool_result(raw or "placeholder", "r"),
    ]
    _, messages, openai = render(window)
    assert (
        messages[1]["content"][0]["id"]
        == provider_id(raw or "placeholder")
        == openai[1]["tool_calls"][0]["id"]
    )


def test_valid_ids_pass_through_unchanged():
    assert provider_id("toolu_01A-b") == "toolu_01A-b" and provider_id("x" * 40) == "x" * 40
    assert provider_id("functions.f:0") != provider_id("functions_f_0")


def test_blank_texts_never_become_blank_blocks():
    window = [
        Event.user("   "),
        Event.assistant(" \n"),
        Event.assistant("Sure.  \n"),
        Event.user(""),
        Event.tool_call("t", {}, call_id="k"),
        Event.tool_result("k", "  "),
    ]
    _, messages, openai = render(window, system_prompt="  ", cache=False)
    assert messages[0]["content"] == [{"type": "text", "text": "(empty message)"}]
    assert messages[1]["content"] == [{"type": "text", "text": "Sure."}]
    assert messages[-1]["content"][0]["content"] == "(empty result)"
    assert openai[0] == {"role": "user", "content": "(empty message)"}


def test_tool_names_providers_refuse_are_cleaned():
    _, messages, openai = render(
        [
            Event.user("go"),
            Event.tool_call("web search!", {}, call_id="k"),
            Event.tool_result("k", "r"),
        ]
    )
    assert (
        messages[1]["content"][0]["name"]
        == "web_search_"
        == openai[1]["tool_calls"][0]["function"]["name"]
    )


def test_openai_shape():
    window = [
        Event.system("Pinned."),
        Event.user("hi"),
        Event.assistant("Checking."),
        Event.tool_call("get", {"ü": [1, 2]}, call_id="c1"),
        Event.tool_result("c1", "r"),
        Event.assistant("Done."),
    ]
    openai = render(window, "Sys.")[2]
    assert openai == [
        {"role": "system", "content": "Sys.\n\nPinned."},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"ü": [1, 2]}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "Done."},
    ]


def test_cache_breakpoints_mark_system_summary_and_tail():
    window = [
        Event.system("Pinned."),
        Event.summary("S"),
        Event.user("q1"),
        Event.assistant("a1"),
        Event.user("q2"),
    ]
    system, messages, _ = render(window, "Sys.")
    assert system == [
        {"type": "text", "text": "Sys.\n\nPinned.", "cache_control": {"type": "ephemeral"}}
    ]
    marked = [
        (i, k)
        for i, m in enumerate(messages)
        for k, b in enumerate(m["content"])
        if "cache_control" in b
    ]
    # the summary block, the previous request's tail (q1 + its reply is messages[-3]) and the tail
    assert marked == [(0, 0), (0, 1), (2, 0)]

    system, messages, _ = render(window, "Sys.", summary_placement="system_prompt")
    assert [b.get("cache_control") for b in system] == [{"type": "ephemeral"}] * 2
    assert "S\n</conversation_summary>" in system[1]["text"]


def test_cache_false_marks_nothing_and_cache_true_only_adds_marks():
    window = [
        Event.summary("S"),
        Event.user("q"),
        Event.tool_call("t", {}, call_id="k"),
        Event.tool_result("k", "r"),
        Event.assistant("a"),
        Event.user("q2"),
    ]
    plain_system, plain = to_anthropic(window, "Sys.", cache=False)
    cached_system, cached = to_anthropic(window, "Sys.")
    assert "cache_control" not in json.dumps(plain) and isinstance(plain_system, str)
    assert strip_cache(cached) == plain and cached_system[0]["text"] == plain_system
    assert (
        json.dumps(cached).count("cache_control") + json.dumps(cached_system).count("cache_control")
        == 4
    )


def test_the_prefix_stays_byte_identical_as_the_conversation_grows():
    events = [
        Event.system("Pinned."),
        Event.user("q1"),
        Event.tool_call("t", {"a": 1}, call_id="k1"),
        Event.tool_result("k1", "r1"),
        Event.assistant("a1"),
        Event.user("q2"),
        Event.assistant("a2"),
        Event.user("q3"),
    ]
    before = strip_cache(to_anthropic(events[:6], "Sys.")[1])
    after = strip_cache(to_anthropic(events, "Sys.")[1])
    assert after[: len(before)] == before


def test_empty_window_renders_no_messages_and_bad_placement_is_refused():
    assert to_anthropic([]) == ("", []) and to_openai([]) == []
    with pytest.raises(ConfigurationError, match=r"summary_placement \('top'\)"):
        to_anthropic([Event.user("x")], summary_placement="top")


def test_stored_order_is_not_changed():
    window = [
        Event.user("go"),
        Event.tool_call("t", {}, call_id="k"),
        Event.user("hurry"),
        Event.tool_result("k", "r"),
    ]
    copy = list(window)
    render(window)
    assert window == copy
