"""Node definitions: JSON Schema 2020-12, showIf per strategy, the same validation as
MemoryConfig, connection fields, and the registry with versions 1 and 2."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from chat_memory import ConfigurationError, MemoryConfig
from chat_memory.components import (
    MEMORY_NODE_NAMES,
    NodeRegistry,
    memory_node,
    memory_settings,
    parse_type,
)
from chat_memory.config import FIELD_LABELS
from chat_memory.host import default_registry
from chat_memory.strategies import strategy_names

REGISTRY = default_registry()
V2_MEMORY = [REGISTRY.get(f"{name}/v2") for name in MEMORY_NODE_NAMES]
MEMORY_FIELD_NAMES = {field.alias for field in MemoryConfig.model_fields.values()}

#: Which memory fields each strategy shows (beside conversationId, compactionStrategy and the
#: search tool and compression switches, which every strategy shows).
SHOWN = {
    "none": set(),
    "sliding_window": {"maxEvents", "maxArchivedEvents", "compactToRatio"},
    "turn_window": {"maxTurns", "maxArchivedEvents", "compactToRatio"},
    "token_count": {"maxTokens", "maxArchivedEvents", "compactToRatio"},
    "recursive_summarization": {
        "maxEvents",
        "maxEventsToKeep",
        "overlapSize",
        "summaryPlacement",
        "summarizerModel",
        "compactToRatio",
        "maxArchivedEvents",
        "summarizerFailuresBeforeFallback",
    },
    "auto_compact": {
        "contextWindowTokens",
        "compactAtRatio",
        "summaryPlacement",
        "summarizerModel",
        "maxArchivedEvents",
        "summarizerFailuresBeforeFallback",
    },
}
ALWAYS = {
    "conversationId",
    "userId",
    "app",
    "compactionStrategy",
    "enableConversationSearchTool",
    "compressToolResults",
    "maxToolResultTokens",
    "retentionSeconds",
}
CONNECTION = {
    "chatMemory": set(),
    "inMemoryChatMemory": set(),
    "jdbcChatMemory": {"url", "tablePrefix"},
    "redisChatMemory": {"url", "keyPrefix", "ttlSeconds"},
    "awsS3ChatMemory": {"bucket", "prefix", "region", "endpointUrl"},
}
REQUIRED_CONNECTION = {
    "chatMemory": {},
    "inMemoryChatMemory": {},
    "jdbcChatMemory": {"url": "sqlite:///chat.db"},
    "redisChatMemory": {"url": "redis://127.0.0.1:6379/0"},
    "awsS3ChatMemory": {"bucket": "chat-bucket"},
}


@pytest.mark.parametrize("definition", REGISTRY.definitions(), ids=lambda d: d.type)
def test_every_definition_is_a_valid_json_schema_2020_12(definition):
    schema = definition.schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    as_json = json.loads(json.dumps(definition.to_json()))
    assert as_json["type"] == definition.type and as_json["version"] == definition.version
    for name, prop in schema["properties"].items():
        ui = prop["x-ui"]
        assert ui["label"] and ui["description"] and isinstance(ui["order"], int), name
        for key, values in ui.get("showIf", {}).items():
            assert key in schema["properties"], f"{name} shows if unknown field {key}"
            assert isinstance(values, list) and values
            target = schema["properties"][key]
            for value in values:
                Draft202012Validator({k: v for k, v in target.items() if k != "x-ui"}).validate(
                    value
                )


def test_five_v2_memory_nodes_share_the_memory_fields_and_differ_in_connection():
    assert [d.name for d in V2_MEMORY] == list(MEMORY_NODE_NAMES)
    for definition in V2_MEMORY:
        names = {f.name for f in definition.fields}
        assert names - CONNECTION[definition.name] == MEMORY_FIELD_NAMES | {
            "conversationId",
            "userId",
            "app",
            "summarizerModel",
        }
        assert names & CONNECTION[definition.name] == CONNECTION[definition.name]
        assert definition.version == 2 and definition.kind == "memory"
        assert definition.slot("summarizerModel") is not None


def test_labels_and_defaults_come_from_memory_config():
    defaults = MemoryConfig()
    for definition in V2_MEMORY:
        for snake, field in MemoryConfig.model_fields.items():
            prop = definition.schema()["properties"][field.alias]
            assert prop["x-ui"]["label"] == FIELD_LABELS[snake]
            value = getattr(defaults, snake)
            expected = value.value if hasattr(value, "value") else value
            assert prop.get("default") == expected


#: Each memory field's JSON Schema (beside title and description) and whether it is advanced,
#: as the canvas has always had them: derived now from MemoryConfig's Field metadata.
_POSITIVE = {"type": "integer", "minimum": 1}
_RATIO = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
MEMORY_FIELD_SCHEMAS = {
    "compactionStrategy": ({"type": "string", "enum": strategy_names(), "default": "none"}, False),
    "maxEvents": ({**_POSITIVE, "default": 20}, False),
    "maxTurns": ({**_POSITIVE, "default": 10}, False),
    "maxTokens": ({**_POSITIVE, "default": 4000}, False),
    "maxEventsToKeep": ({**_POSITIVE, "default": 10}, False),
    "overlapSize": ({"type": "integer", "minimum": 0, "default": 2}, False),
    "compactToRatio": ({**_RATIO, "default": 0.5}, False),
    "summaryPlacement": (
        {"type": "string", "enum": ["user_message", "system_prompt"], "default": "user_message"},
        True,
    ),
    "summarizerModel": ({"type": ["string", "null"]}, False),
    "enableConversationSearchTool": ({"type": "boolean", "default": False}, False),
    "searchPageSize": ({**_POSITIVE, "default": 10}, True),
    "maxArchivedEvents": ({"type": ["integer", "null"], "minimum": 1}, True),
    "compressToolResults": ({"type": "boolean", "default": False}, False),
    "minToolResultCompressTokens": ({**_POSITIVE, "default": 500}, True),
    "keepRecentToolResults": ({"type": "integer", "minimum": 0, "default": 3}, True),
    "contextWindowTokens": ({**_POSITIVE, "default": 200_000}, False),
    "compactAtRatio": ({**_RATIO, "default": 0.8}, False),
    "summarizerFailuresBeforeFallback": ({**_POSITIVE, "default": 3}, True),
    "maxToolResultTokens": ({"type": ["integer", "null"], "minimum": 1}, True),
    "retentionSeconds": ({"type": ["integer", "null"], "minimum": 1}, True),
}


def test_memory_fields_keep_their_schema_order_and_canvas_hints():
    definition = REGISTRY.get("chatMemory/v2")
    in_order = sorted(definition.fields, key=lambda f: f.order)
    # Conversation ID, then whose conversations they are, then the memory settings
    assert [(f.name, f.order) for f in in_order[:3]] == [
        ("conversationId", 0),
        ("userId", 1),
        ("app", 2),
    ]
    memory = in_order[3:]
    assert [f.name for f in memory] == list(MEMORY_FIELD_SCHEMAS)
    assert [f.order for f in memory] == list(range(3, len(memory) + 3))
    for spec in memory:
        schema, advanced = MEMORY_FIELD_SCHEMAS[spec.name]
        # key order too: the JSON the canvas loads is unchanged
        assert list(spec.schema.items()) == list(schema.items()), spec.name
        assert spec.advanced is advanced, spec.name
    jdbc = REGISTRY.get("jdbcChatMemory/v2")
    assert [f.order for f in jdbc.fields if f.name in ("url", "tablePrefix")] == [23, 24]


@pytest.mark.parametrize("definition", V2_MEMORY, ids=lambda d: d.type)
@pytest.mark.parametrize("strategy", strategy_names())
def test_show_if_shows_each_strategy_only_the_fields_it_needs(definition, strategy):
    visible = set(definition.visible_fields({"compactionStrategy": strategy}))
    assert visible - CONNECTION[definition.name] == ALWAYS | SHOWN[strategy]
    with_search = set(
        definition.visible_fields(
            {"compactionStrategy": strategy, "enableConversationSearchTool": True}
        )
    )
    assert with_search - visible == {"searchPageSize"}
    compressing = set(
        definition.visible_fields({"compactionStrategy": strategy, "compressToolResults": True})
    )
    assert compressing - visible == {"minToolResultCompressTokens", "keepRecentToolResults"}


GOOD = [
    {"conversationId": "c1"},
    {
        "conversationId": "c1",
        "compactionStrategy": "turn_window",
        "maxTurns": 3,
        "enableConversationSearchTool": True,
    },
    {
        "conversationId": "c1",
        "compactionStrategy": "token_count",
        "maxTokens": 2000,
        "maxArchivedEvents": None,
    },
    {
        "conversationId": "c1",
        "compactionStrategy": "recursive_summarization",
        "maxEvents": 30,
        "maxEventsToKeep": 10,
        "overlapSize": 2,
        "summaryPlacement": "system_prompt",
        "summarizerModel": "claude-haiku-5-5",
    },
]
BAD_FOR_SCHEMA = [
    {},
    {"conversationId": ""},
    {"conversationId": "c1", "maxTurns": 0},
    {"conversationId": "c1", "maxTurns": "three"},
    {"conversationId": "c1", "compactionStrategy": "forever"},
    {"conversationId": "c1", "overlapSize": -1},
    {"conversationId": "c1", "enableConversationSearchTool": 3},
    {"conversationId": "c1", "summaryPlacement": "footer"},
    {"conversationId": "c1", "maxTurnz": 3},
]


@pytest.mark.parametrize("definition", V2_MEMORY, ids=lambda d: d.type)
def test_parameter_sets_against_the_schema_and_the_validation(definition):
    validator = Draft202012Validator(definition.schema())
    for params in GOOD:
        params = {**params, **REQUIRED_CONNECTION[definition.name]}
        validator.validate(params)
        memory_settings(definition, params)
    for params in BAD_FOR_SCHEMA:
        params = {**params, **REQUIRED_CONNECTION[definition.name]}
        assert list(validator.iter_errors(params)), params
        with pytest.raises(ConfigurationError):
            memory_settings(definition, params)


@pytest.mark.parametrize(
    "params",
    [
        {"maxTurns": 0},
        {"maxEvents": -3},
        {"maxTokens": 2.5},
        {"maxTurns": "three"},
        {"compactionStrategy": "forever"},
        {"summaryPlacement": "footer"},
        {"overlapSize": -1},
        {"searchPageSize": 0},
        {"maxArchivedEvents": 0},
        {"compactionStrategy": "recursive_summarization", "maxEvents": 5, "maxEventsToKeep": 10},
        {"compactionStrategy": "recursive_summarization", "overlapSize": 10, "maxEventsToKeep": 10},
    ],
)
def test_same_validation_messages_as_memory_config(params):
    with pytest.raises(ConfigurationError) as direct:
        MemoryConfig(**params)
    for definition in V2_MEMORY:
        node_params = {
            "conversationId": "c1",
            "summarizerModel": "claude-haiku-5-5",
            **params,
            **REQUIRED_CONNECTION[definition.name],
        }
        with pytest.raises(ConfigurationError) as from_node:
            memory_settings(definition, node_params)
        assert str(from_node.value) == str(direct.value)


def test_messages_name_the_field_label_and_the_value():
    with pytest.raises(ConfigurationError, match=r"^Max turns \(0\) must be greater than 0$"):
        memory_settings(REGISTRY.get("chatMemory/v2"), {"conversationId": "c", "maxTurns": 0})
    with pytest.raises(
        ConfigurationError,
        match=r"Max events \(5\) must be greater than max events to keep \(10\) for recursive summarization",
    ):
        memory_settings(
            REGISTRY.get("chatMemory/v2"),
            {
                "conversationId": "c",
                "compactionStrategy": "recursive_summarization",
                "maxEvents": 5,
                "summarizerModel": "claude-haiku-5-5",
            },
        )
    with pytest.raises(ConfigurationError, match=r"Database URL \(None\) is required"):
        memory_settings(REGISTRY.get("jdbcChatMemory/v2"), {"conversationId": "c"})
    with pytest.raises(
        ConfigurationError, match=r"Time to live \(seconds\) \(0\) must be at least 1"
    ):
        memory_settings(
            REGISTRY.get("redisChatMemory/v2"),
            {"conversationId": "c", "url": "redis://x", "ttlSeconds": 0},
        )
    with pytest.raises(ConfigurationError, match=r"Unknown field 'maxTurnz' \(value 3\)"):
        memory_settings(REGISTRY.get("chatMemory/v2"), {"conversationId": "c", "maxTurnz": 3})


def test_recursive_summarization_without_a_summarizer_model_is_refused():
    definition = REGISTRY.get("chatMemory/v2")
    params = {"conversationId": "c", "compactionStrategy": "recursive_summarization"}
    with pytest.raises(ConfigurationError, match=r"Summarizer model \(None\) must be configured"):
        memory_settings(definition, params)
    assert (
        memory_settings(definition, params, summarizer_model="claude-haiku-5-5").summarizer_model
        == "claude-haiku-5-5"
    )
    assert memory_settings(definition, {**params, "summarizerModel": "m"}).summarizer_model == "m"


def test_expressions_are_left_for_run_time():
    settings = memory_settings(
        REGISTRY.get("chatMemory/v2"),
        {"conversationId": "${chat_1.conversationId}", "maxTurns": "${chat_1.turns}"},
    )
    assert settings.conversation_id is None
    assert settings.config == MemoryConfig()


def test_connection_fields_become_store_targets():
    def target(name, params):
        return memory_settings(
            REGISTRY.get(f"{name}/v2"), {"conversationId": "c", **params}
        ).store_target()

    assert target("chatMemory", {}) == (None, {})
    assert target("inMemoryChatMemory", {}) == ("memory://", {})
    assert target("jdbcChatMemory", {"url": "sqlite:///x.db", "tablePrefix": "t_"}) == (
        "sqlite:///x.db",
        {"table_prefix": "t_"},
    )
    assert target("redisChatMemory", {"url": "redis://h:1/0", "ttlSeconds": 60}) == (
        "redis://h:1/0",
        {"prefix": "chat-memory:", "ttl_seconds": 60},
    )
    assert target(
        "awsS3ChatMemory",
        {
            "bucket": "bkt",
            "prefix": "a b/",
            "region": "us-east-1",
            "endpointUrl": "http://127.0.0.1:9000",
        },
    ) == ("s3://bkt/a%20b?region=us-east-1&endpoint_url=http%3A%2F%2F127.0.0.1%3A9000", {})


def test_registry_keeps_version_1_and_version_2():
    for name in MEMORY_NODE_NAMES:
        assert REGISTRY.versions(name) == [1, 2]
        assert REGISTRY.latest(name).version == 2
        assert REGISTRY.get(f"{name}/v1").version == 1
        assert f"{name}/v2" in REGISTRY and f"{name}/v3" not in REGISTRY
    v1 = REGISTRY.get("chatMemory/v1")
    assert {f.name for f in v1.fields} == {"conversationId", "maxMessages"}
    settings = memory_settings(v1, {"conversationId": "c", "maxMessages": 6})
    assert settings.config.compaction_strategy == "sliding_window"
    assert settings.config.max_events == 6
    with pytest.raises(ConfigurationError, match=r"^Max messages \(0\) must be greater than 0$"):
        memory_settings(v1, {"conversationId": "c", "maxMessages": 0})


def test_registry_errors_name_what_exists():
    with pytest.raises(
        ConfigurationError,
        match=r"chatMemory/v3.*has no version 3; registered: chatMemory/v1, chatMemory/v2",
    ):
        REGISTRY.get("chatMemory/v3")
    with pytest.raises(ConfigurationError, match=r"unknown node type 'postgresChatMemory/v2'"):
        REGISTRY.get("postgresChatMemory/v2")
    for bad in ("chatMemory", "chatMemory/2", "chatMemory/v0", "", None, "chat memory/v2"):
        with pytest.raises(ConfigurationError, match="must look like"):
            parse_type(bad)
    registry = NodeRegistry([memory_node("memory")])
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.register(memory_node("memory"))
    with pytest.raises(ConfigurationError, match="has no version 7"):
        memory_node("memory", 7)
