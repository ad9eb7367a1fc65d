"""Listing on SQL as a property (docs/lifecycle.md, "Metadata and listing"): over random
writes by two users, each user's listing is exactly their conversations, newest write first,
pages that add up to it, and the tag filter is exact; the unbound memory lists only bare ids."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event
from chat_memory.backends.sql import SQLStore

USERS = ("alice", "bob")
CONVERSATIONS = ("c0", "c1", "c2", "c3")
TAGS = ("red", "blue")

writes = st.lists(
    st.tuples(
        st.sampled_from((*USERS, None)),
        st.sampled_from(CONVERSATIONS),
        st.none() | st.frozensets(st.sampled_from(TAGS)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=writes, page_size=st.integers(1, 3))
def test_listing_is_each_scopes_newest_writes_first_paged_and_by_tag(
    writes: list[tuple[str | None, str, frozenset[str] | None]], page_size: int
) -> None:
    with SQLStore.from_url("sqlite://") as store:
        memory = ChatMemory(store)
        last_write: dict[tuple[str | None, str], int] = {}
        tags: dict[tuple[str | None, str], frozenset[str]] = {}
        for n, (user, conversation, new_tags) in enumerate(writes):
            who = memory if user is None else memory.for_user(user)
            if new_tags is None:  # an add, or else a metadata write: both are activity
                who.add(conversation, Event.user(f"write {n}"))
            else:
                who.set_metadata(conversation, tags=sorted(new_tags))
                tags[user, conversation] = new_tags
            last_write[user, conversation] = n
        for user in (*USERS, None):
            who = memory if user is None else memory.for_user(user)
            mine = sorted(
                (c for (u, c) in last_write if u == user),
                key=lambda c: -last_write[user, c],
            )
            listed = [c.id for c in who.conversations(page_size=500)]
            assert listed == mine
            paged: list[str] = []
            page = 1
            while chunk := who.conversations(page=page, page_size=page_size):
                paged += [c.id for c in chunk]
                page += 1
            assert paged == mine
            for tag in TAGS:
                tagged = [c.id for c in who.conversations(tag=tag, page_size=500)]
                assert tagged == [c for c in mine if tag in tags.get((user, c), ())]
