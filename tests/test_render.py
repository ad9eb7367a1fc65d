"""Rendering a window as Anthropic messages."""

from __future__ import annotations

from chat_memory import Event, to_anthropic


def test_tool_pairs_roles_and_summary_as_user_message():
    window = [
        Event.system("Be brief."),
        Event.summary("The user is Dana."),
        Event.user("Where is order 4512?"),
        Event.tool_call("get_order", {"id": 4512}, call_id="c1"),
        Event.tool_result("c1", "shipped", is_error=False),
        Event.assistant("It shipped."),
    ]
    system, messages = to_anthropic(window, system_prompt="You are helpful.")
    assert system == "You are helpful.\n\nBe brief."
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "<conversation_summary>\nThe user is Dana.\n</conversation_summary>" in messages[0]["content"][0]["text"]
    assert messages[0]["content"][1] == {"type": "text", "text": "Where is order 4512?"}
    assert messages[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "get_order", "input": {"id": 4512}}]
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": "shipped"}]


def test_summary_in_system_prompt_and_leading_assistant_gets_a_user_opener():
    system, messages = to_anthropic([Event.summary("S"), Event.assistant("Hi")], summary_placement="system_prompt")
    assert "<conversation_summary>\nS\n</conversation_summary>" in system
    assert messages[0]["role"] == "user" and messages[1]["content"][0]["text"] == "Hi"


def test_error_results_are_flagged():
    window = [Event.user("x"), Event.tool_call("t", {}, call_id="k"), Event.tool_result("k", "boom", is_error=True)]
    _, messages = to_anthropic(window)
    assert messages[-1]["content"][0]["is_error"] is True
