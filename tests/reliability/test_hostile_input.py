"""Hostile input: odd, huge and malformed events, conversation ids, search keywords and API
arguments. Whatever comes in, chat-memory answers with a ChatMemoryError subclass (or, for
an Event built directly, a pydantic validation error), never a crash; stores every event it
accepts faithfully, on every backend alike; and never lets one conversation see another's
events. Settings, workflows, URLs and the command line: test_hostile_config.py."""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.base import MAX_CONVERSATION_ID_LENGTH
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import ConfigurationError, InvalidEventError, InvalidInputError, SearchError
from chat_memory.pins import current
from chat_memory.render import to_anthropic, to_openai
from chat_memory.search import SearchQuery, search_events, search_text
from tests.support.helpers import fixed_tokens
from tests.support.validators import validate_anthropic_request, validate_openai_messages

# Every backend is slow next to the memory store; a few examples each still reach every
# code path, the memory store (the reference) gets many more. CHAT_MEMORY_FULL=1: ten times more.
SCALE = 10 if os.environ.get("CHAT_MEMORY_FULL", "").strip() not in ("", "0") else 1
ON_EVERY_STORE = settings(
    max_examples=12 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ON_MEMORY = settings(
    max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# -- what hostile text is made of --------------------------------------------------------------

ODD_CHARACTERS = (
    "\u0301\u0308\u20dd"  # combining marks
    "\u05d0\u05d1\u0627\u0644\u202e\u202b\u200f"  # Hebrew, Arabic, RTL overrides and mark
    "\u200b\u200c\u200d\u2060\ufeff"  # zero-width characters, BOM
    "\U0001f642\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f3f3\ufe0f"  # emoji, ZWJ sequences
    "\U00010348\U0001d11e\U000e0041\U0010fffd"  # astral plane (surrogate-free)
    "\x00\x01\x07\x1b\x7f\x85\u2028\u2029\t\r\n"  # control characters, NUL included
    "ßẞİıΣσςﬁŉǅ"  # characters whose case folding changes their length or is contextual
    "%_*?[]^$\\.(){}|+'\"`;--/**/"  # regex, LIKE, Lua-pattern, glob, SQL and JSON metacharacters
)
HOSTILE_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from(ODD_CHARACTERS), st.characters(exclude_categories=("Cs",))),
    max_size=40,
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=8,
)
HOSTILE_IDS = [
    "../../etc/passwd",
    "..",
    "/",
    "*",
    "%",
    "%_%",
    "{slot}",
    "{}",
    "}{",
    "a:b:c",
    "'; DROP TABLE chat_memory_events; --",
    '"quoted"',
    "\\",
    "conv\n2",
    " ",
    "\u202eevil",
    "\U0001f642",
    "x" * MAX_CONVERSATION_ID_LENGTH,
    "\U0001f642" * MAX_CONVERSATION_ID_LENGTH,
]
CONVERSATION_IDS = st.one_of(
    st.sampled_from(HOSTILE_IDS),
    st.text(
        alphabet=st.one_of(
            st.sampled_from(ODD_CHARACTERS.replace("\x00", "")),
            st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
        ),
        min_size=1,
        max_size=60,
    ),
)


@st.composite
def hostile_batches(draw: Any) -> list[list[Event]]:
    """add() batches of hostile events: each turn a user message, maybe a tool call whose
    result comes in the same batch, maybe a reply, now and then a system event."""
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        batch = [Event.user(draw(HOSTILE_TEXT))]
        if draw(st.booleans()):
            # hostile, but unique per batch: a call id already in the window is refused
            call_id = f"{draw(HOSTILE_TEXT.filter(bool))}#{len(batches)}"
            arguments = draw(st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=3))
            batch.append(
                Event.tool_call(draw(HOSTILE_TEXT.filter(bool)), arguments, call_id=call_id)
            )
            batch.append(
                Event.tool_result(call_id, draw(HOSTILE_TEXT), is_error=draw(st.booleans()))
            )
        if draw(st.booleans()):
            batch.append(
                Event.assistant(
                    draw(HOSTILE_TEXT),
                    metadata=draw(st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=2)),
                )
            )
        if draw(st.integers(0, 4)) == 0:
            batch.append(Event.system(draw(HOSTILE_TEXT)))
        batches.append(batch)
    return batches


