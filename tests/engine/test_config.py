"""MemoryConfig validation: refused when built, messages naming the field and the value."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pydantic
import pytest

from chat_memory import ChatMemory, ConfigurationError, MemoryConfig, open_store


def test_defaults_match_the_design():
    c = MemoryConfig()
    assert c.compaction_strategy == "none"
    assert (c.max_events, c.max_turns, c.max_tokens, c.max_events_to_keep, c.overlap_size) == (
        20,
        10,
        4000,
        10,
        2,
    )
    assert (c.enable_conversation_search_tool, c.search_page_size, c.max_archived_events) == (
        False,
        10,
        None,
    )
    assert c.summary_placement.value == "user_message"


def test_camel_case_names_are_accepted():
    c = MemoryConfig(
        compactionStrategy="turn_window",
        maxTurns=3,
        enableConversationSearchTool=True,
        searchPageSize=5,
    )
    assert c == MemoryConfig(
        compaction_strategy="turn_window",
        max_turns=3,
        enable_conversation_search_tool=True,
        search_page_size=5,
    )
    assert MemoryConfig.from_mapping({"maxTokens": "500", "maxEvents": None}).max_tokens == 500


@pytest.mark.parametrize(
    "field,label",
    [
        ("max_events", "Max events"),
        ("max_turns", "Max turns"),
        ("max_tokens", "Max tokens"),
        ("max_events_to_keep", "Max events to keep"),
        ("search_page_size", "Search page size"),
        ("max_archived_events", "Max archived events"),
    ],
)
@pytest.mark.parametrize("value", [0, -3])
def test_every_limit_must_be_positive(field, label, value):
    with pytest.raises(ConfigurationError, match=rf"^{label} \({value}\) must be greater than 0$"):
        MemoryConfig(**{field: value})


def test_summarization_limits_are_checked_together():
    with pytest.raises(ConfigurationError) as info:
        MemoryConfig(
            compaction_strategy="recursive_summarization", max_events=5, max_events_to_keep=10
        )
    assert (
        str(info.value)
        == "Max events (5) must be greater than max events to keep (10) for recursive summarization"
    )
    with pytest.raises(
        ConfigurationError, match=r"Overlap size \(4\) must be less than max events to keep \(4\)"
    ):
        MemoryConfig(
            compaction_strategy="recursive_summarization",
            max_events=8,
            max_events_to_keep=4,
            overlap_size=4,
        )
    with pytest.raises(ConfigurationError, match=r"Overlap size \(-1\) must be at least 0"):
        MemoryConfig(overlap_size=-1)
    # the same numbers are fine for a strategy that does not use them
    MemoryConfig(compaction_strategy="turn_window", max_events=5, max_events_to_keep=10)


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"compaction_strategy": "fifo"}, "Compaction strategy ('fifo') must be one of"),
        ({"max_turns": "three"}, "Max turns ('three') must be a whole number"),
        ({"max_turns": True}, "Max turns (True) must be a whole number"),
        ({"max_turns": 2.5}, "Max turns (2.5) must be a whole number"),
        ({"summary_placement": "footer"}, "Summary placement ('footer') must be one of"),
        ({"maxTurnz": 3}, "Unknown setting 'maxTurnz' (value 3)"),
    ],
)
def test_bad_values_name_the_field_and_the_value(kwargs, fragment):
    with pytest.raises(ConfigurationError) as info:
        MemoryConfig(**kwargs)
    assert fragment in str(info.value)
    assert info.value.__cause__ is None  # no raw pydantic error for users to read


def test_summarization_without_a_summarizer_is_refused_when_built():
    config = MemoryConfig(compaction_strategy="recursive_summarization")
    with pytest.raises(ConfigurationError, match="Summarizer model must be configured"):
        ChatMemory(open_store("memory://"), config)


def test_config_is_immutable():
    c = MemoryConfig()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        c.max_turns = 0  # type: ignore[misc]


def test_a_limit_the_strategy_ignores_warns_naming_it_and_the_strategy_to_use(recwarn):
    config = ChatMemory(
        open_store("memory://"), {"max_turns": 20}
    ).config  # docs/async.md's old example
    assert config.max_turns == 20 and config.compaction_strategy == "none"  # kept, not refused
    [warning] = [w for w in recwarn if issubclass(w.category, UserWarning)]
    assert str(warning.message) == (
        "max_turns (20) has no effect with compaction_strategy 'none'; set compaction_strategy='turn_window'"
    )
    assert warning.filename == __file__  # points at the caller's line, not at chat-memory's code


@pytest.mark.parametrize(
    "settings, ignored",
    [
        ({"max_events": 5, "compact_to_ratio": 0.3}, ["max_events (5)", "compact_to_ratio (0.3)"]),
        ({"compaction_strategy": "turn_window", "max_tokens": 900}, ["max_tokens (900)"]),
        (
            {"compactionStrategy": "auto_compact", "maxTurns": 4, "compactToRatio": 0.25},
            ["max_turns (4)", "compact_to_ratio (0.25)"],
        ),
        ({"compaction_strategy": "token_count", "max_tokens": 900, "compact_to_ratio": 0.25}, []),
        # a canvas node fills in every default: equal to the default, nothing to say
        (
            {
                "compaction_strategy": "turn_window",
                "max_turns": 3,
                "max_events": 20,
                "max_tokens": 4000,
            },
            [],
        ),
        # read by the engine whatever the strategy: never ignored
        ({"context_window_tokens": 1000, "summary_placement": "system_prompt"}, []),
    ],
)
def test_ignored_settings_lists_each_explicit_limit_the_strategy_does_not_read(settings, ignored):
    with pytest.warns(UserWarning) if ignored else _no_user_warning():
        config = MemoryConfig.from_mapping(settings)
    messages = config.ignored_settings()
    assert [m.split(" has no effect")[0] for m in messages] == ignored
    assert all(f"compaction_strategy {config.compaction_strategy!r}" in m for m in messages)


def test_the_readers_of_a_setting_are_named_when_several_strategies_read_it():
    with pytest.warns(
        UserWarning, match="one that reads it: 'sliding_window' or 'recursive_summarization'$"
    ):
        MemoryConfig(max_events=5)


def test_the_cli_compact_config_warns_about_nothing():
    from argparse import Namespace

    from chat_memory.host.cli_session import LIMIT_FLAGS, chosen_config

    for strategy, limits in [
        ("none", {}),
        ("turn_window", {"max_turns": 3}),
        ("token_count", {"max_tokens": 900}),
    ]:
        args = Namespace(
            strategy=strategy, template=None, summarizer_model=None, **dict.fromkeys(LIMIT_FLAGS)
        )
        for name, value in limits.items():
            setattr(args, name, value)
        with _no_user_warning():
            assert chosen_config(args).ignored_settings() == []


@contextmanager
def _no_user_warning() -> Iterator[None]:
    """A block in which a UserWarning is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


