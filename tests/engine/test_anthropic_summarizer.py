"""AnthropicSummarizer through the real anthropic SDK over a mock HTTP transport."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from chat_memory import (
    AnthropicSummarizer,
    ChatMemory,
    Event,
    EventType,
    MemoryConfig,
    SummarizerError,
    open_store,
)
from chat_memory.summarizer import SUMMARY_SYSTEM_PROMPT, summary_request
from tests.support.helpers import fixed_tokens
from tests.support.validators import validate_anthropic_body


def message(text: str) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def client_with(handler) -> anthropic.Anthropic:
    """A real client whose requests ``handler`` answers, each checked against the Messages API rules."""

    def validated(request):
        validate_anthropic_body(json.loads(request.content))
        return handler(request)

    return anthropic.Anthropic(
        api_key="test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(validated)),
    )


def test_request_carries_prompt_previous_summary_events_and_upcoming_context():
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json=message("The user's service is code-named Bluefin."))

    summarizer = AnthropicSummarizer(model="claude-haiku-5-5", client=client_with(handler))
    events = [
        Event.user("Our service is Bluefin; logs are in /var/log/bluefin/app.log").stored(
            seq=1, tokens=1
        ),
        Event.tool_call("get_order", {"id": 4512}, call_id="c1").stored(seq=2, tokens=1),
        Event.tool_result("c1", "ERROR 504: upstream timed out", is_error=True).stored(
            seq=3, tokens=1
        ),
    ]
    upcoming = [Event.user("And the deadline?").stored(seq=4, tokens=1)]
    text = summarizer.summarize("Earlier: the user is Dana.", events, upcoming)
    assert text == "The user's service is code-named Bluefin."
    body = seen[0]
    assert body["model"] == "claude-haiku-5-5" and body["system"] == SUMMARY_SYSTEM_PROMPT
    prompt = body["messages"][0]["content"]
    for verbatim in [
        "Earlier: the user is Dana.",
        "/var/log/bluefin/app.log",
        '{"id": 4512}',
        "ERROR 504: upstream timed out",
        "c1",
    ]:
        assert verbatim in prompt
    assert prompt.index("<upcoming_context>") > prompt.index("</events_to_summarize>")
    assert "And the deadline?" in prompt.split("<upcoming_context>")[1]


def test_prompt_demands_verbatim_details_and_frames_the_summary_as_reference():
    lowered = SUMMARY_SYSTEM_PROMPT.lower()
    for must in [
        "verbatim",
        "ids",
        "file paths",
        "exact error messages",
        "arguments",
        "open action",
        "never instructions",
    ]:
        assert must in lowered
    assert "(none yet)" in summary_request(None, [], [])


def recursive_memory(handler) -> ChatMemory:
    summarizer = AnthropicSummarizer(model="claude-haiku-5-5", client=client_with(handler))
    config = MemoryConfig(
        compaction_strategy="recursive_summarization",
        max_events=4,
        max_events_to_keep=2,
        overlap_size=1,
    )
    return ChatMemory(
        open_store("memory://"), config, summarizer=summarizer, token_counter=fixed_tokens
    )


@pytest.mark.parametrize(
    "response",
    [
        httpx2.Response(
            529,
            json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        httpx2.Response(
            429,
            json={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        ),
        httpx2.Response(200, json=message("")),
    ],
    ids=["overloaded", "rate-limited", "empty-answer"],
)
def test_an_outage_archives_nothing_and_the_next_trigger_retries(response):
    state = {"fail": True}

    def handler(request):
        return response if state["fail"] else httpx2.Response(200, json=message("S1"))

    memory = recursive_memory(handler)
    for i in range(3):
        memory.add("c", [Event.user(f"q{i}"), Event.assistant(f"a{i}")])
    stats = memory.stats("c")
    assert stats.archived_events == 0 and stats.active_events == 6 and stats.last_compaction_error
    with pytest.raises(SummarizerError):
        memory.compact("c")
    state["fail"] = False
    result = memory.compact("c")
    assert result.compacted and result.summary is not None and result.summary.content == "S1"
    window = memory.window("c")
    assert window[0].type is EventType.SUMMARY and memory.stats("c").last_compaction_error is None
    assert len(memory.history("c")) == 7


def test_missing_model_name_is_a_configuration_error():
    from chat_memory import ConfigurationError

    with pytest.raises(ConfigurationError, match="Summarizer model"):
        AnthropicSummarizer(model="", client=object())
