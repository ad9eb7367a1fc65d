"""The lean window: search leaves the recall tools' own echoes out,
newer pinned system events supersede older ones, ChatMemory renders its own window, and
large tool results already read are shown as stubs that fetch_tool_result undoes. The store
tests run on every backend."""

from __future__ import annotations

import pytest

from chat_memory import ChatMemory, Event, EventType, InvalidEventError, MemoryConfig
from chat_memory.backends.base import Store
from chat_memory.search import RECALL_MARK, SearchQuery, search_text
from tests.support.helpers import fixed_tokens, turn


def memory(store: Store, **config) -> ChatMemory:
    return ChatMemory(store, MemoryConfig(**config), token_counter=fixed_tokens)


def agent_searches(m: ChatMemory, cid: str, keyword: str, times: int) -> None:
    """What an agent does: it calls conversation_search and stores the call and the tool's
    answer (the result without a name: the engine names it after its call)."""
    tool = m.search_tool(cid)
    for i in range(times):
        m.add(cid, Event.user(f"What was that name again? ({i})"))
        call = Event.tool_call("conversation_search", {"keyword": keyword}, call_id=f"s{i}")
        m.add(cid, [call, Event.tool_result(call.tool_call_id, tool({"keyword": keyword}))])
        m.add(cid, Event.assistant("It is the new service."))


# -- search leaves the recall tools out --------------------------------------------------


def test_search_after_five_agent_searches_returns_only_the_real_mentions(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=2, search_page_size=50)
    m.add("c", [Event.user("Our new service is code-named Bluefin."), Event.assistant("Noted.")])
    agent_searches(m, "c", "bluefin", 5)
    found = m.search("c", "bluefin")
    assert [h.content for h in found.hits] == [
        "Our new service is code-named Bluefin."
    ] and found.total == 1
    # the tool's answer does not grow with every search: the fifth is the first one again
    answers = [e.content for e in m.history("c") if e.type is EventType.TOOL_RESULT]
    assert len(answers) == 5 and all(
        "Results 1-1 of 1" in a and a.count("\n- [#") == 1 for a in answers
    )
    assert answers[-1] == answers[1]  # the first one saw the hit in view, later ones archived
    everything = m.search("c", "bluefin", include_recall_tools=True)
    assert everything.total == 11
    assert {h.type for h in everything.hits} == {"user", "tool_call", "tool_result"}


def test_every_match_mode_and_the_sql_fallback_leave_them_out(store):
    m = memory(store, search_page_size=50)
    m.add("c", Event.user("Bluefin ships in March"))
    agent_searches(m, "c", "bluefin march", 2)
    for mode in ("phrase", "all", "any"):
        assert [
            h.seq
            for h in m.search(
                "c", "bluefin march" if mode != "phrase" else "bluefin", match_mode=mode
            ).hits
        ] == [1]
    # a NUL in the keyword makes SQL match in Python: same answer
    m.add("c", Event.user("nul\x00bluefin"))
    m.add(
        "c",
        [
            Event.tool_call("conversation_search", {"keyword": "nul\x00bluefin"}, call_id="n"),
            Event.tool_result("n", "nul\x00bluefin"),
        ],
    )
    assert [h.content for h in m.search("c", "nul\x00bluefin").hits] == ["nul\x00bluefin"]
    # (the call's arguments are JSON text, where the NUL is written \u0000)
    assert [h.type for h in m.search("c", "nul\x00bluefin", include_recall_tools=True).hits] == [
        "user",
        "tool_result",
    ]


