"""Every event an ``add()`` stores is its JSON envelope read back (chat_memory.envelopes); a
plain event is copied instead of taking the round trip. The copy must be what the round trip
gives: the same field values of the same types, the same field set and envelope, dicts of its
own, or the same refusal."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat_memory import Event, EventType
from chat_memory.envelopes import as_stored_everywhere, read_back_alike
from chat_memory.errors import InvalidEventError

TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=6) | st.sampled_from(
    ["", "\ud800", "a\udfffb", "é", "\U0001f600", '"}\\']
)
TIMES = st.datetimes(
    timezones=st.none() | st.just(timezone.utc) | st.timezones(), allow_imaginary=True
) | st.sampled_from(
    [
        datetime(1, 1, 1, tzinfo=timezone.utc),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
        datetime(2020, 1, 1, tzinfo=timezone.utc).replace(fold=1),
        datetime(2020, 1, 1, tzinfo=timezone(timedelta(0))),
    ]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=4,
)
FIELDS = st.fixed_dictionaries(
    {"type": st.sampled_from([t for t in EventType if t is not EventType.SUMMARY])},
    optional={
        "id": TEXT,
        "content": TEXT,
        "tool_call_id": st.none() | TEXT,
        "tool_name": st.none() | TEXT,
        "arguments": st.none()
        | st.dictionaries(TEXT, JSON_VALUES, max_size=3)
        | st.dictionaries(TEXT, st.floats() | st.integers() | st.booleans() | TEXT, max_size=3),
        "is_error": st.booleans(),
        "created_at": TIMES,
        "metadata": st.just({}) | st.dictionaries(TEXT, JSON_VALUES, max_size=2),
        "seq": st.none() | st.integers(),
        "archived": st.booleans(),
        "retracted": st.booleans(),
        "tokens": st.none() | st.integers(),
    },
)


class Text(str):
    """A ``str`` subclass: JSON reads it back as a plain ``str``."""


def read_back(event: Event) -> Any:
    """What the JSON round trip gives: the event, or that it is refused."""
    try:
        return Event.model_validate_json(event.to_json())
    except ValueError:
        return "refused"


def stored(event: Event) -> Any:
    try:
        return as_stored_everywhere(0, event)
    except InvalidEventError:
        return "refused"


def assert_alike(event: Event) -> None:
    expected, got = read_back(event), stored(event)
    if expected == "refused" or got == "refused":
        assert got == expected
        return
    assert got == expected and got is not event
    assert got.model_fields_set == expected.model_fields_set
    assert got.to_json() == expected.to_json()
    for name, value in expected.__dict__.items():
        assert type(got.__dict__[name]) is type(value), name
    assert got.created_at.tzinfo is expected.created_at.tzinfo
    assert got.created_at.fold == expected.created_at.fold
    # dicts of its own: changing the caller's event later never changes the stored one
    assert got.metadata is not event.metadata
    assert got.arguments is None or got.arguments is not event.arguments


@given(FIELDS)
def test_an_event_is_stored_as_its_envelope_read_back(fields: dict[str, Any]) -> None:
    try:
        event = Event(**fields)
    except ValueError:
        return  # refused when built: never reaches an add
    assert_alike(event)


@given(FIELDS, st.sampled_from(["id", "content", "tool_call_id", "tool_name"]))
def test_a_built_around_event_is_stored_as_its_envelope_read_back(
    fields: dict[str, Any], name: str
) -> None:
    """Events made without validation (``model_construct``): odd types and times too."""
    fields[name] = Text(fields.get(name) or "x")
    assert_alike(Event.model_construct(**fields))


@pytest.mark.parametrize(
    "changes",
    [
        {"created_at": datetime(2020, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))},
        {"created_at": datetime(2020, 1, 1, 12)},
        {"created_at": datetime(2020, 1, 1, 12, tzinfo=timezone.utc).replace(fold=1)},
        {"created_at": datetime(2020, 1, 1, 12, tzinfo=timezone(timedelta(0)))},
        {"content": 5},
        {"seq": True},
        {"tokens": 1.5},
        {"is_error": 1},
        {"type": "user"},
        {"metadata": None},
    ],
    ids=repr,
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic warns of the odd types it dumps
def test_an_event_with_values_json_changes_is_read_back(changes: dict[str, Any]) -> None:
    base = Event.user("hello").__dict__
    assert_alike(Event.model_construct(**{**base, **changes}))


def test_a_plain_event_is_copied_with_dicts_of_its_own() -> None:
    event = Event.tool_call("lookup", {"order": 7, "rush": True, "w": 0.5}, call_id="c1")
    copy = read_back_alike(event)
    assert copy is not None and copy == read_back(event)
    assert copy.arguments == event.arguments and copy.arguments is not event.arguments
    assert copy.metadata == {} and copy.metadata is not event.metadata


@pytest.mark.parametrize(
    "arguments",
    [{"l": [1]}, {"d": {}}, {"x": float("nan")}, {"x": float("inf")}, {1: "a"}, {"s": "\ud800"}],
    ids=repr,
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic warns of the int key it dumps
def test_arguments_json_would_change_take_the_round_trip(arguments: dict[Any, Any]) -> None:
    event = Event.model_construct(
        **{**Event.tool_call("f", call_id="c").__dict__, "arguments": arguments}
    )
    assert read_back_alike(event) is None
    assert_alike(event)
