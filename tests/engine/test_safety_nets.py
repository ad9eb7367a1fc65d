"""The safety nets: auto-compact, forced compaction, the overflow retry, the size limits
of single events, summarizer fallback and compaction records."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from chat_memory import (
    AnthropicSummarizer,
    ChatMemory,
    ConfigurationError,
    ContextOverflowError,
    Event,
    InvalidEventError,
    MemoryConfig,
    is_context_overflow,
)
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.host import Agent
from chat_memory.testing.scripted_model import ScriptedModel
from tests.engine.test_anthropic_summarizer import client_with, message
from tests.fixtures.reliability import is_full
from tests.support.helpers import fixed_tokens, turn
from tests.support.validators import validate_anthropic_body


def failing(previous, events, upcoming):
    raise RuntimeError("summarizer down")


def recursive(store, summarizer, **overrides) -> ChatMemory:
    settings = {
        "compaction_strategy": "recursive_summarization",
        "max_events": 6,
        "max_events_to_keep": 2,
        "overlap_size": 0,
    }
    return ChatMemory(
        store,
        MemoryConfig(**{**settings, **overrides}),
        summarizer=summarizer,
        token_counter=fixed_tokens,
    )


# -- the summarizer fails ---------------------------------------------------------------------


def test_an_always_failing_summarizer_keeps_the_window_within_twice_its_limit(store, pytestconfig):
    memory = recursive(store, failing)
    turns = 500 if is_full(pytestconfig) else 60
    for i in range(turns):
        memory.add("c", turn(f"q{i}"))
        assert len([e for e in memory.window("c") if e.is_real]) <= 2 * 6, f"turn {i}"
    history = memory.history("c")
    assert sum(e.is_real for e in history) == 2 * turns  # nothing lost
    stats = memory.stats("c")
    assert (
        "summarizer down" in stats.last_compaction_error
        and "archived without a new summary" in stats.last_compaction_error
    )
    summary = next(e for e in memory.window("c") if e.type.value == "summary")
    assert (
        "archived without being summarized" in summary.content
        and "conversation_search" in summary.content
    )
    records = memory.compactions("c")
    assert records and all(r.fallback and "summarizer down" in r.reason for r in records)
    assert memory.search("c", "reply to q0").total == 1  # the archived turns stay searchable


def test_a_failure_archives_nothing_until_the_fallback_is_due():
    memory = recursive(InMemoryStore(), failing)
    for i in range(5):  # over max_events (6) from the 4th turn: failures 1 and 2 keep everything
        memory.add("c", turn(f"q{i}"))
    assert memory.stats("c").archived_events == 0 and memory.compactions("c") == []
    memory.add("c", turn("q5"))  # third consecutive failure: fall back
    assert memory.stats("c").archived_events > 0
    assert memory.compactions("c")[-1].fallback


def test_the_next_summary_that_succeeds_covers_the_gap():
    calls: list[list[str]] = []
    broken = {"on": True}

    def flaky(previous, events, upcoming):
        calls.append([e.content for e in events])
        if broken["on"]:
            raise RuntimeError("down")
        return "summary of " + ", ".join(e.content for e in events if e.type.value == "user")

    memory = recursive(InMemoryStore(), flaky, summarizer_failures_before_fallback=1)
    for i in range(4):
        memory.add("c", turn(f"q{i}"))
    gap = next(e for e in memory.window("c") if e.type.value == "summary")
    assert gap.metadata["unsummarized_from_seq"] == 1
    broken["on"] = False
    for i in range(4, 7):
        memory.add("c", turn(f"q{i}"))
    summary = next(e for e in memory.window("c") if e.type.value == "summary")
    assert "unsummarized_from_seq" not in summary.metadata
    assert summary.content.startswith("summary of q0, q1")  # the gap's turns were summarised too
    assert memory.stats("c").last_compaction_error is None
    assert not memory.compactions("c")[-1].fallback


def test_a_summarizer_that_can_never_work_is_asked_once_then_compaction_goes_on_without_it(caplog):
    requests = []

    def not_found(request):
        requests.append(request)
        return httpx2.Response(
            404,
            json={"type": "error", "error": {"type": "not_found_error", "message": "model: nope"}},
        )

    memory = recursive(
        InMemoryStore(), AnthropicSummarizer(model="nope", client=client_with(not_found))
    )
    for i in range(12):
        memory.add("c", turn(f"q{i}"))
    assert len(requests) == 1
    assert len([e for e in memory.window("c") if e.is_real]) <= 6
    assert "cannot be used: HTTP 404" in memory.stats("c").last_compaction_error
    assert sum("cannot work" in r.getMessage() for r in caplog.records) == 1


def test_the_anthropic_summarizer_bounds_each_request(monkeypatch):
    seen = []

    def handler(request):
        seen.append(request.extensions.get("timeout"))
        return httpx2.Response(200, json=message("ok"))

    summarizer = AnthropicSummarizer(client=client_with(handler), timeout=4.5, max_retries=1)
    assert summarizer.summarize(None, [Event.user("hi").stored(seq=1, tokens=1)], []) == "ok"
    assert seen and seen[0]["read"] == 4.5
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match="needs an Anthropic API key"):
        AnthropicSummarizer()
    with pytest.raises(ConfigurationError, match=r"timeout \(0\)"):
        AnthropicSummarizer(client=client_with(handler), timeout=0)


def test_a_compaction_with_nothing_to_do_clears_a_stale_error(store):
    memory = recursive(store, failing)
    for i in range(4):
        memory.add("c", turn(f"q{i}"))
    assert memory.stats("c").last_compaction_error is not None
    memory.clear("c")
    for i in range(2):
        memory.add("c", turn(f"q{i}"))
    store.record_compaction_error("c", "SummarizerError: stale")
    result = memory.compact("c")
    assert not result.compacted and memory.stats("c").last_compaction_error is None


# -- forced compaction ------------------------------------------------------------------------


def test_force_archives_everything_but_the_newest_turn_even_without_a_strategy(store):
    memory = ChatMemory(store, token_counter=fixed_tokens)
    for i in range(5):
        memory.add("c", turn(f"q{i}", tool=True))
    result = memory.compact("c", force=True)
    assert result.forced and result.archived_events == 16
    window = memory.window("c")
    assert [e.content for e in window if e.is_real][0] == "q4"
    stub = window[0]
    assert (
        stub.type.value == "summary"
        and "#1–#16" in stub.content
        and "conversation_search" in stub.content
    )
    assert memory.compactions("c")[-1].forced
    assert memory.compact("c", force=True).archived_events == 0  # only the newest turn is left


def test_force_summarises_with_a_summarizing_strategy():
    memory = recursive(
        InMemoryStore(),
        lambda p, e, u: f"{len(e)} events summarised",
        max_events=50,
        max_events_to_keep=2,
    )
    for i in range(4):
        memory.add("c", turn(f"q{i}"))
    assert memory.compact("c").archived_events == 0  # under the limit
    result = memory.compact("c", force=True)
    assert (
        result.archived_events == 6
        and result.summary.content == "6 events summarised"
        and not result.fallback
    )


# -- auto_compact -----------------------------------------------------------------------------


def test_auto_compact_needs_a_summarizer():
    with pytest.raises(
        ConfigurationError, match="Summarizer model must be configured for auto-compact"
    ):
        ChatMemory(InMemoryStore(), MemoryConfig(compaction_strategy="auto_compact"))
    with pytest.raises(
        ConfigurationError, match=r"Compact at ratio \(1.5\) must be greater than 0 and at most 1"
    ):
        MemoryConfig(compaction_strategy="auto_compact", compact_at_ratio=1.5)


def test_auto_compact_keeps_the_window_under_its_share_of_the_context_plus_the_newest_turn(store):
    summaries = []

    def summarize(previous, events, upcoming):
        summaries.append(len(events))
        return f"summary ({len(events)} more events)"

    memory = ChatMemory(
        store,
        MemoryConfig(
            compaction_strategy="auto_compact", context_window_tokens=200, compact_at_ratio=0.5
        ),
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    prefixes = set()
    for i in range(40):
        memory.add("c", turn(f"question {i} with some words", tool=i % 3 == 0))
        window = memory.window("c")
        active = [e for e in window if e.is_real]
        newest = active[[j for j, e in enumerate(active) if e.type.value == "user"][-1] :]
        assert memory.stats("c").window_tokens <= 100 + sum(e.tokens or 0 for e in newest)
        prefixes.add(window[0].id)
    records = memory.compactions("c")
    assert records and all(
        r.strategy == "auto_compact" and r.tokens_before > 100 and r.tokens_after < r.tokens_before
        for r in records
    )
    # between compactions the window only grows at its end: one prefix per compaction (plus the start)
    assert len(prefixes) == len(summaries) + 1 and len(summaries) >= len(records)


# -- records ----------------------------------------------------------------------------------


def test_compaction_records_on_every_store(store):
    config = MemoryConfig(
        compaction_strategy="turn_window", max_turns=2, compact_to_ratio=1.0
    )  # one turn each
    memory = ChatMemory(store, config, token_counter=fixed_tokens)
    for i in range(store.compaction_records_kept + 10):
        memory.add("c", turn(f"q{i}"))
    records = memory.compactions("c")
    assert len(records) == store.compaction_records_kept  # the newest are kept
    assert [r.archived_through_seq for r in records] == sorted(
        r.archived_through_seq for r in records
    )
    last = records[-1]
    assert (last.strategy, last.archived_events, last.fallback, last.summarizer) == (
        "turn_window",
        2,
        False,
        None,
    )
    # the archived turn: 'qN' (1 word) and 'reply to qN' (3 words), 4 tokens of overhead each
    assert last.tokens_before - last.tokens_after == (1 + 4) + (3 + 4)
    memory.clear("c")
    assert memory.compactions("c") == []


# -- single events that could never be sent ---------------------------------------------------


def test_an_event_larger_than_the_context_window_is_refused_with_the_sizes(store):
    memory = ChatMemory(store, MemoryConfig(context_window_tokens=50), token_counter=fixed_tokens)
    with pytest.raises(
        InvalidEventError,
        match=r"events\[1\] \(user\) has 105 tokens, more than the whole context window \(context_window_tokens = 50\)",
    ):
        memory.add("c", [Event.user("fine"), Event.user("word " * 101)])
    assert memory.history("c") == []


def test_tool_results_over_the_cap_are_cut_with_a_visible_note(store):
    memory = ChatMemory(store, MemoryConfig(max_tool_result_tokens=100, context_window_tokens=200))
    memory.add("c", [Event.user("run it"), Event.tool_call("shell", {"cmd": "ls"}, call_id="c1")])
    stored = memory.add("c", Event.tool_result("c1", "file.txt " * 1000))[0]
    assert 60 < stored.tokens <= 100 and stored.metadata["truncated_from_tokens"] > 1000
    assert (
        stored.content.startswith("file.txt file.txt")
        and "max_tool_result_tokens (100)" in stored.content
    )
    assert memory.history("c")[-1].content == stored.content


# -- the overflow safety net in the agent -----------------------------------------------------


def overflowing_client(times: int):
    """The real SDK over a mock transport that refuses the first ``times`` requests as too long."""
    model = ScriptedModel()
    refused = []

    def handler(request):
        validate_anthropic_body(json.loads(request.content))
        if len(refused) < times:
            refused.append(request)
            return httpx2.Response(
                400,
                json={
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 210000 tokens > 200000 maximum",
                    },
                },
            )
        return model(request)

    client = anthropic.Anthropic(
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    return client, refused


def test_the_agent_answers_after_one_forced_compaction():
    memory = ChatMemory(InMemoryStore(), MemoryConfig(enable_conversation_search_tool=True))
    client, refused = overflowing_client(0)
    agent = Agent(client, memory, model="claude-sonnet-5-5")
    for i in range(4):
        agent.run_turn("c", f"Fact {i}: the code is ALPHA-{i}.")
    client, refused = overflowing_client(1)
    agent.client = client
    answer = agent.run_turn("c", "What was the first fact I gave you?")
    assert len(refused) == 1 and answer.text
    assert memory.compactions("c")[-1].forced
    assert [e.content for e in memory.window("c") if e.type.value == "user"] == [
        "What was the first fact I gave you?"
    ]


def test_a_second_overflow_is_a_clear_error_naming_the_conversation():
    memory = ChatMemory(InMemoryStore())
    client, refused = overflowing_client(2)
    agent = Agent(client, memory, model="claude-sonnet-5-5")
    with pytest.raises(
        ContextOverflowError,
        match=r"conversation 'support-7' .* twice: first with \d+ window tokens",
    ):
        agent.run_turn("support-7", "hello")
    assert len(refused) == 2


def test_overflow_errors_are_recognised_by_shape():
    class Refusal(Exception):
        status_code = 400

    class OpenAIRefusal(Exception):
        code = "context_length_exceeded"

    assert is_context_overflow(Refusal("prompt is too long: 5 tokens > 4 maximum"))
    assert is_context_overflow(OpenAIRefusal("This model's maximum context length is 8192 tokens"))
    assert not is_context_overflow(Refusal("messages.0: field required"))
    assert not is_context_overflow(RuntimeError("prompt is too long"))
