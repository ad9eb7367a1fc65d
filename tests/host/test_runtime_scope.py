"""The runtime with a Chat Memory node bound to a user (its User ID field): two users of one
flow under the same conversation id never see each other's history, on every store; a blank
user id is refused rather than run unscoped; the templates without a User ID run as before;
a conversation forked from the workflow continues from the fork; the user's long-term notes
are in the user's scope, so forgetting the user erases them with the conversations."""

from __future__ import annotations

import copy
import json

import anthropic
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import EventType, InvalidInputError
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.host import ChatWorkflow, import_workflow, load_template
from chat_memory.host.workflow import WorkflowError
from chat_memory.longterm import long_term_memory
from chat_memory.templates import template_source
from chat_memory.testing.scripted_model import scripted_client
from tests.support.validators import validate_anthropic_body

CID = "support"


class RecordingClaude:
    """Answers "Noted." to every request and keeps what each request showed the model."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def __call__(self, request):
        body = json.loads(request.content)
        validate_anthropic_body(body)
        self.requests.append(body)
        return httpx2.Response(
            200,
            json={
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "Noted."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        )

    def client(self):
        return anthropic.Anthropic(
            api_key="test",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
        )


def user_bound(template: str, **parameters) -> dict:
    """The template with its Chat Memory node bound to the trigger's user id."""
    source = copy.deepcopy(template_source(template))
    memory = source["nodes"][1]["clusterElements"]["memory"]
    memory["parameters"].update({"userId": "${chat_1.userId}", **parameters})
    return source


def shown_texts(body: dict) -> str:
    return json.dumps(body["messages"])


def test_two_users_of_one_flow_with_the_same_conversation_id_see_only_their_own(store):
    claude = RecordingClaude()
    runner = ChatWorkflow(import_workflow(user_bound("compacting-chat")), claude.client(), store)
    runner.send(CID, "My locker code is Heron-4411.", user_id="alice")
    runner.send(CID, "My locker code is Osprey-9092.", user_id="bob")
    runner.send(CID, "What is my locker code?", user_id="alice")
    runner.send(CID, "What is my locker code?", user_id="bob")

    # what the model was shown: each user's own turns only
    alice_asks, bob_asks = claude.requests[2], claude.requests[3]
    assert "Heron-4411" in shown_texts(alice_asks)
    assert "Osprey" not in shown_texts(alice_asks)
    assert "Osprey-9092" in shown_texts(bob_asks)
    assert "Heron" not in shown_texts(bob_asks)
    # what is stored: two conversations under one id, each with its user's two turns
    for user, code, other in (("alice", "Heron-4411", "Osprey"), ("bob", "Osprey-9092", "Heron")):
        history = runner.memory(CID, user).history(CID)
        assert [e.content for e in history] == [
            f"My locker code is {code}.",
            "Noted.",
            "What is my locker code?",
            "Noted.",
        ]
        assert runner.memory(CID, user).search(CID, other).total == 0
    # and nothing under the bare id, which any unbound flow would read
    assert CID not in store.conversations()


@settings(max_examples=20)
@given(
    st.lists(
        st.tuples(st.sampled_from(["alice", "bob", "a/b", "%2F"]), st.sampled_from(["c", "d"])),
        max_size=6,
    )
)
def test_each_user_sees_exactly_the_messages_they_sent_to_each_conversation(sends):
    # "a/b" and "%2F" are users whose scoped keys would collide under a careless encoding
    runner = ChatWorkflow(
        import_workflow(user_bound("compacting-chat", maxTurns=10)),
        RecordingClaude().client(),
        InMemoryStore(),
    )
    sent: dict[tuple[str, str], list[str]] = {}
    for index, (user, cid) in enumerate(sends):
        text = f"message {index} from {user}"
        runner.send(cid, text, user_id=user)
        sent.setdefault((user, cid), []).append(text)
    for user in ("alice", "bob", "a/b", "%2F"):
        for cid in ("c", "d"):
            memory = runner.memory(cid, user)
            said = [e.content for e in memory.history(cid) if e.type is EventType.USER]
            assert said == sent.get((user, cid), []), (user, cid)


def test_a_bound_memory_refuses_a_message_without_a_user_id():
    runner = ChatWorkflow(
        import_workflow(user_bound("compacting-chat")), RecordingClaude().client(), InMemoryStore()
    )
    with pytest.raises(WorkflowError, match=r"User ID \(''.*\$\{chat_1.userId\}\) is blank"):
        runner.send(CID, "hello")
    with pytest.raises(WorkflowError, match="User ID"):
        runner.memory(CID)


def test_a_literal_user_id_and_app_bind_every_run_of_the_flow():
    store = InMemoryStore()
    source = user_bound("compacting-chat", userId="kiosk-7", app="lobby")
    runner = ChatWorkflow(import_workflow(source), RecordingClaude().client(), store)
    runner.send(CID, "hello", user_id="ignored-by-a-literal")
    bound = runner.memory(CID)
    assert bound.scope is not None and (bound.scope.user, bound.scope.app) == ("kiosk-7", "lobby")
    assert [e.content for e in bound.history(CID)] == ["hello", "Noted."]
    assert CID not in store.conversations()


def test_the_templates_without_a_user_id_keep_their_bare_conversation_ids():
    store = InMemoryStore()
    runner = ChatWorkflow(load_template("compacting-chat"), RecordingClaude().client(), store)
    runner.send(CID, "hello", user_id="alice")
    assert store.conversations() == [CID]
    assert runner.memory(CID) is runner.memory(CID, "alice")  # the same unbound memory


def test_a_conversation_forked_from_the_workflow_continues_from_the_fork():
    claude = RecordingClaude()
    runner = ChatWorkflow(
        import_workflow(user_bound("compacting-chat")), claude.client(), InMemoryStore()
    )
    runner.send("c", "Plan A: ship on Monday.", user_id="alice")
    runner.send("c", "Plan B: ship on Friday.", user_id="alice")

    window = runner.fork("c", "c-retry", at=2, user_id="alice")  # after the first answer
    assert [e.content for e in window] == ["Plan A: ship on Monday.", "Noted."]
    runner.send("c-retry", "Plan C: ship tomorrow.", user_id="alice")

    assert "Plan B" not in shown_texts(claude.requests[-1])
    alice = runner.memory("c", "alice")
    assert [e.content for e in alice.history("c-retry")] == [
        "Plan A: ship on Monday.",
        "Noted.",
        "Plan C: ship tomorrow.",
        "Noted.",
    ]
    assert len(alice.history("c")) == 4 and "Plan C" not in json.dumps(
        [e.content for e in alice.history("c")]
    )
    # another user of the flow cannot fork alice's conversation, even knowing its id
    with pytest.raises(InvalidInputError):
        runner.fork("c", "stolen", user_id="bob")


def test_the_users_notes_are_in_their_scope_and_forgotten_with_them():
    store = InMemoryStore()
    runner = ChatWorkflow(import_workflow(user_bound("remembering-chat")), scripted_client(), store)
    runner.send("monday", "I prefer answers in French.", user_id="alice")
    alice_notes = long_term_memory(store, "alice", user="alice")
    assert alice_notes.files(), "the scripted model saves the preference"
    assert not long_term_memory(store, "alice").files()  # not in the unscoped namespace

    receipt = runner.memory("monday", "alice").forget(user="alice")

    assert receipt.conversations == 1 and receipt.long_term_files >= 1
    assert not alice_notes.files()
    assert store.conversations() == []
