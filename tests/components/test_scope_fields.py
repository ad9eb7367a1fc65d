"""The Chat Memory nodes' scope fields (User ID, App) and their retention field: where they
stand and show, what the settings make of them, and refusals naming the field."""

from __future__ import annotations

import pytest

from chat_memory import ChatMemory, ConfigurationError, Event
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.components import MEMORY_NODE_NAMES, memory_settings
from chat_memory.host import default_registry
from chat_memory.strategies import strategy_names

REGISTRY = default_registry()
BUILTIN = REGISTRY.get("chatMemory/v2")


@pytest.mark.parametrize("name", MEMORY_NODE_NAMES)
def test_user_id_and_app_follow_the_conversation_id_on_every_v2_node(name):
    definition = REGISTRY.get(f"{name}/v2")
    in_order = [f.name for f in sorted(definition.fields, key=lambda f: f.order)]
    assert in_order[:3] == ["conversationId", "userId", "app"]
    user, app = definition.field("userId"), definition.field("app")
    assert user is not None and app is not None
    assert not user.required and not user.advanced and user.placeholder == "${chat_1.userId}"
    assert app.advanced and not app.required
    # version 1 keeps its old field set: workflows saved with it load unchanged
    assert REGISTRY.get(f"{name}/v1").field("userId") is None


@pytest.mark.parametrize("strategy", strategy_names())
def test_retention_shows_for_every_strategy_with_what_deletes_and_when(strategy):
    assert "retentionSeconds" in BUILTIN.visible_fields({"compactionStrategy": strategy})
    retention = BUILTIN.field("retentionSeconds")
    assert retention is not None and retention.advanced
    assert "sweep" in retention.description and "empty keeps them forever" in retention.description
    settings = memory_settings(BUILTIN, {"conversationId": "c", "retentionSeconds": 3600})
    assert settings.config.retention_seconds == 3600
    with pytest.raises(ConfigurationError, match=r"Retention seconds \(0\)"):
        memory_settings(BUILTIN, {"conversationId": "c", "retentionSeconds": 0})


def test_a_user_id_binds_the_memory_to_that_user():
    settings = memory_settings(BUILTIN, {"conversationId": "c", "userId": " alice ", "app": "desk"})
    assert (settings.user_id, settings.app) == ("alice", "desk")
    memory = ChatMemory(InMemoryStore())
    bound = settings.bind(memory)
    bound.add("c", Event.user("mine"))
    assert bound.scope is not None and (bound.scope.user, bound.scope.app) == ("alice", "desk")
    assert memory.history("c") == []  # kept under the scope's key, not the bare id
    assert memory.for_user("bob", app="desk").history("c") == []


@pytest.mark.parametrize("blank", [None, "", "   "])
def test_a_blank_user_id_binds_no_user(blank):
    parameters = (
        {"conversationId": "c"} if blank is None else {"conversationId": "c", "userId": blank}
    )
    settings = memory_settings(BUILTIN, parameters)
    memory = ChatMemory(InMemoryStore())
    assert settings.scope is None and settings.bind(memory) is memory
    assert settings.connection == {}  # the scope fields are not connection settings


def test_an_expression_is_left_for_run_time():
    settings = memory_settings(BUILTIN, {"conversationId": "c", "userId": "${chat_1.userId}"})
    assert settings.user_id is None


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"app": "desk"}, r"App \('desk'\) needs a User ID"),
        ({"userId": "al\x00ice"}, r"User ID: user \('al\\x00ice'\) must not contain NUL"),
        ({"userId": "x" * 257}, r"User ID: user \('x+'…\) is 257 characters"),
        ({"userId": "alice", "app": "d\x00"}, r"App: app \('d\\x00'\) must not contain NUL"),
        ({"userId": 42}, r"User ID \(42\) must be text"),
    ],
)
def test_scope_values_no_scope_takes_are_refused_naming_the_field(parameters, message):
    with pytest.raises(ConfigurationError, match=message):
        memory_settings(BUILTIN, {"conversationId": "c", **parameters})
