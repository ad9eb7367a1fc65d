"""What events cost, counted (never timed): an envelope is parsed once per text
(``Event.from_json``'s bounded cache, whose bytes are measured), a turn on memory:// and on
SQLite parses and serialises each new event at most once per copy the store keeps and no
stored event again, the store-assigned copies share what they can, memory:// holds under
700 bytes per event, and the cached and fast paths accept and refuse exactly what
pydantic's plain validation did."""

from __future__ import annotations

import gc
import json
import operator
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from chat_memory import ChatMemory, Event, EventType, MemoryConfig
from chat_memory.backends.bookkeeping import archived_copy, number, replaced, retracted_copy
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.sql import SQLStore
from chat_memory.events import (
    PARSE_CACHE_ENTRIES,
    PARSE_CACHE_MAX_LENGTH,
    clear_parse_cache,
    parse_cache_info,
)
from tests.support.helpers import fixed_tokens


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts real parses (``model_validate_json``) and serialisations (``model_dump_json``)
    of events, starting from an empty parse cache."""
    counts: Counter[str] = Counter()
    parse = Event.model_validate_json.__func__  # type: ignore[attr-defined]
    dump = Event.model_dump_json

    def parsing(cls: type[Event], *args: Any, **kwargs: Any) -> Event:
        counts["parsed"] += 1
        return parse(cls, *args, **kwargs)  # type: ignore[no-any-return]

    def dumping(self: Event, *args: Any, **kwargs: Any) -> str:
        counts["serialised"] += 1
        return dump(self, *args, **kwargs)

    monkeypatch.setattr(Event, "model_validate_json", classmethod(parsing))
    monkeypatch.setattr(Event, "model_dump_json", dumping)
    clear_parse_cache()
    yield counts
    clear_parse_cache()


# -- parsed once ----------------------------------------------------------------------------


def test_an_envelope_read_again_is_parsed_once_more_then_shared(counted):
    text = Event.tool_call("lookup", {"q": "x"}, call_id="c").stored(seq=1, tokens=2).to_json()
    once = Event.from_json(text)  # seen once: parsed, not kept (a new event's round trip)
    cached = Event.from_json(text)
    assert cached == once and cached is not once
    assert Event.from_json(text) is cached and Event.from_json(text) is cached
    assert counted["parsed"] == 2
    assert Event.from_json(text.encode()) == cached  # bytes are another key, the same event
    assert parse_cache_info().hits == 2


def test_envelopes_seen_once_do_not_evict_the_cached_ones(counted):
    hot = [envelope(i) for i in range(10)]
    cached = [Event.from_json(text) and Event.from_json(text) for text in hot]
    for i in range(10, 10 + 3 * PARSE_CACHE_ENTRIES):  # a history read through, once
        Event.from_json(envelope(i))
    assert parse_cache_info().currsize == len(hot)
    for text in hot:  # the seen set was emptied meanwhile: seen again, still cached
        Event.from_json(text)
    parsed = counted["parsed"]
    assert [Event.from_json(text) for text in hot] == cached
    assert all(map(operator.is_, (Event.from_json(text) for text in hot), cached))
    assert counted["parsed"] == parsed


def test_a_refused_envelope_is_refused_every_time_and_never_cached(counted):
    text = Event.user("x").to_json().replace('"user"', '"robot"')
    for _ in range(2):
        with pytest.raises(ValidationError, match="type"):
            Event.from_json(text)
    assert counted["parsed"] == 2 and parse_cache_info().currsize == 0


# -- the cache's bound -----------------------------------------------------------------------


def envelope(i: int, **fields: Any) -> str:
    event = Event(type=EventType.USER, id=f"{i:032x}", **fields)
    return event.stored(seq=i + 1, tokens=1).to_json()


def test_the_parse_cache_keeps_its_entry_count_and_skips_large_or_nested_envelopes(counted):
    for i in range(PARSE_CACHE_ENTRIES + 5):
        text = envelope(i)
        Event.from_json(text)
        Event.from_json(text)
    assert parse_cache_info().currsize == PARSE_CACHE_ENTRIES
    skipped = [
        envelope(0, content="x" * PARSE_CACHE_MAX_LENGTH),
        envelope(1, metadata={"l": [[] for _ in range(40)]}),
        envelope(2, metadata={"l": list(range(200))}),
    ]
    for text in skipped:
        assert Event.from_json(text) is not Event.from_json(text)  # parsed each time
        assert Event.from_json(text) is not Event.from_json(text)
    assert parse_cache_info().currsize == PARSE_CACHE_ENTRIES


def held_per_entry(texts: list[str]) -> float:
    """Bytes the parse cache holds per entry once it is full of ``texts`` (their text too)."""
    clear_parse_cache()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            Event.from_json(text)  # seen…
            Event.from_json(text)  # …and kept
        del text
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert parse_cache_info().currsize == len(texts)
    return held / len(texts)


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "x" * 1780},
        {"content": "\U0001f600" * 1780},
        {"metadata": {"l": ["ab"] * 110}},
        {"metadata": {f"{j:02}": [j] for j in range(29)} | {"z": [f"{j}" for j in range(85)]}},
        {"metadata": {"l": [0.5 + j for j in range(110)]}},
    ],
    ids=["long-ascii", "long-emoji", "many-strings", "many-containers", "many-floats"],
)
def test_a_full_parse_cache_holds_about_16_kib_an_entry_at_most(fields):
    texts = [envelope(i, **fields) for i in range(256)]
    assert max(map(len, texts)) <= PARSE_CACHE_MAX_LENGTH
    assert held_per_entry(texts) <= 18 * 1024


def test_a_typical_envelope_costs_the_parse_cache_under_2_kib():
    texts = [envelope(i, content=f"What is the capital of France? ({i})") for i in range(512)]
    assert held_per_entry(texts) <= 2 * 1024


# -- a turn ----------------------------------------------------------------------------------


def agent_turn(memory: ChatMemory, k: int) -> None:
    memory.add("c", Event.user(f"question {k}"))
    memory.window("c")
    call = Event.tool_call("lookup", {"k": k}, call_id=f"t-{k}")
    memory.add("c", call)
    memory.add("c", Event.tool_result(f"t-{k}", f"found {k}"))
    memory.add("c", Event.assistant(f"answer {k}"))


NEW_EVENTS_PER_TURN = 4


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_turn_parses_only_its_new_events(request, counted, kind):
    """memory:// parses each new event once (the JSON round trip every event takes) and
    serialises it once; SQLite serialises its stored copy too and parses it twice more, as
    its row is read back (seen, then kept): every stored event read after that comes from
    the cache."""
    config = MemoryConfig(compaction_strategy="turn_window", max_turns=3)
    if kind == "memory":
        store: Any = InMemoryStore()
    else:
        store = SQLStore(request.getfixturevalue("sqlite_url"))
    try:
        memory = ChatMemory(store, config, token_counter=fixed_tokens)
        for k in range(4):  # the window fills and compacts
            agent_turn(memory, k)
        counted.clear()
        turns = 3
        for k in range(4, 4 + turns):
            agent_turn(memory, k)
        new = NEW_EVENTS_PER_TURN * turns
        parsed, serialised = (1, 1) if kind == "memory" else (3, 2)
        assert counted["parsed"] <= parsed * new, counted
        assert counted["serialised"] <= serialised * new, counted
    finally:
        if kind == "sqlite":
            store.close()


# -- copies ----------------------------------------------------------------------------------


def test_a_store_copy_that_changes_nothing_is_the_event_itself():
    stored = number([Event.user("x")], after_seq=4)[0]
    assert stored.seq == 5 and number([stored], after_seq=4)[0] is stored
    archived = archived_copy(stored)
    assert archived is not stored and archived_copy(archived) is archived
    retracted = retracted_copy(archived)
    assert retracted_copy(retracted) is retracted
    # a value that is equal but not the same type (1 == True) is still a change
    assert replaced(stored, {"archived": 0}) is not stored


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "seq": st.none() | st.integers(0, 10**9),
            "archived": st.booleans(),
            "retracted": st.booleans(),
            "tokens": st.none() | st.integers(0, 10**6),
        },
    ),
    st.sampled_from(
        [
            Event.user("hi"),
            Event.tool_call("f", {"a": [1]}, call_id="c", seq=3, tokens=2),
            Event.summary("s", archived=True, metadata={"m": 1}),
        ]
    ),
)
def test_a_store_copy_equals_model_copy(changes, event):
    expected = event.model_copy(update=changes)
    copy = replaced(event, changes)
    assert copy == expected and copy.model_fields_set == expected.model_fields_set
    assert copy.to_json() == expected.to_json()
    assert copy.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)
    again = copy.model_copy(update={"content": "changed"})  # the shared set is copied
    assert copy.model_fields_set == expected.model_fields_set and again.content == "changed"


# -- memory:// holds little per event -------------------------------------------------------


def test_memory_store_holds_at_most_700_bytes_per_event():
    n = 2_000
    events = [
        Event.user(f"question {k}") if k % 2 else Event.assistant(f"answer {k}") for k in range(n)
    ]
    store = InMemoryStore(max_archived_events=None)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store.append("c", events)
        del events
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / n <= 700, held / n


# -- the fast paths accept and refuse what pydantic's plain validation does -----------------


class ReferenceEvent(BaseModel):
    """Event as it was validated before: a classmethod ``field_validator`` for created_at."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    id: str = Field(default_factory=lambda: "x")
    type: EventType
    content: str = ""
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    is_error: bool = False
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    metadata: dict[str, Any] = Field(default_factory=dict)
    seq: int | None = None
    archived: bool = False
    retracted: bool = False
    tokens: int | None = None

    @field_validator("created_at")
    @classmethod
    def _as_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        try:
            return value.astimezone(timezone.utc)
        except OverflowError:
            raise ValueError(f"created_at ({value.isoformat()}) is out of range in UTC") from None


