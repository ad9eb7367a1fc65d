"""The engine's search on every memory kind (the ``memory`` fixture: see test_engine.py):
literal, case-insensitive and paged, over tool calls and results, one conversation only,
bad input refused, and the store's pushdown filtering before it pages."""

from __future__ import annotations

import pytest

from chat_memory import Event, SearchError
from chat_memory.search import SearchQuery
from tests.fixtures.memory_kinds import MemoryKit
from tests.support.helpers import turn


def test_search_is_literal_case_insensitive_and_paged(memory: MemoryKit) -> None:
    m = memory(compaction_strategy="turn_window", max_turns=1, search_page_size=3)
    m.add("c", turn("100% sure about a_b and (x.*y) and [z]", reply="ok"))
    for i in range(7):
        m.add("c", turn(f"Bluefin note {i}"))
    for needle in ["100%", "a_b", "(x.*y)", "[z]"]:
        assert m.search("c", needle).total == 1, needle
    assert m.search("c", "%").total == 1 and m.search("c", "_").total == 1
    assert m.search("c", ".*").total == 1
    assert m.search("c", "a%b").total == 0
    first = m.search("c", "BLUEFIN")
    assert first.total == 14 and len(first.hits) == 3 and first.has_more
    assert [h.content for h in first.hits] == [
        "Bluefin note 0",
        "reply to Bluefin note 0",
        "Bluefin note 1",
    ]
    pages = [m.search("c", "bluefin", page=p) for p in range(5)]
    assert [len(p.hits) for p in pages] == [3, 3, 3, 3, 2]
    assert not pages[4].has_more and pages[3].has_more
    all_seqs = [h.seq for p in pages for h in p.hits]
    assert all_seqs == sorted(all_seqs) and len(set(all_seqs)) == 14
    assert first.hits[0].archived and not pages[4].hits[-1].archived


def test_search_covers_tool_calls_and_results_and_match_modes(memory: MemoryKit) -> None:
    m = memory()
    m.add(
        "c",
        [
            Event.user("find my order"),
            Event.tool_call("get_order", {"order_id": "A-4512"}, call_id="k"),
        ],
    )
    m.add("c", [Event.tool_result("k", "Status: SHIPPED via DHL"), Event.assistant("It shipped.")])
    m.add("c", Event.system("secret system words"))
    assert [h.type for h in m.search("c", "get_order").hits] == ["tool_call"]
    assert [h.type for h in m.search("c", "a-4512").hits] == ["tool_call"]
    assert [h.type for h in m.search("c", "shipped").hits] == ["tool_result", "assistant"]
    assert m.search("c", "secret").total == 0
    assert m.search("c", "shipped dhl", match_mode="phrase").total == 0
    assert m.search("c", "dhl shipped", match_mode="all").total == 1
    assert m.search("c", "dhl order", match_mode="any").total == 3


def test_search_sees_one_conversation_only(memory: MemoryKit) -> None:
    m = memory()
    m.add("a", turn("alpha secret"))
    m.add("b", turn("bravo"))
    assert m.search("b", "secret").total == 0
    assert m.search("a", "secret").total == 2


def test_search_rejects_bad_input(memory: MemoryKit) -> None:
    m = memory()
    m.add("c", turn("x"))
    for keyword in ["", "   ", None]:
        with pytest.raises(SearchError, match="keyword"):
            m.search("c", keyword)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="page"):
        m.search("c", "x", page=-1)
    with pytest.raises(SearchError, match="match_mode"):
        m.search("c", "x", match_mode="regex")


def test_search_page_past_the_end_is_empty(memory: MemoryKit) -> None:
    m = memory()
    m.add("c", turn("needle", reply="ok"))
    page = m.search("c", "needle", page=5)
    assert page.hits == [] and page.total == 1 and not page.has_more


def test_store_search_pushdown_slices_after_filtering(memory: MemoryKit) -> None:
    m = memory()
    for i in range(30):
        m.add("c", [Event.user(f"msg {i} {'hit' if i % 3 == 0 else 'miss'}")])
    result = memory.store.search("c", SearchQuery.build("hit", page=1, page_size=4))
    assert result.total == 10
    assert [e.content for e in result.events] == [f"msg {i} hit" for i in (12, 15, 18, 21)]
