"""The conversation_search tool as a model sees it."""

from __future__ import annotations

import json
import re

import jsonschema

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.tools import snippet


def memory_with_history(page_size: int = 3) -> ChatMemory:
    m = ChatMemory(
        open_store("memory://"),
        MemoryConfig(compaction_strategy="turn_window", max_turns=2, search_page_size=page_size),
    )
    m.add("c", [Event.user("Our new service is code-named Bluefin."), Event.assistant("Noted.")])
    for i in range(6):
        m.add("c", [Event.user(f"Bluefin status {i}?"), Event.assistant("Fine.")])
    m.add(
        "c",
        [
            Event.user(
                "long one " + "filler " * 100 + "the Bluefin deadline is March 3 " + "tail " * 100
            )
        ],
    )
    return m


def test_anthropic_tool_shape_without_inner_monologue():
    tool = memory_with_history().search_tool("c")
    assert tool.name == "conversation_search"
    assert "earlier" in tool.description
    schema = tool.input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["keyword"]
    assert set(schema["properties"]) == {"keyword", "page", "match_mode"}
    assert tool.definition() == {
        "name": tool.name,
        "description": tool.description,
        "input_schema": schema,
    }


def test_output_lists_hits_with_seq_time_role_and_paging_hint():
    tool = memory_with_history().search_tool("c")
    text = tool({"keyword": "bluefin"})
    lines = text.splitlines()
    assert lines[0].startswith('Results 1-3 of 8 for "bluefin" (page 1 of 3')
    assert re.match(
        r"- \[#1 · \d{4}-\d\d-\d\d \d\d:\d\d UTC · user · archived\] Our new service is code-named Bluefin\.",
        lines[1],
    )
    assert (
        lines[-1]
        == 'More results: call conversation_search again with {"keyword": "bluefin", "page": 2}.'
    )
    last = tool({"keyword": "bluefin", "page": 3})
    assert "page 3 of 3" in last and last.endswith("No more results.")


def test_one_page_numbering_in_input_and_text():
    """Pages count from 1 in the input and the text; following each answer's own hint walks
    every result exactly once, and the page after the last is named as such."""
    tool = memory_with_history().search_tool("c")
    assert tool({"keyword": "bluefin"}) == tool({"keyword": "bluefin", "page": 1})
    seen, arguments = [], {"keyword": "bluefin"}
    for number in range(1, 10):
        text = tool(arguments)
        assert f"(page {number} of 3" in text
        seen += re.findall(r"^- \[#(\d+)", text, re.M)
        if text.endswith("No more results."):
            break
        arguments = json.loads(text.splitlines()[-1].split(" again with ", 1)[1].rstrip("."))
    assert number == 3 and len(seen) == len(set(seen)) == 8
    assert "Page 4 is past the last page (3)" in tool({"keyword": "bluefin", "page": 4})
    zero = tool.run({"keyword": "bluefin", "page": 0})
    assert zero.is_error and "1 or more" in zero.text
    schema = tool.input_schema["properties"]["page"]
    assert schema["minimum"] == 1 and "1 is the first" in schema["description"]


def test_next_page_hint_keeps_the_match_mode():
    tool = memory_with_history().search_tool("c")
    text = tool({"keyword": "status bluefin", "match_mode": "all"})
    assert text.splitlines()[-1].endswith(
        '{"keyword": "status bluefin", "page": 2, "match_mode": "all"}.'
    )


def test_openai_definition_has_the_same_schema():
    tool = memory_with_history().search_tool("c")
    assert tool.openai_definition() == {
        "type": "function",
        "function": {
            "name": "conversation_search",
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def test_long_texts_are_cut_around_the_match():
    tool = memory_with_history(page_size=10).search_tool("c")
    text = tool({"keyword": "deadline"})
    hit = [line for line in text.splitlines() if "deadline" in line][-1]
    assert "…" in hit and "the Bluefin deadline is March 3" in hit and len(hit) < 400


def test_bad_arguments_come_back_as_errors_the_model_can_read():
    tool = memory_with_history().search_tool("c")
    for arguments in [
        {},
        {"keyword": "  "},
        {"keyword": "x", "page": -1},
        {"keyword": "x", "page": 0},
        {"keyword": "x", "match_mode": "regex"},
        {"keyword": "x", "thinking": "hmm"},
        "not json",
        None,
    ]:
        output = tool.run(arguments)
        assert output.is_error and output.text.startswith("Error:")
    assert tool.run('{"keyword": "Bluefin"}').is_error is False


def test_no_match_says_so():
    assert "No messages in this conversation match" in memory_with_history().search_tool("c")(
        {"keyword": "zebra"}
    )


def test_snippet_keeps_short_text_whole():
    assert snippet("short  text\nhere", ["text"]) == "short text here"