@pytest.mark.parametrize("name", list(MemoryConfig.model_fields))
def test_each_setting_is_described_once_by_its_field(name):
    """The canvas field of a setting (label, help text, bounds) is its ``Field``'s, and the
    bounds the canvas shows are the ones MemoryConfig applies."""
    from chat_memory.components.fields import memory_fields

    field = MemoryConfig.model_fields[name]
    assert field.title and field.description
    [spec] = [f for f in memory_fields() if f.name == field.alias]
    assert (spec.label, spec.description) == (field.title, field.description)
    schema = spec.schema
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a limit the default strategy ignores
        if "minimum" in schema:
            assert getattr(MemoryConfig(**{name: schema["minimum"]}), name) == schema["minimum"]
            with pytest.raises(ConfigurationError, match=rf"^{field.title} \("):
                MemoryConfig(**{name: schema["minimum"] - 1})
        if "exclusiveMinimum" in schema:
            with pytest.raises(ConfigurationError, match=rf"^{field.title} \("):
                MemoryConfig(**{name: schema["exclusiveMinimum"]})
        if "maximum" in schema:
            assert getattr(MemoryConfig(**{name: schema["maximum"]}), name) == schema["maximum"]
            with pytest.raises(ConfigurationError, match=rf"^{field.title} \("):
                MemoryConfig(**{name: schema["maximum"] + 0.5})
