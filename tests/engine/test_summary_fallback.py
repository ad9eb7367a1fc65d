"""After a summarizer fallback (docs/safety-nets.md, "When the summarizer fails"): the next
summary is written from the last real summary, never from the gap note; the gap's events are
sent once, with their range; the model's window says what happened in plain words, without
the provider's raw error; and ``stats()`` counts archived real events apart from the
summaries compaction replaced."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2

from chat_memory import AnthropicSummarizer, AsyncChatMemory, ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import EventType
from chat_memory.summary_state import real_summary_text
from tests.engine.test_anthropic_summarizer import client_with, message
from tests.support.helpers import fixed_tokens, turn

RAW = 'Error code: 529 - {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
SETTINGS = {
    "compaction_strategy": "recursive_summarization",
    "max_events": 6,
    "max_events_to_keep": 2,
    "overlap_size": 0,
    "summarizer_failures_before_fallback": 2,
}


class FlakySummarizer:
    """Succeeds, except for ``failures`` calls in a row once ``fail_next`` is set; records
    exactly what each call received."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.failures = 0

    def summarize(
        self, previous: str | None, events: list[Event], upcoming: list[Event], *, gap: Any = None
    ) -> str:
        self.calls.append({"previous": previous, "seqs": [e.seq for e in events], "gap": gap})
        if self.failures:
            self.failures -= 1
            raise RuntimeError(RAW)
        return "S" + ",".join(str(e.seq) for e in events)


def summary_of(memory: ChatMemory) -> Event:
    return next(e for e in memory.window("c") if e.type is EventType.SUMMARY)


def test_after_a_fallback_the_summarizer_gets_the_last_real_summary_and_each_gap_event_once():
    summarizer = FlakySummarizer()
    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(**SETTINGS), summarizer=summarizer, token_counter=fixed_tokens
    )
    for i in range(4):
        memory.add("c", turn(f"q{i}"))
    real = summary_of(memory)
    assert (
        summarizer.calls == [{"previous": None, "seqs": [1, 2, 3, 4], "gap": None}]
        and real.content == "S1,2,3,4"
    )

    summarizer.failures = 2
    turns = 4
    while not summary_of(memory).metadata.get("unsummarized_from_seq"):
        memory.add("c", turn(f"q{turns}"))
        turns += 1
    note = summary_of(memory)
    # plain words for the model: the real summary, then what happened; no raw provider error
    assert note.content.startswith("S1,2,3,4\n\n[Events #5–#")
    assert (
        "archived without being summarized (the summarizer was unavailable: it failed 2 times in a row)"
        in note.content
    )
    assert "conversation_search" in note.content
    assert not any(raw in note.content for raw in ("529", "overloaded", "{", "RuntimeError"))
    rendered = json.dumps(memory.to_anthropic("c")[1])
    assert "overloaded" not in rendered and "RuntimeError" not in rendered
    # the operator still has the error: stats, the compaction record
    assert "overloaded_error" in memory.stats("c").last_compaction_error
    assert (
        memory.compactions("c")[-1].fallback
        and "overloaded_error" in memory.compactions("c")[-1].reason
    )
    gap_first, gap_last = (
        note.metadata["unsummarized_from_seq"],
        note.metadata["summarized_through_seq"],
    )

    calls_before = len(summarizer.calls)
    while "unsummarized_from_seq" in summary_of(memory).metadata:
        memory.add("c", turn(f"q{turns}"))
        turns += 1
    [closing] = summarizer.calls[calls_before:]
    assert closing["previous"] == "S1,2,3,4"  # never the gap note
    seqs = closing["seqs"]
    assert (
        seqs == sorted(set(seqs)) and seqs[0] == gap_first == 5
    )  # each once, none the real summary covered
    gap_seqs = [
        e.seq for e in memory.history("c") if e.is_real and gap_first <= (e.seq or 0) <= gap_last
    ]
    assert seqs[: len(gap_seqs)] == gap_seqs and closing["gap"] == (gap_first, gap_seqs[-1])
    assert summary_of(memory).content == "S" + ",".join(map(str, seqs))
    assert memory.stats("c").last_compaction_error is None


def test_with_no_real_summary_yet_the_summarizer_gets_none_and_a_plain_function_works_without_gap():
    calls: list[tuple[str | None, list[int | None]]] = []
    state = {"fail": 2}

    def summarize(previous, events, upcoming):
        calls.append((previous, [e.seq for e in events]))
        if state["fail"]:
            state["fail"] -= 1
            raise RuntimeError(RAW)
        return "first real summary"

    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(**SETTINGS), summarizer=summarize, token_counter=fixed_tokens
    )
    for i in range(8):
        memory.add("c", turn(f"q{i}"))
    assert all(previous is None for previous, _ in calls)  # the note was never a previous summary
    success = calls[2]
    assert success[1][0] == 1 and success[1] == sorted(set(success[1]))
    assert summary_of(memory).content.startswith("first real summary")


