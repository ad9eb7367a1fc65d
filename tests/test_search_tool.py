"""The conversation_search tool as a model sees it."""

from __future__ import annotations

import re

import jsonschema

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.tools import snippet


def memory_with_history(page_size: int = 3) -> ChatMemory:
    m = ChatMemory(open_store("memory://"), MemoryConfig(compaction_strategy="turn_window", max_turns=2, search_page_size=page_size))
    m.add("c", [Event.user("Our new service is code-named Bluefin."), Event.assistant("Noted.")])
    for i in range(6):
        m.add("c", [Event.user(f"Bluefin status {i}?"), Event.assistant("Fine.")])
    m.add("c", [Event.user("long one " + "filler " * 100 + "the Bluefin deadline is March 3 " + "tail " * 100)])
    return m


def test_anthropic_tool_shape_without_inner_monologue():
    tool = memory_with_history().search_tool("c")
    assert tool.name == "conversation_search"
    assert "earlier" in tool.description
    schema = tool.input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["keyword"]
    assert set(schema["properties"]) == {"keyword", "page", "match_mode"}
    assert tool.definition() == {"name": tool.name, "description": tool.description, "input_schema": schema}


def test_output_lists_hits_with_seq_time_role_and_paging_hint():
    tool = memory_with_history().search_tool("c")
    text = tool({"keyword": "bluefin"})
    lines = text.splitlines()
    assert lines[0].startswith('Results 1-3 of 8 for "bluefin" (page 1 of 3')
    assert re.match(r"- \[#1 · \d{4}-\d\d-\d\d \d\d:\d\d UTC · user · archived\] Our new service is code-named Bluefin\.", lines[1])
    assert 'page 1' in lines[-1] and "call conversation_search again" in lines[-1]
    last = tool({"keyword": "bluefin", "page": 2})
    assert "page 3 of 3" in last and last.endswith("No more results.")


def test_long_texts_are_cut_around_the_match():
    tool = memory_with_history(page_size=10).search_tool("c")
    text = tool({"keyword": "deadline"})
    hit = [l for l in text.splitlines() if "deadline" in l][-1]
    assert "…" in hit and "the Bluefin deadline is March 3" in hit and len(hit) < 400


def test_bad_arguments_come_back_as_errors_the_model_can_read():
    tool = memory_with_history().search_tool("c")
    for arguments in [{}, {"keyword": "  "}, {"keyword": "x", "page": -1}, {"keyword": "x", "match_mode": "regex"}, {"keyword": "x", "thinking": "hmm"}, "not json", None]:
        output = tool.run(arguments)
        assert output.is_error and output.text.startswith("Error:")
    assert tool.run('{"keyword": "Bluefin"}').is_error is False


def test_no_match_says_so():
    assert "No messages in this conversation match" in memory_with_history().search_tool("c")({"keyword": "zebra"})


def test_snippet_keeps_short_text_whole():
    assert snippet("short  text\nhere", ["text"]) == "short text here"
