"""What the Redis stores send and receive on a turn's hot path: a batch goes to append.lua as
one packed argument (byte lengths, so any text round-trips), a read sends only the keys
load.lua reads, and the common replies ('tail' after an append, 'same' after a read of a held
window) come back as one bulk string whose last field, the compaction error, may hold any
character. On the real redis-server, with bytes and with decoded (str) replies."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import ResponseError

from chat_memory import Event
from chat_memory.backends.redis import RedisStore
from chat_memory.backends.redis_io import Script
from chat_memory.backends.redis_sansio import packed_batch

pytestmark = pytest.mark.redis


@pytest.fixture(params=["bytes", "decoded"])
def wire_store(request: pytest.FixtureRequest, redis_url: str) -> Iterator[RedisStore]:
    """A store on the real server, its client returning bytes or (decode_responses) str."""
    url = redis_url + ("&decode_responses=true" if request.param == "decoded" else "")
    store = RedisStore.from_url(url)
    yield store
    store.close()


#: Texts that stress the packing: multi-byte characters (a byte length is not a str length),
#: digits and colons right after a length, the reply's separator, newlines, quotes.
TEXTS = st.text(
    alphabet=st.sampled_from(["a", "é", "語", "🙂", ":", "|", "1", "\n", '"', "\\", " "]),
    max_size=12,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(TEXTS, min_size=1, max_size=4), pinned=st.booleans())
def test_a_packed_batch_is_stored_exactly_as_given(
    redis_store: RedisStore, texts: list[str], pinned: bool
) -> None:
    cid = f"packed-{uuid.uuid4().hex}"
    batch = [
        Event.user(text) if i % 2 == 0 else Event.assistant(text) for i, text in enumerate(texts)
    ]
    if pinned:
        batch.insert(0, Event.system("be " + texts[0]))
    stored = redis_store.append_without_window(cid, batch)
    assert [(e.id, e.content, e.seq) for e in stored] == [
        (e.id, e.content, i) for i, e in enumerate(batch, start=1)
    ]
    history = redis_store.history(cid)
    assert [(e.id, e.type, e.content) for e in history] == [
        (e.id, e.type, e.content) for e in batch
    ]


def test_packed_batch_spells_byte_lengths() -> None:
    user, system = Event.user("é|1:"), Event.system("s")
    packed, sent = packed_batch([user, system])
    envelope = user.to_json().encode()
    assert packed.startswith(b"a%d:%s" % (len(envelope), envelope))
    assert [event for event, _ in sent] == [user, system]
    assert packed.endswith(
        b"p%d:%s0:" % (len(system.to_json().encode()), system.to_json().encode())
    )


def test_a_malformed_batch_is_refused_naming_the_event(redis_store: RedisStore) -> None:
    good, _ = packed_batch([Event.user("fine")])
    for bad, index in ((good + b"a99:{}0:", 1), (good + b"x3:abc0:", 1), (good[:-1], 0)):
        with pytest.raises(ResponseError, match=f"malformed append arguments at event {index}$"):
            redis_store._do(redis_store._run_steps("append", "bad", "bad", 0, "t", "w", bad))
    assert redis_store.history("bad") == []


def test_the_compaction_error_survives_the_one_string_replies(wire_store: RedisStore) -> None:
    message = "summarizer said: a|b\nc|"
    wire_store.append("c", [Event.user("first")])
    wire_store.load("c")  # the store now holds the window: the next read is answered 'same'
    wire_store.record_compaction_error("c", message)
    read = wire_store.load("c")
    assert (read.compaction_error, read.compaction_failures) == (message, 1)
    assert [e.content for e in read.window.active] == ["first"]
    after = wire_store.append("c", [Event.user("second"), Event.assistant("reply")])
    assert (after.compaction_error, after.compaction_failures) == (message, 1)
    assert [(e.content, e.seq) for e in after.window.active] == [
        ("first", 1),
        ("second", 2),
        ("reply", 3),
    ]
    assert wire_store.load("c") == after
    wire_store.record_compaction_error("c", None)
    assert wire_store.load("c").compaction_error is None


def test_a_read_sends_only_the_keys_it_reads(redis_store: RedisStore) -> None:
    redis_store.append("k", [Event.user("hello")])  # the layout is checked: no command first
    request = next(redis_store._load_steps("k"))
    assert isinstance(request, Script)
    assert request.keys == tuple(key.encode() for key in redis_store._keys("k")[:4])
    assert [key.rsplit(b":", 1)[1] for key in request.keys] == [
        b"meta",
        b"pinned",
        b"active",
        b"archive",
    ]
