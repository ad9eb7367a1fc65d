"""Scopes (docs/lifecycle.md): the scoped key encoding, the scoped view of a store, and
``for_user`` on both memories. The behaviour every lifecycle store shares is in
chat_memory/testing/lifecycle_conformance.py (run by tests/stores/test_lifecycle_conformance.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat_memory import AsyncChatMemory, ChatMemory, ConfigurationError, Event, InvalidInputError
from chat_memory.backends.base import (
    AppendsWithoutWindow,
    CompactsWhileAppending,
    KeepsLifecycle,
    Retracts,
    Store,
    check_conversation_id,
)
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.sql import SQLStore
from chat_memory.lifecycle import (
    SCOPE_PREFIX,
    Scope,
    ScopedKey,
    parse_scoped_key,
    scoped_key,
    stored_key,
)
from chat_memory.lifecycle.scoped import scoped_view
from chat_memory.longterm import long_term_memory

names = st.text(st.characters(exclude_characters="\x00", codec="utf-8"), min_size=1, max_size=12)
scopes = st.builds(Scope, names, st.none() | names)


@given(scopes, names, scopes, names)
def test_scoped_keys_are_injective_and_parse_back(a, a_id, b, b_id):
    key_a, key_b = scoped_key(a, a_id), scoped_key(b, b_id)
    assert parse_scoped_key(key_a) == (a, a_id)
    assert (key_a == key_b) == ((a, a_id) == (b, b_id))
    # a scope's prefix never starts another scope's keys
    assert key_b.startswith(a.prefix) == (a == b)


@given(
    names | names.map(lambda n: SCOPE_PREFIX + n) | st.builds(scoped_key, scopes, names).map(str)
)
def test_no_bare_id_is_a_scoped_key(bare):
    if bare.startswith(SCOPE_PREFIX):
        with pytest.raises(InvalidInputError, match="reserved"):
            check_conversation_id(bare)
    else:
        assert parse_scoped_key(check_conversation_id(bare)) == (None, bare)


def test_scope_parts_are_checked_naming_the_field():
    for user, app, field in (
        ("", None, "user"),
        ("u", "", "app"),
        ("a\x00b", None, "user"),
        (7, None, "user"),
        ("u", "x" * 257, "app"),
    ):
        with pytest.raises(InvalidInputError, match=field):
            Scope(user, app)
    with pytest.raises(InvalidInputError, match="not a scoped key"):
        parse_scoped_key("~scope/only-one-part")
    assert stored_key("~scope/a/u/c") == "~scope/a/u/c"
    assert isinstance(stored_key("~scope/a/u/c"), ScopedKey) and stored_key("bare") == "bare"


def test_an_id_too_long_for_its_scope_is_refused_naming_it():
    memory = ChatMemory(InMemoryStore()).for_user("u" * 200)
    memory.add("c" * 800, Event.user("fits"))
    with pytest.raises(InvalidInputError, match="too long for scope"):
        memory.add("c" * 1000, Event.user("does not"))


def test_the_scoped_view_has_the_abilities_of_its_store():
    view = scoped_view(InMemoryStore(), Scope("u"))
    for ability in (AppendsWithoutWindow, CompactsWhileAppending, KeepsLifecycle, Retracts):
        assert isinstance(view, ability)
    assert view.default_max_archived_events == 1000
    with pytest.raises(ConfigurationError, match="do not nest"):
        scoped_view(view, Scope("v"))
    with pytest.raises(ConfigurationError, match="do not nest"):
        ChatMemory(InMemoryStore()).for_user("u").for_user("v")


class WithoutLifecycle(Store):
    """A SQL store seen through the store protocol alone (no KeepsLifecycle ability)."""

    def __init__(self, inner: SQLStore) -> None:
        self.inner = inner

    @classmethod
    def from_url(cls, url: str, **options: Any) -> WithoutLifecycle:
        return cls(SQLStore.from_url(url, **options))

    def load(self, conversation_id: str) -> Any:
        return self.inner.load(conversation_id)

    def append(self, conversation_id: str, events: Any) -> Any:
        return self.inner.append(conversation_id, events)

    def apply(self, conversation_id: str, plan: Any) -> bool:
        return self.inner.apply(conversation_id, plan)

    def history(self, conversation_id: str) -> Any:
        return self.inner.history(conversation_id)

    def search(self, conversation_id: str, query: Any) -> Any:
        return self.inner.search(conversation_id, query)

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        self.inner.record_compaction_error(conversation_id, message)

    def compactions(self, conversation_id: str) -> Any:
        return self.inner.compactions(conversation_id)

    def clear(self, conversation_id: str) -> None:
        self.inner.clear(conversation_id)

    def conversations(self) -> list[str]:
        return self.inner.conversations()


@pytest.fixture
def plain_store(sqlite_store: SQLStore) -> WithoutLifecycle:
    return WithoutLifecycle(sqlite_store)


def test_a_scoped_memory_works_on_a_store_without_the_lifecycle_ability(plain_store):
    memory = ChatMemory(plain_store, {"compaction_strategy": "turn_window", "max_turns": 1})
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    alice.add("c", [Event.user("alice 1"), Event.assistant("a")])
    alice.add("c", Event.user("alice 2"))
    bob.add("c", Event.user("bob 1"))
    assert [e.content for e in alice.window("c")] == ["alice 2"]
    assert [e.content for e in bob.history("c")] == ["bob 1"]
    assert alice.store.conversations() == ["c"]
    for call in (
        lambda: alice.conversations(),
        lambda: alice.set_metadata("c", title="t"),
        lambda: alice.sweep(),
        lambda: memory.forget(user="alice"),
        lambda: alice.forget(conversation="c"),
    ):
        with pytest.raises(ConfigurationError, match="KeepsLifecycle"):
            call()


def test_the_async_memory_refuses_the_same_without_the_ability(plain_store):
    async def main() -> None:
        memory = AsyncChatMemory(plain_store)
        bound = memory.for_user("alice")
        await bound.add("c", Event.user("hello"))
        assert [e.content for e in await bound.history("c")] == ["hello"]
        assert await bound.store.conversations() == ["c"]
        with pytest.raises(ConfigurationError, match="KeepsLifecycle"):
            await bound.conversations()
        with pytest.raises(ConfigurationError, match="KeepsLifecycle"):
            await memory.forget(user="alice")
        await bound.aclose()  # the bound memory does not own the store
        assert [e.content for e in await memory.for_user("alice").history("c")] == ["hello"]
        with pytest.raises(InvalidInputError, match="reserved"):
            await memory.history("~scope//alice/c")  # the key alice's "c" is stored under
        await memory.aclose()

    asyncio.run(main())


def test_a_user_namespace_is_reserved_to_long_term_memory_with_user():
    store = InMemoryStore()
    with pytest.raises(ConfigurationError, match="reserved"):
        long_term_memory(store, "~scope//alice/notes")
    with pytest.raises(ConfigurationError, match="needs a user"):
        long_term_memory(store, "notes", app="a")
    mine = long_term_memory(store, "notes", user="alice")
    theirs = long_term_memory(store, "notes", user="bob")
    mine.create("/memories/a.md", "alice's")
    assert theirs.files() == [] and long_term_memory(store, "notes").files() == []
