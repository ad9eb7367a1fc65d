"""Hostile settings: random and mutated configs, node parameters, workflows (the
compacting-chat template with random edits, random JSON), store URLs and command-line
arguments. Each is accepted or refused with a ChatMemoryError subclass (ConfigurationError
for settings), never a TypeError, KeyError or driver exception; see test_hostile_input.py
for events, conversation ids and keywords."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, ChatMemoryError, MemoryConfig
from chat_memory.backends.base import MAX_CONVERSATION_ID_LENGTH
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.components import memory_settings
from chat_memory.errors import ConfigurationError
from chat_memory.host import ChatWorkflow, default_registry, import_workflow
from chat_memory.templates import template_source
from chat_memory.testing.scripted_model import scripted_client
from tests.reliability.test_hostile_input import HOSTILE_TEXT, JSON_VALUES, ON_MEMORY, SCALE

# -- configs, node parameters and workflows ------------------------------------------------------

CONFIG_NAMES = [
    "compaction_strategy",
    "compactionStrategy",
    "max_events",
    "maxEvents",
    "max_turns",
    "maxTurns",
    "max_tokens",
    "maxTokens",
    "max_events_to_keep",
    "maxEventsToKeep",
    "overlap_size",
    "overlapSize",
    "enable_conversation_search_tool",
    "enableConversationSearchTool",
    "search_page_size",
    "searchPageSize",
    "max_archived_events",
    "maxArchivedEvents",
    "summary_placement",
    "summaryPlacement",
]
ODD_VALUES = st.one_of(
    JSON_VALUES,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**30), 10**30),
    st.sampled_from(
        [
            "none",
            "sliding_window",
            "turn_window",
            "token_count",
            "recursive_summarization",
            "user_message",
            "system_prompt",
            " 3 ",
            "1e3",
            "0x10",
            "${chat_1.maxTurns}",
            "",
            "\x00",
        ]
    ),
)
PARAMETERS = st.dictionaries(
    st.one_of(st.sampled_from(CONFIG_NAMES), HOSTILE_TEXT), ODD_VALUES, max_size=6
)


@ON_MEMORY
@given(parameters=PARAMETERS)
def test_any_config_is_built_or_refused_with_a_configuration_error(parameters):
    try:
        config = MemoryConfig(**parameters)
    except ConfigurationError as exc:
        assert str(exc)
        return
    except TypeError:
        # Python itself refuses non-identifier keyword names before MemoryConfig runs.
        assume(False)
    ChatMemory(InMemoryStore(), config, summarizer=lambda previous, events, upcoming: "summary")


@ON_MEMORY
@given(
    parameters=PARAMETERS,
    node=st.sampled_from([d for d in default_registry().definitions() if d.kind == "memory"]),
)
def test_any_node_parameters_are_validated_or_refused(parameters, node):
    try:
        settings_ = memory_settings(node, parameters)
    except ConfigurationError:
        return
    assert isinstance(settings_.config, MemoryConfig)


def mutate(document: Any, draw: Any) -> Any:
    """One random edit somewhere in a JSON document: replace, delete or add a value."""
    document = copy.deepcopy(document)
    paths: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, [*path, key])
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, [*path, index])

    walk(document, [])
    path = draw(st.sampled_from(paths))
    if not path:
        return draw(JSON_VALUES)
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace" or (action == "delete" and isinstance(parent, list) and len(parent) < 1):
        parent[path[-1]] = draw(
            st.one_of(
                ODD_VALUES,
                st.sampled_from(["${chat_1.nothing}", "${", "${a.b.c}", "chatMemory/v9"]),
            )
        )
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.one_of(st.sampled_from(CONFIG_NAMES), HOSTILE_TEXT))] = draw(ODD_VALUES)
    else:
        parent.insert(path[-1], draw(ODD_VALUES))
    return document


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_templates_import_or_are_refused_and_run_or_fail_cleanly(data):
    source = template_source("compacting-chat")
    for _ in range(data.draw(st.integers(1, 3))):
        source = mutate(source, data.draw)
    text = json.dumps(source) if data.draw(st.booleans()) else source
    try:
        workflow = import_workflow(text)
    except ConfigurationError:
        return
    try:
        with ChatWorkflow(workflow, client=scripted_client(), store=InMemoryStore()) as runner:
            runner.send("c", "My first fact: codename Bluefin.")
    except ChatMemoryError:
        pass


@ON_MEMORY
@given(document=st.one_of(JSON_VALUES, st.text(max_size=30)))
def test_random_json_is_refused_as_a_workflow(document):
    with pytest.raises(ConfigurationError):
        import_workflow(document)


def test_a_workflow_edge_that_is_not_a_name_is_refused():
    source = template_source("compacting-chat")
    source["edges"][0]["from"] = []
    with pytest.raises(ConfigurationError, match="edges"):
        import_workflow(source)


BAD_URLS = [
    " ",
    "::::",
    "nope://x",
    "\ud800://x",
    "sqlite:////no-such-dir-\x00/x.db",
    "sqlite:///{tmp}/a.db?table_prefix=../x",
    "sqlite:///{tmp}/a.db?table_prefix=%27",
    "sqlite:///{tmp}/a.db?max_archived_events=abc",
    "redis://127.0.0.1:1/?prefix=%7B",
    "redis://127.0.0.1:1/?ttl_seconds=-5",
    "s3://",
    "s3://ab",
    "s3://bucket/p?endpoint_url=notaurl",
    "s3://bucket/p?region=%00",
    5,
    b"sqlite://",
]


@pytest.mark.parametrize("url", BAD_URLS, ids=[repr(u)[:40] for u in BAD_URLS])
def test_unusable_store_urls_are_configuration_errors(url, tmp_path, aws_env):
    from chat_memory import open_store

    if isinstance(url, str):
        url = url.replace("{tmp}", str(tmp_path))
    with pytest.raises(ConfigurationError):
        open_store(url)


CLI_CASES = [  # conversation "c" exists; the others are unknown (exit 1, named in the message)
    (["history", "-c", "../x"], 1),
    (["window", "-c", "*"], 1),
    (["compact", "-c", "{}", "--strategy", "none"], 1),
    (["search", "-c", "%", "%_"], 1),
    (["search", "-c", "c", "--", "-ß"], 0),
    (["search", "-c", "c", "x", "--page", "99999999999999999999999"], 0),
    (["search", "-c", "c", " "], 2),
    (["search", "-c", "c", "x", "--page", "-1"], 2),
    (["history", "-c", "x" * (MAX_CONVERSATION_ID_LENGTH + 1)], 2),
    (["history", "-c", "a\x00b"], 2),
    (["history", "--url", "nope://x"], 2),
    (["history", "--url", "s3://ab"], 2),
    (["history", "--template", "../compacting-chat"], 2),
]


@pytest.mark.parametrize("argv,code", CLI_CASES, ids=[" ".join(a)[:40] for a, _ in CLI_CASES])
def test_the_command_line_answers_hostile_arguments_with_a_message(
    argv, code, tmp_path, monkeypatch, capsys
):
    from chat_memory import ChatMemory, Event, open_store
    from chat_memory.host.cli import main

    monkeypatch.setenv("CHAT_MEMORY_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    with open_store() as store:
        ChatMemory(store).add("c", Event.user("hello"))
    assert main(argv) == code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert (captured.err if code else captured.out).strip()


@pytest.mark.parametrize(
    "message,answered",
    [
        ("", False),
        (" ", False),
        (None, False),
        (5, False),
        ("a\ud800b", False),
        ("\x00", True),
        ("\u202e" * 3, True),
        ("x" * 200_000, True),
        # larger than the model's whole context window (200k tokens): refused, never sent
        ("x" * 2_000_000, False),
    ],
    ids=[
        "empty",
        "blank",
        "none",
        "int",
        "surrogate",
        "nul",
        "rtl",
        "200k-characters",
        "2M-characters",
    ],
)
def test_the_template_answers_or_refuses_any_chat_message(message, answered):
    with ChatWorkflow(
        import_workflow(template_source("compacting-chat")),
        client=scripted_client(),
        store=InMemoryStore(),
    ) as runner:
        if answered:
            assert runner.send("c", message).reply
        else:
            with pytest.raises(ChatMemoryError):
                runner.send("c", message)


def test_any_value_of_a_strategy_setting_is_built_or_refused_with_a_configuration_error():
    """A strategy's own setting gets the same treatment as MemoryConfig's (the strategy is
    registered for this test only: other tests list the strategies)."""
    from pydantic import Field

    from chat_memory.strategies import Strategy, StrategySettings, registry

    class Depth(StrategySettings):
        depth: int = Field(2, title="Depth", description="How deep.", ge=1, le=9)
        share: float = Field(0.5, title="Share", description="How much.", gt=0, lt=1)

    class Deep(Strategy):
        name = "test_deep"
        label = "Deep"
        extra_settings = Depth

        def plan(self, window):
            return None

    @ON_MEMORY
    @given(
        parameters=st.dictionaries(
            st.sampled_from(["depth", "share", "compactionStrategy"]), ODD_VALUES, max_size=3
        )
    )
    def check(parameters):
        try:
            config = MemoryConfig(**{"compaction_strategy": "test_deep", **parameters})
        except ConfigurationError as exc:
            assert str(exc)
            return
        if config.compaction_strategy == "test_deep":
            assert 1 <= config.depth <= 9 and 0 < config.share < 1

    try:
        check()
    finally:
        registry.unregister(Deep)
