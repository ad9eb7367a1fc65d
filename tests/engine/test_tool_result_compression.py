"""Tool-result compression: stubs in the window the model is shown, the full text one
fetch_tool_result away, and a rendered window that never turns a stub back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, EventType, MemoryConfig, open_store
from chat_memory.compression import compressed_ids, pressure_mark
from chat_memory.host.agent import Agent
from tests.support.helpers import fixed_tokens

BIG = " ".join(f"row{i}" for i in range(600))  # 600 tokens by fixed_tokens


def memory(**config) -> ChatMemory:
    settings_ = {"compress_tool_results": True, "max_tokens": 2000, **config}
    return ChatMemory(
        open_store("memory://"), MemoryConfig(**settings_), token_counter=fixed_tokens
    )


def tool_turn(m: ChatMemory, i: int, content: str = BIG, answer: bool = True) -> None:
    m.add(
        "c",
        [
            Event.user(f"look up {i}"),
            Event.tool_call("lookup", {"i": i}, call_id=f"t{i}"),
            Event.tool_result(f"t{i}", content),
        ],
    )
    if answer:
        m.add("c", Event.assistant(f"done {i}"))


def shown(m: ChatMemory) -> dict[str, str]:
    return {
        e.tool_call_id: e.content for e in m.model_window("c") if e.type is EventType.TOOL_RESULT
    }


def test_old_read_large_results_become_stubs_and_the_newest_stay_full():
    m = memory(keep_recent_tool_results=2)
    for i in range(5):
        tool_turn(m, i)
    results = shown(m)
    assert [cid for cid, text in results.items() if text != BIG] == ["t0", "t1", "t2"]
    stub = results["t0"]
    assert (
        'call `fetch_tool_result` with tool_call_id "t0"' in stub
        and stub.endswith("…")
        and "row0 row1" in stub
    )
    assert len(stub) < 500
    assert all(
        e.content == BIG for e in m.history("c") if e.type is EventType.TOOL_RESULT
    )  # stored in full
    assert (
        m.fetch_tool("c")({"tool_call_id": "t0"}) == f"Full output of tool call t0 (lookup):\n{BIG}"
    )
    compressed = [e for e in m.model_window("c") if e.metadata.get("compressed")]
    assert [e.metadata["compressed"]["tokens"] for e in compressed] == [
        e.tokens
        for e in m.history("c")
        if e.tool_call_id in ("t0", "t1", "t2") and e.type is EventType.TOOL_RESULT
    ]
    assert all(e.tokens < 100 for e in compressed)


def test_no_stub_without_pressure_when_small_unread_or_switched_off():
    assert shown(_with_turns(memory(max_tokens=100_000), 5)) == {f"t{i}": BIG for i in range(5)}
    assert all(
        t == BIG
        for t in shown(_with_turns(memory(min_tool_result_compress_tokens=700), 5)).values()
    )
    assert all(
        t == BIG for t in shown(_with_turns(memory(compress_tool_results=False), 5)).values()
    )
    unread = memory(keep_recent_tool_results=0)
    for i in range(4):
        tool_turn(unread, i, answer=i < 3)
    assert shown(unread)["t3"] == BIG and shown(unread)["t0"] != BIG


def _with_turns(m: ChatMemory, n: int) -> ChatMemory:
    for i in range(n):
        tool_turn(m, i)
    return m


def test_rendered_requests_carry_the_stubs_and_the_agent_gets_the_fetch_tool():
    m = memory(keep_recent_tool_results=1, enable_conversation_search_tool=True)
    _with_turns(m, 4)
    _, messages = m.to_anthropic("c")
    results = [b for msg in messages for b in msg["content"] if b["type"] == "tool_result"]
    assert [b["content"] == BIG for b in results] == [False, False, False, True]
    agent = Agent(client=None, memory=m, model="x")
    assert set(agent.tools("c")) == {"conversation_search", "fetch_tool_result"}
    assert (
        set(Agent(client=None, memory=memory(compress_tool_results=False), model="x").tools("c"))
        == set()
    )


def test_fetch_finds_archived_results_and_reports_unknown_ids():
    m = memory(compaction_strategy="turn_window", max_turns=1)
    _with_turns(m, 3)
    assert all(e.archived for e in m.history("c") if e.tool_call_id == "t0")
    tool = m.fetch_tool("c")
    assert tool({"tool_call_id": "t0"}).endswith(BIG)
    for bad in [
        {"tool_call_id": "nope"},
        {},
        {"tool_call_id": " "},
        {"tool_call_id": "t0", "x": 1},
        "not json",
        None,
    ]:
        output = tool.run(bad)
        assert output.is_error and output.text.startswith("Error:")
    assert tool.definition()["input_schema"]["required"] == ["tool_call_id"]
    assert tool.openai_definition()["function"]["name"] == "fetch_tool_result"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["tool", "talk", "unanswered"]), st.integers(1, 900)),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(["none", "turn_window", "token_count"]),
    st.integers(0, 3),
)
def test_a_stub_never_turns_back_into_the_full_text(steps, strategy, keep):
    """Whatever is appended and however the strategy compacts, a result once shown as a stub
    stays a stub while it is in the window; a window under the pressure mark has none."""
    m = memory(
        compaction_strategy=strategy,
        max_turns=4,
        max_tokens=1500,
        keep_recent_tool_results=keep,
        min_tool_result_compress_tokens=200,
    )
    stubbed: set[str] = set()
    for i, (kind, size) in enumerate(steps):
        content = " ".join(["w"] * size)
        if kind == "talk":
            m.add("c", [Event.user(f"q{i}"), Event.assistant(content)])
        else:
            tool_turn(m, i, content, answer=kind == "tool")
        window = m.window("c")
        now = compressed_ids(window, m.config)
        in_window = {e.id for e in window}
        assert stubbed & in_window <= now
        if sum(e.tokens or 0 for e in window) < pressure_mark(m.config):
            assert not now
        stubbed |= now