FIELDS_KEPT = (
    "id",
    "type",
    "content",
    "tool_call_id",
    "tool_name",
    "arguments",
    "is_error",
    "created_at",
    "metadata",
)


def as_added(event: Event) -> dict[str, Any]:
    return {name: getattr(event, name) for name in FIELDS_KEPT}


def fresh_memory(store: Any) -> ChatMemory:
    return ChatMemory(store, MemoryConfig(), token_counter=fixed_tokens)


def check_stored_faithfully(memory: ChatMemory, cid: str, batches: list[list[Event]]) -> None:
    added = [e for batch in batches for e in batch]
    history = memory.history(cid)
    assert [e.seq for e in history] == list(range(1, len(added) + 1))
    # as added, except that a result without a tool name is named after its call
    names = {e.tool_call_id: e.tool_name for e in added if e.type.value == "tool_call"}
    expected = [
        e.model_copy(update={"tool_name": names.get(e.tool_call_id)})
        if e.type.value == "tool_result" and not e.tool_name
        else e
        for e in added
    ]
    assert [as_added(e) for e in history] == [as_added(e) for e in expected]
    pinned = current(
        [
            e.model_copy(update={"seq": i})
            for i, e in enumerate(added, start=1)
            if e.type.value == "system"
        ]
    )
    assert [e.id for e in memory.window(cid)] == [e.id for e in pinned] + [
        e.id for e in added if e.type.value != "system"
    ]


def check_searches_like_the_reference(memory: ChatMemory, cid: str, keyword: str) -> None:
    """The store's answer equals the reference filter over its own history."""
    try:
        query = SearchQuery.build(keyword, "phrase", 0, 1000)
    except SearchError:
        return
    expected = search_events(memory.history(cid), query)
    got = memory.store.search(cid, query)
    assert (got.total, [e.seq for e in got.events]) == (
        expected.total,
        [e.seq for e in expected.events],
    )


# -- events, ids and keywords on every backend -------------------------------------------------


@ON_EVERY_STORE
@given(batches=hostile_batches(), data=st.data())
def test_hostile_events_are_stored_faithfully_and_found_on_every_store(store, batches, data):
    memory = fresh_memory(store)
    cid = f"events-{uuid.uuid4().hex}"
    for batch in batches:
        memory.add(cid, batch)
    check_stored_faithfully(memory, cid, batches)
    texts = [t for e in memory.history(cid) if (t := search_text(e))]
    if texts:
        text = data.draw(st.sampled_from(texts))
        start = data.draw(st.integers(0, len(text)))
        keyword = text[start : start + data.draw(st.integers(1, 12))]
        check_searches_like_the_reference(memory, cid, keyword)
    check_searches_like_the_reference(memory, cid, data.draw(HOSTILE_TEXT))


@ON_EVERY_STORE
@given(ids=st.lists(CONVERSATION_IDS, min_size=2, max_size=2, unique=True), keyword=HOSTILE_TEXT)
def test_hostile_conversation_ids_never_collide_or_leak(store, ids, keyword):
    memory = fresh_memory(store)
    first, second = ids
    for cid in ids:
        memory.clear(cid)
    memory.add(first, [Event.user(f"only in the first {keyword}"), Event.assistant("secret-one")])
    memory.add(second, [Event.user(f"only in the second {keyword}")])
    assert [e.content for e in memory.history(first)] == [
        f"only in the first {keyword}",
        "secret-one",
    ]
    assert [e.content for e in memory.history(second)] == [f"only in the second {keyword}"]
    assert memory.search(second, "secret-one").total == 0
    assert memory.search(first, "secret-one").total == 1
    assert {first, second} <= set(store.conversations())
    memory.clear(first)
    assert memory.history(first) == []
    assert memory.window(first) == []
    assert len(memory.history(second)) == 1
    memory.clear(second)