def test_fetch_tool_results_are_left_out_too_and_archived_ones_alike(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add(
        "c",
        [
            Event.user("get the order"),
            Event.tool_call("get_order", {"id": 7}, call_id="o1"),
            Event.tool_result("o1", "order 7: Bluefin crate"),
        ],
    )
    m.add(
        "c",
        [
            Event.user("again"),
            Event.tool_call("fetch_tool_result", {"tool_call_id": "o1"}, call_id="f1"),
        ],
    )
    m.add("c", Event.tool_result("f1", m.fetch_tool("c")({"tool_call_id": "o1"})))
    for i in range(3):
        m.add("c", turn(f"later {i}"))
    assert m.stats("c").archived_events > 0
    assert [h.content for h in m.search("c", "bluefin crate").hits] == ["order 7: Bluefin crate"]
    assert m.search("c", "bluefin crate", include_recall_tools=True).total == 2


def test_texts_that_start_with_the_mark_are_still_found(store):
    """The mark is whitespace, and leading whitespace never takes part in a match, so an
    ordinary text starting with that character is stored without it and stays searchable."""
    m = memory(store)
    m.add(
        "c",
        [Event.user(RECALL_MARK + "bluefin one"), Event.user(" \t" + RECALL_MARK + "bluefin two")],
    )
    assert m.search("c", "bluefin").total == 2
    assert search_text(Event.user(RECALL_MARK + "x")) == "x"
    assert search_text(Event.tool_call("conversation_search", {"keyword": "x"})).startswith(
        RECALL_MARK
    )
    assert not SearchQuery.build(RECALL_MARK + "x").terms[0].startswith(RECALL_MARK)


def test_a_result_named_after_its_call_when_stored():
    m = memory(_memory_store())
    m.add("c", Event.tool_call("conversation_search", {"keyword": "k"}, call_id="s"))
    m.add("c", Event.tool_result("s", "No messages"))
    m.add(
        "c",
        [
            Event.tool_call("get_order", {}, call_id="g"),
            Event.tool_result("g", "ok", name="explicit"),
        ],
    )
    assert [e.tool_name for e in m.history("c") if e.type is EventType.TOOL_RESULT] == [
        "conversation_search",
        "explicit",
    ]


def _memory_store() -> Store:
    from chat_memory import open_store

    return open_store("memory://")


# -- pinned system events ------------------------------------------------------------------


def test_a_newer_system_prompt_supersedes_the_older_one(store):
    m = memory(store, compaction_strategy="turn_window", max_turns=2)
    m.add("c", Event.system("You are bot v1"))
    m.add("c", turn("q0"))
    before = m.stats("c").window_tokens
    m.add("c", Event.system("You are bot v2"))
    assert [e.content for e in m.window("c") if e.type is EventType.SYSTEM] == ["You are bot v2"]
    assert m.stats("c").window_tokens == before  # v1 counts no more (both are 4 words)
    assert m.stats("c").archived_events == 1
    history = m.history("c")
    assert [(e.content, e.archived) for e in history if e.type is EventType.SYSTEM] == [
        ("You are bot v1", True),
        ("You are bot v2", False),
    ]
    assert [e.seq for e in history] == sorted(e.seq for e in history)


def test_keys_keep_several_pins_side_by_side(store):
    m = memory(store)
    m.add("c", [Event.system("persona A"), Event.system("French", metadata={"key": "language"})])
    m.add("c", [Event.system("English", metadata={"key": "language"}), Event.user("hi")])
    pinned = [e.content for e in m.window("c") if e.type is EventType.SYSTEM]
    assert pinned == ["persona A", "English"]
    assert sorted(e.content for e in m.history("c") if e.archived) == ["French"]
    m.add("c", Event.system("persona B"))
    assert [e.content for e in m.window("c") if e.type is EventType.SYSTEM] == [
        "English",
        "persona B",
    ]
    assert m.stats("c").archived_events == 2


def test_one_list_with_two_pins_of_one_key_is_refused_and_stores_nothing(store):
    m = memory(store)
    batch = [
        Event.system("German", metadata={"key": "language"}),
        Event.system("English", metadata={"key": "language"}),
    ]
    with pytest.raises(
        InvalidEventError,
        match=r"events\[1\] and events\[0\] are system events with the same pin key \('language'\)",
    ):
        m.add("c", [*batch, Event.user("hi")])
    assert m.history("c") == []


def test_superseded_pins_survive_compaction_in_the_archive(store):
    m = memory(store, compaction_strategy="sliding_window", max_events=2)
    m.add("c", Event.system("v1"))
    m.add("c", Event.system("v2"))
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    assert [e.content for e in m.window("c") if e.type is EventType.SYSTEM] == ["v2"]
    assert [e.content for e in m.history("c") if e.type is EventType.SYSTEM] == ["v1", "v2"]


@pytest.mark.parametrize("key", [5, "", ["a"]])
def test_a_bad_pin_key_is_refused(key):
    m = memory(_memory_store())
    with pytest.raises(InvalidEventError, match=r"metadata\['key'\]"):
        m.add("c", Event.system("x", metadata={"key": key}))


# -- ChatMemory renders its own window -------------------------------------------------------


def test_to_anthropic_uses_the_memory_own_summary_placement():
    def summarize(previous, events, upcoming):
        return "they talked about Bluefin"

    m = ChatMemory(
        _memory_store(),
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=0,
            summary_placement="system_prompt",
        ),
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    for i in range(3):
        m.add("c", turn(f"q{i}"))
    system, messages = m.to_anthropic("c", system_prompt="Be brief.", cache=False)
    assert system.startswith("Be brief.") and "they talked about Bluefin" in system
    cached, _ = m.to_anthropic("c", system_prompt="Be brief.")
    assert "they talked about Bluefin" in " ".join(block["text"] for block in cached)
    assert all("Bluefin" not in str(message) for message in messages)
    _, as_user = m.to_anthropic("c", summary_placement="user_message")
    assert "they talked about Bluefin" in as_user[0]["content"][0]["text"]


def test_to_openai_renders_its_own_window():
    m = memory(_memory_store())
    m.add("c", turn("q0"))
    messages = m.to_openai("c", system_prompt="Be brief.")
    assert "q0" in str(messages) and "Be brief." in str(messages)