TIMES = st.one_of(
    st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00+05:00",
            "2020-02-30T00:00:00Z",
            "now",
            "2020-01-01",
            "",
        ]
    ),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.none(),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(st.text(max_size=3), JSON_VALUES, max_size=3)
VALID_ENVELOPES = st.fixed_dictionaries(
    {"type": st.sampled_from([t.value for t in EventType])},
    optional={
        "id": st.text(max_size=8),
        "content": st.text(max_size=20),
        "tool_call_id": st.none() | st.text(max_size=8),
        "tool_name": st.none() | st.text(max_size=8),
        "arguments": st.none() | JSON_OBJECTS,
        "is_error": st.booleans(),
        "created_at": st.datetimes(timezones=st.none() | st.timezones()).map(
            lambda d: d.isoformat()
        ),
        "metadata": JSON_OBJECTS,
        "seq": st.none() | st.integers(0, 2**62),
        "archived": st.booleans(),
        "retracted": st.booleans(),
        "tokens": st.none() | st.integers(0, 2**31),
    },
)
HOSTILE_ENVELOPES = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "tool_call", "summary", "robot", 3])},
    optional={
        "id": st.text(max_size=8) | st.integers(),
        "content": st.text(max_size=20) | JSON_VALUES,
        "tool_call_id": st.none() | st.text(max_size=8),
        "arguments": st.none() | JSON_VALUES,
        "is_error": JSON_VALUES,
        "created_at": TIMES,
        "metadata": JSON_VALUES,
        "seq": JSON_VALUES,
        "archived": st.booleans() | st.sampled_from(["yes", 2]),
        "tokens": st.none() | st.integers() | st.floats(),
        "unknown": st.integers(),
    },
)