def test_the_anthropic_summarizer_is_told_the_gap_and_never_sees_the_provider_error():
    bodies: list[dict] = []
    answers = iter([529, 529, 200])

    def handler(request):
        body = json.loads(request.content)
        bodies.append(body)
        status = next(answers, 200)
        if status != 200:
            return httpx2.Response(
                status,
                json={
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                },
            )
        return httpx2.Response(200, json=message(f"summary {len(bodies)}"))

    summarizer = AnthropicSummarizer(
        model="claude-haiku-5-5", client=client_with(handler), max_retries=0
    )
    memory = ChatMemory(
        InMemoryStore(), MemoryConfig(**SETTINGS), summarizer=summarizer, token_counter=fixed_tokens
    )
    for i in range(8):
        memory.add("c", turn(f"q{i}"))
    assert len(bodies) == 3
    request = bodies[2]["messages"][0]["content"]
    assert "<previous_summary>\n(none yet)\n</previous_summary>" in request
    assert (
        "<gap>\nEvents #1–#" in request
        and "overloaded" not in request.lower()
        and "529" not in request
    )
    assert request.index("<gap>") < request.index("<events_to_summarize>")
    assert summary_of(memory).content == "summary 3"


def test_the_async_memory_sends_the_same_request_after_a_fallback():
    summarizer = FlakySummarizer()

    async def run() -> Event:
        memory = AsyncChatMemory(
            InMemoryStore(),
            MemoryConfig(**SETTINGS),
            summarizer=summarizer,
            token_counter=fixed_tokens,
        )
        for i in range(4):
            await memory.add("c", turn(f"q{i}"))
        summarizer.failures = 2
        for i in range(4, 12):
            await memory.add("c", turn(f"q{i}"))
        return next(e for e in await memory.window("c") if e.type is EventType.SUMMARY)

    summary = asyncio.run(run())
    after = [c for c in summarizer.calls[1:] if c["gap"] is not None]
    assert after and after[0]["previous"] == "S1,2,3,4" and after[0]["seqs"][0] == 5
    assert "unsummarized_from_seq" not in summary.metadata


def test_a_gap_note_written_before_its_length_was_kept_still_yields_the_real_summary():
    old = Event.summary(
        "notes\n\n[Events #5–#9 were archived without being summarized (x). …]",
        metadata={"unsummarized_from_seq": 5},
    )
    assert real_summary_text(old) == "notes"
    assert (
        real_summary_text(
            Event.summary("[Events #1–#4 were archived …]", metadata={"unsummarized_from_seq": 1})
        )
        is None
    )
    marked = Event.summary(
        "a\n\n[Events #1 in a real summary]\n\n[Events #9–#9 …]",
        metadata={"unsummarized_from_seq": 9, "summary_chars": 32},
    )
    assert real_summary_text(marked) == "a\n\n[Events #1 in a real summary]"
    assert real_summary_text(Event.summary("plain")) == "plain"


# -- what stats() counts as archived -----------------------------------------------------------


def _archived_in_history(memory: ChatMemory) -> tuple[int, int]:
    archived = [e for e in memory.history("c") if e.archived]
    summaries = sum(e.type is EventType.SUMMARY for e in archived)
    return len(archived) - summaries, summaries


def test_active_plus_archived_events_is_every_real_event_added_on_every_store(store):
    memory = ChatMemory(
        store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=5,
            max_events_to_keep=2,
            overlap_size=0,
        ),
        summarizer=lambda previous, events, upcoming: f"{previous or ''}+{len(events)}",
        token_counter=fixed_tokens,
    )
    added = 0
    for i in range(30):
        batch = turn(f"q{i}", tool=i % 3 == 0)
        memory.add("c", batch)
        added += len(batch)
        stats = memory.stats("c")
        assert stats.active_events + stats.archived_events == added, f"turn {i}: {stats}"
    assert stats.archived_summaries >= 10  # many summaries replaced, none counted as events
    assert (stats.archived_events, stats.archived_summaries) == _archived_in_history(memory)


def test_once_the_archive_cap_drops_events_the_counts_still_match_the_archive(store):
    memory = ChatMemory(
        store,
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=5,
            max_events_to_keep=2,
            overlap_size=0,
            max_archived_events=9,
        ),
        summarizer=lambda previous, events, upcoming: "summary",
        token_counter=fixed_tokens,
    )
    for i in range(25):
        memory.add("c", turn(f"q{i}"))
        stats = memory.stats("c")
        assert (stats.archived_events, stats.archived_summaries) == _archived_in_history(memory), (
            f"turn {i}"
        )
    assert stats.archived_events + stats.archived_summaries == 9  # the cap
