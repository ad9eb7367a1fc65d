"""Erasure (docs/lifecycle.md): ``forget``'s arguments, the guard that refuses a racing writer
for a bounded time, and erasing one conversation. The cases every lifecycle store shares
(receipts by kind, the raw-storage scan, a writer racing the erasure) are in
chat_memory/testing/lifecycle_conformance.py."""

from __future__ import annotations

import time

import pytest

from chat_memory import ChatMemory, ConcurrencyError, Event, InvalidInputError
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.lifecycle import decisions
from chat_memory.longterm import long_term_memory


def test_forget_needs_exactly_one_target():
    memory = ChatMemory(InMemoryStore())
    for arguments in ({}, {"user": "u", "conversation": "c"}, {"app": "a"}):
        with pytest.raises(InvalidInputError, match="exactly one"):
            memory.forget(**arguments)
    with pytest.raises(InvalidInputError, match="app"):
        memory.forget(conversation="c", app="a")
    with pytest.raises(InvalidInputError, match="user"):
        memory.forget(user="")


def test_forgetting_a_conversation_keeps_the_rest_of_the_scope():
    store = InMemoryStore()
    memory = ChatMemory(store)
    alice = memory.for_user("alice")
    alice.add("a", Event.user("one"))
    alice.add("b", Event.user("two"))
    memory.add("a", Event.user("unscoped a"))
    receipt = alice.forget(conversation="a")
    assert (receipt.user, receipt.conversation, receipt.conversations) == ("alice", "a", 1)
    assert [c.id for c in alice.conversations()] == ["b"]
    assert [e.content for e in memory.history("a")] == ["unscoped a"]
    assert alice.forget(conversation="a").total == 0


def test_the_guard_refuses_recreating_for_a_bounded_time(monkeypatch):
    monkeypatch.setattr(decisions, "ERASURE_GUARD_SECONDS", 0.05)
    store = InMemoryStore()
    memory = ChatMemory(store)
    alice = memory.for_user("alice")
    alice.add("c", Event.user("before"))
    files = long_term_memory(store, "notes", user="alice")
    files.create("/memories/a.md", "remember")
    memory.forget(user="alice")
    with pytest.raises(ConcurrencyError, match="being erased"):
        alice.add("c", Event.user("racing"))
    with pytest.raises(ConcurrencyError, match="being erased"):
        alice.add("another", Event.user("racing too"))
    with pytest.raises(ConcurrencyError, match="being erased"):
        files.create("/memories/b.md", "racing")
    memory.for_user("bob").add("c", Event.user("other users write on"))
    time.sleep(0.1)  # the guard's bound has passed: the user may come back
    alice.add("c", Event.user("a new start"))
    files.create("/memories/b.md", "new")
    assert [e.content for e in alice.history("c")] == ["a new start"]


def test_an_erased_conversation_guard_holds_no_user_id():
    store = InMemoryStore()
    memory = ChatMemory(store)
    memory.for_user("alice-secret-id").add("c", Event.user("x"))
    memory.forget(user="alice-secret-id")
    assert store._conversations.guards and all(
        "alice" not in name for name in store._conversations.guards
    )
