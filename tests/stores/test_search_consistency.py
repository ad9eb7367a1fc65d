"""Search is the same everywhere: the same history (compacted the same way) and the same
query give the same hits, in the same order, with the same archived flags and the same total
on every backend as on the in-memory store, the reference."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import SearchError
from tests.reliability.test_hostile_input import SCALE
from tests.support.helpers import fixed_tokens

# Few characters, so that keywords often hit; each is tricky for some backend's matcher.
ALPHABET = "ab AB ßSsİiı̇σςΣ%_*\\[]^$.\x00\u0301\U0001f642"
TEXT = st.text(alphabet=st.sampled_from(ALPHABET), max_size=12)
KEYWORD = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=4)


def summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    # a summary that would match many keywords: summaries must still never be hits
    return f"{previous or ''} {ALPHABET} {len(events)}"


@st.composite
def histories(draw: Any) -> list[list[Event]]:
    batches = []
    for _ in range(draw(st.integers(1, 10))):
        batch = [Event.user(draw(TEXT))]
        if draw(st.booleans()):
            call = Event.tool_call(draw(st.sampled_from(["find", "Σearch"])), {"q": draw(TEXT)})
            batch += [call, Event.tool_result(call.tool_call_id, draw(TEXT))]
        batch.append(Event.assistant(draw(TEXT)))
        if draw(st.integers(0, 5)) == 0:
            batch.append(Event.system(draw(TEXT)))
        batches.append(batch)
    return batches


CONFIGS = st.sampled_from(
    [
        MemoryConfig(),
        MemoryConfig(compaction_strategy="turn_window", max_turns=2, compact_to_ratio=1.0),
        MemoryConfig(
            compaction_strategy="sliding_window",
            max_events=4,
            max_archived_events=5,
            compact_to_ratio=1.0,
        ),
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=5,
            max_events_to_keep=2,
            overlap_size=1,
        ),
    ]
)


def shape(event: Event) -> tuple[Any, ...]:
    # summaries are written by each memory with ids of their own
    return (
        event.seq,
        event.type,
        event.content if event.type.value == "summary" else event.id,
        event.archived,
    )


def answer(memory: ChatMemory, cid: str, keyword: str, mode: str, page: int, size: int) -> Any:
    try:
        result = memory.search(cid, keyword, page=page, match_mode=mode, page_size=size)
    except SearchError as exc:
        return ("refused", str(exc))
    return (
        result.total,
        result.has_more,
        [(h.seq, h.type, h.content, h.archived) for h in result.hits],
    )


@settings(
    max_examples=25 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=histories(), config=CONFIGS, data=st.data())
def test_every_backend_searches_like_the_memory_store(store, batches, config, data):
    cid = f"same-{uuid.uuid4().hex}"
    tested = ChatMemory(store, config, summarizer=summarize, token_counter=fixed_tokens)
    reference = ChatMemory(
        InMemoryStore(), config, summarizer=summarize, token_counter=fixed_tokens
    )
    for batch in batches:
        tested.add(cid, batch)
        reference.add(cid, batch)
    assert [shape(e) for e in tested.history(cid)] == [shape(e) for e in reference.history(cid)]
    texts = [e.text() for e in reference.history(cid) if e.is_real]
    for _ in range(4):
        if texts and data.draw(st.booleans()):
            text = data.draw(st.sampled_from(texts))
            start = data.draw(st.integers(0, len(text)))
            keyword = text[start : start + data.draw(st.integers(1, 4))]
            keyword = data.draw(st.sampled_from([keyword, keyword.upper(), keyword.casefold()]))
        else:
            keyword = data.draw(KEYWORD)
        mode = data.draw(st.sampled_from(["phrase", "all", "any"]))
        size = data.draw(st.integers(1, 4))
        for page in range(3):
            assert answer(tested, cid, keyword, mode, page, size) == answer(
                reference, cid, keyword, mode, page, size
            )
