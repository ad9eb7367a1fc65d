"""Property tests: whatever the traffic and whatever order the events are in, both renderings
pass the validators of their API, and nothing stored is lost from them."""

from __future__ import annotations

import json
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, EventType, InvalidEventError, to_anthropic, to_openai
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.render import MISSING_RESULT_TEXT
from tests.engine.test_properties import configs, summarize
from tests.support.helpers import fixed_tokens
from tests.support.validators import validate_anthropic_request, validate_openai_messages

TEXT = st.text(alphabet=st.sampled_from("ab c\n\t ü🙂"), min_size=0, max_size=12)
#: a small pool, so that ids repeat; some ids no provider accepts
CALL_IDS = st.sampled_from(["c1", "c2", "c3", "functions.f:0", "call id", "x" * 45, "toolu_01Ab-c"])
PLACEMENTS = st.sampled_from(["user_message", "system_prompt"])


def check(window: list[Event], system_prompt: str | None, placement: str, cache: bool) -> None:
    """Both renderings are valid, and every stored call, result and text reaches the model."""
    system, messages = to_anthropic(window, system_prompt, summary_placement=placement, cache=cache)
    openai = to_openai(window, system_prompt, summary_placement=placement)
    # a blank assistant text is the one real event that renders to nothing
    shows_messages = any(
        e.is_real and not (e.type is EventType.ASSISTANT and not e.content.strip()) for e in window
    ) or (placement == "user_message" and any(e.type is EventType.SUMMARY for e in window))
    assert bool(messages) == shows_messages
    if messages:
        validate_anthropic_request(system, messages)
        assert cache or "cache_control" not in json.dumps([system, messages])
    if openai and openai[-1]["role"] != "system":
        validate_openai_messages(openai)
    calls = [e for e in window if e.type is EventType.TOOL_CALL]
    uses = [b for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert len(uses) == len(calls)
    assert sum(len(m.get("tool_calls", [])) for m in openai) == len(calls)
    rendered = json.dumps([system, messages], ensure_ascii=False)
    for event in window:
        if event.type in (EventType.USER, EventType.TOOL_RESULT) and event.content.strip():
            assert json.dumps(event.content, ensure_ascii=False)[1:-1] in rendered


@st.composite
def any_event(draw):
    kind = draw(
        st.sampled_from(
            ["user", "assistant", "call", "call", "result", "result", "system", "summary"]
        )
    )
    if kind == "user":
        return Event.user(draw(TEXT))
    if kind == "assistant":
        return Event.assistant(draw(TEXT))
    if kind == "call":
        return Event.tool_call(
            draw(st.sampled_from(["search", "get order", ""])) or "t",
            {"q": draw(TEXT)},
            call_id=draw(CALL_IDS),
        )
    if kind == "result":
        return Event.tool_result(draw(CALL_IDS), draw(TEXT), is_error=draw(st.booleans()))
    if kind == "system":
        return Event.system(draw(TEXT))
    return Event.summary(draw(TEXT))


@settings(max_examples=600, deadline=None)
@given(
    events=st.lists(any_event(), max_size=20),
    system_prompt=st.none() | TEXT,
    placement=PLACEMENTS,
    cache=st.booleans(),
)
def test_any_window_in_any_order_renders_valid_requests(events, system_prompt, placement, cache):
    window = [e.stored(seq=i, tokens=1) for i, e in enumerate(events, start=1)]
    check(window, system_prompt, placement, cache)


@st.composite
def traffic(draw):
    """add() batches as agents produce them: user messages (some interrupting a pending call),
    assistant text (some blank), steps of parallel tool calls whose results come at once,
    later, twice, as errors or never, retried batches, and now and then a system event."""
    batches: list[list[Event]] = []
    pending: list[Event] = []
    for _ in range(draw(st.integers(1, 16))):
        action = draw(
            st.sampled_from(
                ["user", "user", "assistant", "step", "step", "late", "retry", "system"]
            )
        )
        if action == "user":
            batches.append([Event.user(draw(TEXT))])
        elif action == "assistant":
            batches.append([Event.assistant(draw(TEXT))])
        elif action == "step":
            batch: list[Event] = [Event.assistant(draw(TEXT))] if draw(st.booleans()) else []
            for _ in range(draw(st.integers(1, 3))):
                call_id = draw(CALL_IDS) if draw(st.integers(0, 3)) == 0 else None
                call = Event.tool_call("search", {"q": draw(TEXT)}, call_id=call_id)
                batch.append(call)
                fate = draw(st.sampled_from(["now", "now", "later", "never", "twice"]))
                result = Event.tool_result(
                    call.tool_call_id, draw(TEXT), is_error=draw(st.booleans())
                )
                if fate in ("now", "twice"):
                    batch.append(result)
                if fate in ("later", "twice"):
                    pending.append(
                        result
                        if fate == "later"
                        else Event.tool_result(call.tool_call_id, draw(TEXT))
                    )
            batches.append(batch)
        elif action == "late" and pending:
            batches.append([pending.pop(draw(st.integers(0, len(pending) - 1)))])
        elif action == "retry" and batches:
            batches.append(list(draw(st.sampled_from(batches))))
        elif action == "system":
            batches.append([Event.system(draw(TEXT))])
    return batches + [[result] for result in pending if draw(st.booleans())]


def replay(
    memory: ChatMemory, cid: str, batches: list[list[Event]], placement: str, cache: bool
) -> None:
    for batch in batches:
        before = len(memory.history(cid))
        try:
            memory.add(cid, batch)
        except InvalidEventError:
            assert len(memory.history(cid)) == before, "a refused add() stored something"
            note_event("an add() was refused")
            continue
        window = memory.window(cid)
        check(window, "You are an agent.", placement, cache)
        if MISSING_RESULT_TEXT in json.dumps(to_openai(window)):
            note_event("a call without a result was rendered")


@settings(max_examples=200, deadline=None)
@given(config=configs(), batches=traffic(), placement=PLACEMENTS, cache=st.booleans())
def test_random_traffic_renders_valid_requests_on_the_memory_store(
    config, batches, placement, cache
):
    memory = ChatMemory(
        InMemoryStore(max_archived_events=None),
        config,
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    replay(memory, "c", batches, placement, cache)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configs(), batches=traffic(), placement=PLACEMENTS, cache=st.booleans())
def test_random_traffic_renders_valid_requests_on_every_store(
    store, config, batches, placement, cache
):
    memory = ChatMemory(store, config, summarizer=summarize, token_counter=fixed_tokens)
    replay(memory, f"render-{uuid.uuid4().hex}", batches, placement, cache)