def outcome(parse: Any, data: str | bytes) -> Any:
    """What parsing ``data`` gives: the event's envelope and its created_at zone, or the
    errors (compared as text: NaN in metadata is unequal to itself)."""
    try:
        event = parse(data)
    except ValidationError as exc:
        return ("refused", [(e["loc"], e["type"], e["msg"]) for e in exc.errors()])
    return (event.model_dump_json(), event.created_at.tzinfo)


@given(VALID_ENVELOPES | HOSTILE_ENVELOPES, st.booleans())
def test_from_json_accepts_and_refuses_what_the_plain_validation_does(fields, as_bytes):
    fields.setdefault("id", "fixed-id")  # the defaults would differ between the two
    fields.setdefault("created_at", "2020-01-01T00:00:00Z")
    text = json.dumps(fields, allow_nan=True)
    data: str | bytes = text.encode() if as_bytes else text
    expected = outcome(ReferenceEvent.model_validate_json, data)
    assert expected[0] == "refused" or expected[1] is timezone.utc
    # seen once, then kept, then from the cache
    for _ in range(3):
        assert outcome(Event.from_json, data) == expected


@pytest.mark.parametrize("offset", [-5, 5, 0])
def test_an_aware_time_is_converted_to_utc_itself(offset):
    zone = timezone(timedelta(hours=offset))
    event = Event.user("x", created_at=datetime(2020, 6, 1, 12, tzinfo=zone))
    assert event.created_at.tzinfo is timezone.utc
    assert event.created_at == datetime(2020, 6, 1, 12, tzinfo=zone)
    assert Event.from_json(event.to_json()).created_at.tzinfo is timezone.utc