@ON_EVERY_STORE
@given(
    keyword=st.text(alphabet=st.sampled_from(ODD_CHARACTERS + "ab SSsx"), max_size=8),
    mode=st.sampled_from(["phrase", "all", "any"]),
)
def test_metacharacter_and_unicode_keywords_match_literally_on_every_store(store, keyword, mode):
    memory = fresh_memory(store)
    cid = "keywords"
    if not memory.history(cid):
        memory.add(cid, [Event.user(text) for text in KEYWORD_CORPUS])
    try:
        query = SearchQuery.build(keyword, mode, 0, 5)
    except SearchError:
        return
    expected = search_events(memory.history(cid), query)
    got = store.search(cid, query)
    assert (got.total, [e.seq for e in got.events]) == (
        expected.total,
        [e.seq for e in expected.events],
    )


KEYWORD_CORPUS = [
    "100% sure_thing a*b [x] ^start$ back\\slash (group) {brace} a.b a|b 'q' \"dq\"",
    "STRASSE and straße, ẞIG",
    "İstanbul and ISTANBUL and ıstanbul",
    "ΟΔΥΣΣΕΥΣ Οδυσσεύς ὀδυσσεύς σίσυφος",
    "ﬁle and FILE, ŉ, ǅ",
    "e\u0301 vs é, \u202eevil\u202c, zero\u200bwidth, \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "nul\x00inside and \x1b[31mred\x1b[0m",
    "%_%  __  %%  \\%  \\_",
    "%s %d ${x} {{y}} $1 \\1 %a %w+ .- [^%s]",
]

UNICODE_CASES = [
    ("STRASSE", "straße", True),
    ("straße", "STRASSE", True),
    ("straße", "ẞ", True),
    ("İstanbul", "i̇stanbul", True),
    ("İstanbul", "istanbul", False),
    ("ΟΔΥΣΣΕΥΣ", "οδυσσευς", True),
    ("Οδυσσεύς", "ΟΔΥΣΣΕΎΣ", True),
    ("file", "ﬁle", True),
    ("100%", "0%", True),
    ("100 percent", "0%", False),
    ("a_b", "a_b", True),
    ("axb", "a_b", False),
    ("a.b", "a.b", True),
    ("axb", "a.b", False),
    ("x[ab]y", "[ab]", True),
    ("xay", "[ab]", False),
    ("café", "cafe", False),
    ("nul\x00inside", "l\x00i", True),
    ("nul\x00inside", "inside", True),
]


@pytest.mark.parametrize(
    "content,keyword,found", UNICODE_CASES, ids=[repr(c[1]) for c in UNICODE_CASES]
)
def test_case_folding_and_literal_matching_agree_on_every_store(store, content, keyword, found):
    memory = fresh_memory(store)
    memory.add("fold", [Event.user(content), Event.assistant("ok")])
    assert memory.search("fold", keyword).total == int(found)
    assert memory.search("fold", keyword, match_mode="any").total == int(found)


def test_nul_is_stored_faithfully_in_every_field_on_every_store(store):
    memory = fresh_memory(store)
    batches = [
        [
            Event.user("a\x00b", metadata={"k\x00": "v\x00"}),
            Event.tool_call("tool\x00name", {"arg\x00": "val\x00ue"}, call_id="call\x00id"),
            Event.tool_result("call\x00id", "result\x00", name="tool\x00name"),
            Event.assistant("\x00"),
            Event.system("sys\x00tem"),
        ]
    ]
    memory.add("nul", batches[0])
    check_stored_faithfully(memory, "nul", batches)
    assert memory.search("nul", "\x00").total == 4
    assert memory.search("nul", "a\x00b").total == 1
    assert memory.search("nul", "val\x00ue").total == 0  # tool arguments are searched as JSON
    assert memory.search("nul", "val\\u0000ue").total == 1
    memory.store.record_compaction_error("nul", "summarizer said \x00")
    # a diagnostic, not data: SQL stores show the NUL as U+FFFD (PostgreSQL text cannot hold it)
    assert memory.stats("nul").last_compaction_error in (
        "summarizer said \x00",
        "summarizer said \ufffd",
    )


@pytest.mark.parametrize(
    "build",
    [
        lambda: [Event.user("lone \ud800 surrogate")],
        lambda: [Event.assistant("ok", metadata={"k": "\udfff"})],
        lambda: [Event.tool_call("t", {"k": "\ud83d"}, call_id="c"), Event.tool_result("c", "ok")],
        lambda: [Event.tool_call("t", {"k": object()}, call_id="c"), Event.tool_result("c", "ok")],
        lambda: [Event.user("x", metadata={"raw": b"\xff\xfe"})],
    ],
    ids=[
        "content-surrogate",
        "metadata-surrogate",
        "argument-surrogate",
        "argument-object",
        "metadata-bad-bytes",
    ],
)
def test_unstorable_events_are_refused_alike_on_every_store(store, build):
    memory = fresh_memory(store)
    memory.add("refused", Event.user("before"))
    with pytest.raises(InvalidEventError):
        memory.add("refused", [Event.user("in the same batch"), *build()])
    assert [e.content for e in memory.history("refused")] == ["before"]


def test_non_json_values_are_stored_as_their_json_alike_on_every_store(store):
    memory = fresh_memory(store)
    call = Event.tool_call("t", {"tuple": (1, "a"), "set": {3}, "nan": float("nan")}, call_id="c")
    stored = memory.add(
        "json", [call, Event.tool_result("c", "ok"), Event.user("x", metadata={"raw": b"abc"})]
    )
    expected = [{"tuple": [1, "a"], "set": [3], "nan": None}, None, None]
    assert (
        [e.arguments for e in stored] == [e.arguments for e in memory.history("json")] == expected
    )
    assert memory.history("json")[2].metadata == {"raw": "abc"}


@pytest.mark.parametrize("megabytes", [1, 5])
def test_huge_events_round_trip_on_every_store(store, megabytes):
    # larger than any model's context window: stored faithfully once the limit allows it
    memory = ChatMemory(
        store, MemoryConfig(context_window_tokens=10**9), token_counter=fixed_tokens
    )
    needle = "needle-\U0001f642-İ"
    size = megabytes * 2**20
    content = ("lorem ipsum \u05d0\u0301 " * (size // 15 + 1))[:size] + needle
    memory.add(
        "huge", [Event.user(content), Event.tool_call("t", {"blob": content[: 2**20]}, call_id="c")]
    )
    memory.add("huge", Event.tool_result("c", content))
    history = memory.history("huge")
    assert [len(e.content) for e in history] == [len(content), 0, len(content)]
    assert history[0].content == content and history[2].content == content
    assert memory.search("huge", needle.upper()).total == 2
    with pytest.raises(SearchError):
        memory.search("huge", "   ")


def test_empty_and_whitespace_content_is_kept(store):
    memory = fresh_memory(store)
    batch = [
        Event.user(""),
        Event.assistant(" "),
        Event.tool_call("t", {}, call_id="c"),
        Event.tool_result("c", ""),
    ]
    memory.add("empty", batch)
    check_stored_faithfully(memory, "empty", [batch])


@pytest.mark.parametrize(
    "cid",
    [
        "",
        "\x00",
        "a\x00b",
        "x" * (MAX_CONVERSATION_ID_LENGTH + 1),
        "lone \udc00",
        None,
        7,
        b"bytes",
        ["list"],
    ],
    ids=["empty", "nul", "inner-nul", "too-long", "surrogate", "none", "int", "bytes", "list"],
)
def test_unusable_conversation_ids_are_refused_on_every_store(store, cid):
    memory = fresh_memory(store)
    for call in (
        lambda: memory.add(cid, Event.user("x")),
        lambda: memory.window(cid),
        lambda: memory.history(cid),
        lambda: memory.search(cid, "x"),
        lambda: memory.stats(cid),
        lambda: memory.compact(cid),
        lambda: memory.clear(cid),
        lambda: memory.search_tool(cid),
    ):
        with pytest.raises(InvalidInputError):
            call()
    assert store.conversations() == []


# -- the memory store, many more examples -------------------------------------------------------


@ON_MEMORY
@given(
    batches=hostile_batches(),
    ids=st.lists(CONVERSATION_IDS, min_size=2, max_size=2, unique=True),
    keyword=HOSTILE_TEXT,
)
def test_hostile_input_on_the_memory_store(batches, ids, keyword):
    memory = fresh_memory(InMemoryStore())
    for batch in batches:
        memory.add(ids[0], batch)
    memory.add(ids[1], Event.user(keyword))
    check_stored_faithfully(memory, ids[0], batches)
    check_searches_like_the_reference(memory, ids[0], keyword)
    system, messages = to_anthropic(memory.window(ids[0]), system_prompt=keyword)
    validate_anthropic_request(system, messages)
    validate_openai_messages(to_openai(memory.window(ids[0]), system_prompt=keyword))
    if keyword.strip():
        hits = memory.search(ids[1], keyword, page_size=1000).hits
        assert [h.seq for h in hits] == [1]


TOOL_ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "keyword": st.one_of(HOSTILE_TEXT, JSON_VALUES),
        "page": st.one_of(st.integers(-5, 10**25), JSON_VALUES, st.floats()),
        "match_mode": st.one_of(
            st.sampled_from(["phrase", "all", "any", "PHRASE", ""]), JSON_VALUES
        ),
    },
)


@ON_MEMORY
@given(
    arguments=st.one_of(
        st.none(),
        JSON_VALUES,
        st.text(),
        st.binary(),
        TOOL_ARGUMENTS,
        TOOL_ARGUMENTS.map(json.dumps),
    )
)
def test_the_search_tool_answers_any_arguments_with_text(arguments):
    memory = fresh_memory(InMemoryStore())
    memory.add("tool", [Event.user("The codename is Bluefin")])
    out = memory.search_tool("tool").run(arguments)
    assert isinstance(out.text, str) and out.text


@pytest.mark.parametrize(
    "created_at",
    [
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
    ],
    ids=["after-year-9999-in-utc", "before-year-1-in-utc"],
)
def test_a_creation_time_out_of_range_in_utc_is_a_pydantic_error(created_at):
    with pytest.raises(ValidationError, match="out of range"):
        Event.user("x", created_at=created_at)


def test_extreme_json_values_round_trip_and_deep_nesting_is_refused_alike(store):
    memory = fresh_memory(store)
    values = {
        "big": 2**70,
        "small": -(2**64),
        "max": 1e308,
        "tiny": 5e-324,
        "negzero": -0.0,
        "empty": [{}, ""],
    }
    edge_times = [
        datetime.min.replace(tzinfo=timezone.utc),
        datetime.max.replace(tzinfo=timezone.utc),
    ]
    stored = memory.add(
        "c", [Event.user("x", metadata=values, created_at=when) for when in edge_times]
    )
    assert [(e.metadata, e.created_at) for e in memory.history("c")] == [
        (e.metadata, e.created_at) for e in stored
    ]
    assert [e.created_at for e in stored] == edge_times
    deep: Any = "leaf"
    for _ in range(300):
        deep = {"k": deep}
    with pytest.raises(InvalidEventError):
        memory.add("c", Event.user("too deep", metadata={"deep": deep}))
    assert len(memory.history("c")) == 2


@pytest.mark.parametrize(
    "field", ["content", "tool_name", "tool_call_id", "arguments", "metadata", "created_at", "type"]
)
def test_directly_built_events_with_wrong_field_types_are_pydantic_errors(field):
    wrong = {
        "content": 5,
        "tool_name": 5,
        "tool_call_id": [1],
        "arguments": "x",
        "metadata": 3,
        "created_at": "now",
        "type": "robot",
    }
    with pytest.raises(ValidationError):
        Event(**{"type": "user", field: wrong[field]})


# -- API misuse: refused alike on every store (each was a leak or a difference once) -------------


SUMMARIZING = MemoryConfig(
    compaction_strategy="recursive_summarization",
    max_events=3,
    max_events_to_keep=1,
    overlap_size=0,
)


MISUSE = {
    "add-none": (lambda m: m.add("c", None), InvalidEventError),
    "add-int": (lambda m: m.add("c", 5), InvalidEventError),
    "add-str": (lambda m: m.add("c", "hello"), InvalidEventError),
    "add-dict": (lambda m: m.add("c", {"type": "user"}), InvalidEventError),
    "add-list-of-none": (lambda m: m.add("c", [None]), InvalidEventError),
    "config-str": (lambda m: ChatMemory(m.store, "turn_window"), ConfigurationError),
    "config-int": (lambda m: ChatMemory(m.store, 5), ConfigurationError),
    "page-size-0": (lambda m: m.search("c", "x", page_size=0), SearchError),
    "page-size-negative": (lambda m: m.search("c", "x", page_size=-3), SearchError),
    "page-size-str": (lambda m: m.search("c", "x", page_size="3"), SearchError),
    "page-negative": (lambda m: m.search("c", "x", page=-1), SearchError),
    "page-float": (lambda m: m.search("c", "x", page=1.0), SearchError),
    "mode-list": (lambda m: m.search("c", "x", match_mode=[]), SearchError),
    "mode-unknown": (lambda m: m.search("c", "x", match_mode="regex"), SearchError),
    "keyword-surrogate": (lambda m: m.search("c", "x\udc00"), SearchError),
    "keyword-bytes": (lambda m: m.search("c", b"x"), SearchError),
}


@pytest.mark.parametrize("call,error", MISUSE.values(), ids=list(MISUSE))
def test_api_misuse_is_refused_alike_on_every_store(store, call, error):
    memory = fresh_memory(store)
    memory.add("c", [Event.user("x marks the spot")])
    with pytest.raises(error):
        call(memory)
    assert [e.content for e in memory.history("c")] == ["x marks the spot"]


@pytest.mark.parametrize("page,page_size", [(0, 10**20), (10**20, 10), (3, 2**63)])
def test_huge_pages_are_empty_or_whole_on_every_store(store, page, page_size):
    memory = fresh_memory(store)
    memory.add("c", [Event.user("x one"), Event.assistant("x two")])
    result = memory.search("c", "x", page=page, page_size=page_size)
    assert result.total == 2
    assert [h.seq for h in result.hits] == ([1, 2] if page == 0 else [])


def test_a_keyword_of_the_longest_length_is_matched_in_a_long_event_on_every_store(store):
    from chat_memory.search import MAX_KEYWORD_LENGTH

    memory = fresh_memory(store)
    long_text = "ab" * 40_000
    memory.add("c", [Event.user(long_text), Event.assistant("short")])
    assert memory.search("c", long_text[1 : 1 + MAX_KEYWORD_LENGTH].upper()).total == 1
    assert memory.search("c", long_text[: MAX_KEYWORD_LENGTH - 1] + "a").total == 0  # "…aa"


@pytest.mark.parametrize(
    "answer,stored",
    [("sum \x00 x", True), ("lone \ud800", False), (5, False), ("  ", False)],
    ids=["nul", "surrogate", "not-text", "blank"],
)
def test_odd_summaries_are_stored_or_reported_alike_on_every_store(store, answer, stored):
    memory = ChatMemory(store, SUMMARIZING, summarizer=lambda previous, events, upcoming: answer)
    for i in range(3):
        memory.add("c", [Event.user(f"u{i}"), Event.assistant("a")])
    window = memory.window("c")
    error = memory.stats("c").last_compaction_error
    if stored:
        assert window[0].content == answer and error is None
    else:
        assert window[0].content == "u0" and error.startswith("SummarizerError")
    assert sum(1 for e in memory.history("c") if e.is_real) == 6


def test_every_hostile_id_is_its_own_conversation_on_every_store(store):
    memory = fresh_memory(store)
    for n, cid in enumerate(HOSTILE_IDS):
        memory.add(cid, [Event.user(f"message {n}"), Event.assistant(f"reply {n}")])
    for n, cid in enumerate(HOSTILE_IDS):
        assert [e.content for e in memory.history(cid)] == [f"message {n}", f"reply {n}"]
        assert [h.seq for h in memory.search(cid, f"message {n}").hits] == [1]
    assert store.conversations() == sorted(HOSTILE_IDS)
    memory.clear(HOSTILE_IDS[0])
    assert store.conversations() == sorted(HOSTILE_IDS[1:])
