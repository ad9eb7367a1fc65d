"""The Chat Memory components bound to a user (User ID, App) and the Fork Conversation
component: two users of one flow under the same session id each see only their own history
(the user id given per run, as Langflow's API takes it: a tweak of the component's User ID);
a blank wired user id is refused; a fork continues from its seq and stays in its user's scope."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from lfx.custom.utils import create_component_template
from lfx.schema.message import Message

from chat_memory import ChatMemory, open_store
from chat_memory.errors import ConfigurationError, InvalidInputError
from chat_memory.integrations.langflow.export import BUNDLE, COMPONENT_FILES, export_langflow
from chat_memory.longterm import long_term_memory


def _component(name: str) -> Any:
    _, component = create_component_template(
        {"code": (BUNDLE / COMPONENT_FILES[name]).read_text(), "output_types": []}
    )
    return component


def _memory_component(url: str, conversation: str, user: str | None = None) -> Any:
    component = _component("jdbcChatMemory")
    component.url, component.conversationId = url, conversation
    if user is not None:
        component.userId = user
    return component


def test_two_users_of_one_flow_with_the_same_session_see_only_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lfx.load import run_flow_from_json

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    monkeypatch.setenv("CHAT_MEMORY_URL", url)
    flow = export_langflow("compacting-chat")
    memory_id = next(n["id"] for n in flow["data"]["nodes"] if n["data"]["type"] == "chatMemory")

    def send(user: str, message: str) -> None:
        run_flow_from_json(
            flow,
            input_value=message,
            session_id="support",
            tweaks={memory_id: {"userId": user}},
            disable_logs=True,
        )

    send("alice", "first fact: my locker code is Heron-4411")
    send("bob", "first fact: my locker code is Osprey-9092")

    with open_store(url) as store:
        memory = ChatMemory(store)
        for user, mine, theirs in (("alice", "Heron", "Osprey"), ("bob", "Osprey", "Heron")):
            seen = json.dumps([e.content for e in memory.for_user(user).history("support")])
            assert mine in seen and theirs not in seen, user
        assert "support" not in store.conversations()  # nothing under the bare session id


def test_a_blank_wired_user_id_is_refused(tmp_path: Path) -> None:
    component = _memory_component(f"sqlite:///{tmp_path / 'm.db'}", "c")
    component.userId = Message(text="  ")
    with pytest.raises(ConfigurationError, match=r"User ID \('  '\) is blank"):
        component.build_message_history()
    component.userId = ""  # unwired and empty: the flow binds no user
    assert component.build_message_history().memory.scope is None


def test_an_app_without_a_user_is_refused_naming_the_field(tmp_path: Path) -> None:
    component = _memory_component(f"sqlite:///{tmp_path / 'm.db'}", "c")
    component.app = "support"
    with pytest.raises(ConfigurationError, match=r"App \('support'\) needs a User ID"):
        component.build_message_history()


def _in_memory_component(conversation: str, user: str) -> Any:
    # the in-memory store (one per process) forks everywhere: the fork itself is the library's
    component = _component("inMemoryChatMemory")
    component.conversationId, component.userId = conversation, user
    return component


def test_fork_conversation_continues_from_its_seq_inside_the_users_scope() -> None:
    source, retry_id = f"c-{uuid.uuid4()}", f"retry-{uuid.uuid4()}"
    alice = _in_memory_component(source, "alice").build_message_history()
    alice.add_messages([HumanMessage("Plan A?"), AIMessage("Plan A is Monday.")])
    alice.add_messages([HumanMessage("Plan B?"), AIMessage("Plan B is Friday.")])

    fork = _component("forkConversation")
    fork.chat_memory, fork.newConversationId, fork.atSeq = alice, retry_id, Message(text="2")
    result = fork.build_fork()

    assert result.text == retry_id and result.data["forkedFrom"] == source
    retry = _in_memory_component(retry_id, "alice").build_message_history()
    assert [m.content for m in retry.messages] == ["Plan A?", "Plan A is Monday."]
    retry.add_messages([HumanMessage("Plan C?")])
    assert len(alice.messages) == 4  # the original never sees the fork's messages
    # bob's memory has no such conversation: a fork never crosses users
    fork.chat_memory = _in_memory_component(source, "bob").build_message_history()
    fork.newConversationId = "stolen"
    with pytest.raises(InvalidInputError):
        fork.build_fork()


def test_fork_conversation_refuses_bad_input_naming_the_field(tmp_path: Path) -> None:
    fork = _component("forkConversation")
    with pytest.raises(ConfigurationError, match=r"Chat Memory \(nothing wired\)"):
        fork.build_fork()
    fork.chat_memory = _memory_component(
        f"sqlite:///{tmp_path / 'm.db'}", "c"
    ).build_message_history()
    with pytest.raises(ConfigurationError, match=r"New conversation ID \(''\) is required"):
        fork.build_fork()
    fork.newConversationId, fork.atSeq = "c2", "two"
    with pytest.raises(ConfigurationError, match=r"At seq \('two'\) must be a whole number"):
        fork.build_fork()


def test_the_users_notes_are_kept_in_the_users_scope(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    tool = _component("autoMemoryTool")
    tool.namespace, tool.chat_memory = (
        "notes",
        _memory_component(url, "c", "alice").build_message_history(),
    )
    tool.build_tool().invoke({"command": "create", "path": "/memories/a.md", "file_text": "hi"})
    assert [f.path for f in long_term_memory(url, "notes", user="alice").files()] == [
        "/memories/a.md"
    ]
    assert long_term_memory(url, "notes").files() == []
