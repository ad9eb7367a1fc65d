"""What only the S3 store has to prove: conditional writes under races and injected faults,
a per-turn cost that does not grow with the archive, safe keys, the bucket, the URL."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends.base import CompactionPlan
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.migrations import Migration
from chat_memory.backends.s3 import S3Store, layout
from chat_memory.backends.s3.client import make_client
from chat_memory.backends.s3.layout import Layout, conversation_key
from chat_memory.backoff import Backoff
from chat_memory.errors import ConcurrencyError, ConfigurationError, SchemaError, StorageError
from chat_memory.search import SearchQuery
from tests.conftest import WRITER_PROCESSES as WRITERS
from tests.support.helpers import fixed_tokens, seqs, turn
from tests.support.workers import s3_writer

FAST = Backoff(attempts=6, base=0.0005, cap=0.002)


class _Raw:
    """The raw body botocore reads an injected response from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self.body


def inject(
    client,
    operation: str,
    status: int,
    code: str,
    times: int,
    when: Callable[[str], bool] = lambda url: True,
):
    """Answer the next ``times`` matching requests with an S3 error instead of sending them.
    Returns the list of URLs that were answered so. Only for clients of the moto *server*:
    botocore runs every before-send handler, so moto's in-process mock would still store
    the object behind the injected error."""
    from botocore.awsrequest import AWSResponse

    answered: list[str] = []

    def handler(request, **_):
        if len(answered) < times and when(request.url):
            answered.append(request.url)
            body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
            return AWSResponse(request.url, status, {}, _Raw(body))
        return None

    client.meta.events.register_first(f"before-send.s3.{operation}", handler)
    return answered


class Traffic:
    """Requests and request-body bytes a client sends, counted by a botocore hook."""

    def __init__(self, client) -> None:
        self.requests = 0
        self.bytes = 0
        client.meta.events.register_first("before-send.s3", self._count)

    def _count(self, request, **_):
        self.requests += 1
        self.bytes += int(request.headers.get("Content-Length") or 0)

    def reset(self) -> None:
        self.requests = self.bytes = 0


def memory(store, **config) -> ChatMemory:
    return ChatMemory(
        store,
        MemoryConfig(**config),
        token_counter=fixed_tokens,
        summarizer=lambda p, e, u: "summary",
    )


def is_head(url: str) -> bool:
    return "/heads/" in url


# -- cost --------------------------------------------------------------------------------


def _per_add_cost(store: S3Store, stored: int) -> tuple[float, float]:
    """Grow a conversation to ``stored`` events (in big batches), then measure 32 turns (after
    enough turns that the head holds its full set of compaction records, as any long
    conversation's does: a head still filling up would look cheaper)."""
    m = memory(store, compaction_strategy="turn_window", max_turns=3)
    while store.load("c").last_seq < stored:
        m.add("c", [e for i in range(100) for e in turn(f"seed {i} " + "lorem ipsum " * 8)])
    while len(store.compactions("c")) < store.compaction_records_kept:
        m.add("c", turn("warm-up " + "lorem ipsum " * 8))
    traffic = Traffic(store.client)
    for i in range(32):
        m.add("c", turn(f"question {i} " + "lorem ipsum " * 8))
    return traffic.requests / 32, traffic.bytes / 32


def test_requests_and_bytes_per_add_do_not_grow_with_the_archive(s3_mock_client):
    small = S3Store(s3_mock_client, "cost-bucket", "small")
    large = S3Store(s3_mock_client, "cost-bucket", "large")
    small_requests, small_bytes = _per_add_cost(small, 200)
    large_requests, large_bytes = _per_add_cost(large, 4000)
    assert large.load("c").archived_count == 1000 and small.load("c").archived_count < 400
    # 20x the stored events; the head lists a few more segment refs (~40 bytes each)
    assert large_requests <= small_requests * 1.1
    assert large_bytes <= small_bytes * 1.25


def test_without_a_cap_the_head_grows_by_one_small_ref_per_segment(s3_mock_client):
    store = S3Store(s3_mock_client, "cost-bucket", "unbounded", max_archived_events=None)
    m = memory(store, compaction_strategy="turn_window", max_turns=3)
    sizes = []
    for _ in range(2):
        for _ in range(10):
            m.add("c", [e for i in range(100) for e in turn(f"seed {i}")])
        head = store._read_head("c")[0]
        # less the fork timeline's inline entries: bounded apart (tests/stores/test_s3_transfer.py)
        timeline = len(json.dumps(head.timeline.to_json(), separators=(",", ":")))
        sizes.append((head.archived_count, len(head.segments), len(head.to_bytes()) - timeline))
    (archived_1, refs_1, bytes_1), (archived_2, refs_2, bytes_2) = sizes
    assert archived_2 >= 3900 and refs_2 <= archived_2 // 128 + 2
    assert (bytes_2 - bytes_1) / (refs_2 - refs_1) < 60


def test_an_append_is_one_conditional_put_when_writing_alone(s3_mock_store):
    m = memory(s3_mock_store)
    m.add("c", turn("first"))
    traffic = Traffic(s3_mock_store.client)
    m.add("c", turn("second"))
    assert traffic.requests == 1


# -- conditional writes --------------------------------------------------------------------


@pytest.mark.s3
def test_a_412_storm_is_retried_until_the_write_lands(s3_server_store):
    m = memory(s3_server_store)
    m.add("c", turn("before"))
    answered = inject(
        s3_server_store.client, "PutObject", 412, "PreconditionFailed", times=5, when=is_head
    )
    stored = m.add("c", turn("during"))
    assert len(answered) == 5
    assert seqs(stored) == [3, 4]
    assert [e.content for e in m.history("c")] == [
        "before",
        "reply to before",
        "during",
        "reply to during",
    ]


@pytest.mark.s3
def test_a_409_conditional_conflict_is_retried_too(s3_server_store):
    m = memory(s3_server_store)
    answered = inject(
        s3_server_store.client,
        "PutObject",
        409,
        "ConditionalRequestConflict",
        times=3,
        when=is_head,
    )
    m.add("c", turn("x"))
    assert len(answered) == 3 and len(m.history("c")) == 2


@pytest.mark.s3
def test_a_persistent_storm_raises_concurrency_error_and_loses_nothing(s3_server_url):
    store = S3Store.from_url(s3_server_url, backoff=FAST)
    m = memory(store)
    m.add("c", turn("kept"))
    inject(store.client, "PutObject", 412, "PreconditionFailed", times=FAST.attempts, when=is_head)
    with pytest.raises(ConcurrencyError):
        m.add("c", turn("refused"))
    assert [e.content for e in m.history("c")] == ["kept", "reply to kept"]
    m.add("c", turn("after"))
    assert seqs(m.history("c")) == [1, 2, 3, 4]
    store.close()


@pytest.mark.s3
def test_a_compaction_that_loses_its_race_leaves_no_orphaned_segment(s3_server_store):
    store = s3_server_store
    m = memory(store, compaction_strategy="turn_window", max_turns=5)
    for i in range(5):
        m.add("c", turn(f"t{i}"))
    snapshot = store.load("c")
    # the segment PUT succeeds, the head PUT loses: the segment must be deleted again
    answered = inject(store.client, "PutObject", 412, "PreconditionFailed", times=1, when=is_head)
    store.backoff = FAST
    assert (
        store.apply("c", CompactionPlan(expected_version=snapshot.version, archive_through_seq=4))
        is True
    )
    assert len(answered) == 1
    head = store._read_head("c")[0]
    assert segment_keys(store) == {store.layout.segment_key(head, ref) for ref in head.segments}
    assert store.load("c").archived_count == 4


def test_a_stale_plan_is_refused_even_when_the_cache_agrees(s3_mock_client):
    first = S3Store(s3_mock_client, "stale-bucket", "p")
    second = S3Store(s3_mock_client, "stale-bucket", "p")
    first.append("c", turn("a"))
    version = first.load("c").version
    second.append("c", turn("b"))
    assert (
        first.apply("c", CompactionPlan(expected_version=version, archive_through_seq=2)) is False
    )
    assert first.load("c").archived_count == 0


@pytest.mark.s3
def test_server_errors_are_retried_by_botocore(s3_server_url, monkeypatch):
    import botocore.retries.standard

    monkeypatch.setattr(
        botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0
    )
    store = S3Store.from_url(s3_server_url)
    m = memory(store)
    puts = inject(store.client, "PutObject", 503, "SlowDown", times=2)
    gets = inject(store.client, "GetObject", 500, "InternalError", times=2)
    m.add("c", turn("x"))
    assert len(puts) == 2 and len(gets) == 2
    assert len(m.history("c")) == 2
    store.close()


@pytest.mark.s3
def test_other_client_errors_surface_as_storage_error(s3_server_store):
    inject(s3_server_store.client, "GetObject", 403, "AccessDenied", times=1)
    with pytest.raises(StorageError) as raised:
        s3_server_store.load("c")
    assert not isinstance(raised.value, ConcurrencyError)
    assert "AccessDenied" in str(raised.value)


def test_a_head_in_an_unknown_format_is_a_schema_error(s3_mock_store):
    store = s3_mock_store
    store.client.put_object(Bucket=store.bucket, Key=store.layout.head("c"), Body=b'{"format": 99}')
    with pytest.raises(SchemaError, match=r"format 99|version 99, newer than version 3"):
        store.load("c")
    store.client.put_object(
        Bucket=store.bucket, Key=store.layout.head("c"), Body=b'["not", "a", "head"]'
    )
    with pytest.raises(SchemaError, match="not a chat-memory S3 head object"):
        store.load("c")


def _stored_head(store: S3Store, cid: str) -> dict:
    return json.loads(
        store.client.get_object(Bucket=store.bucket, Key=store.layout.head(cid))["Body"].read()
    )


def test_an_older_head_is_upgraded_when_read_and_written_back_by_the_next_write(
    s3_mock_client, monkeypatch
):
    store = S3Store(s3_mock_client, "chat-memory-mock", "old-format", segment_events=2)
    memory = ChatMemory(
        store,
        MemoryConfig(compaction_strategy="turn_window", max_turns=1),
        token_counter=fixed_tokens,
    )
    memory.add("c", Event.system("pinned"))
    for i in range(3):
        memory.add("c", turn(f"q{i}"))
    history = [(e.seq, e.content, e.archived) for e in store.history("c")]
    current = _stored_head(store, "c")
    assert current["format"] == 1 and current["archive"]
    # the (pretend) format 0 kept the archive manifest under "_segments0" and no write ids
    old = {k: v for k, v in current.items() if k not in ("archive", "writes")} | {
        "format": 0,
        "_segments0": current["archive"],
    }
    store.client.put_object(
        Bucket=store.bucket, Key=store.layout.head("c"), Body=json.dumps(old).encode()
    )

    reader = S3Store(s3_mock_client, "chat-memory-mock", "old-format")  # nothing cached
    with pytest.raises(SchemaError, match="no migration from version 0 to 1"):
        reader.load("c")
    step = Migration(
        0,
        "the manifest moved to 'archive'; write ids",
        lambda doc: {
            **{k: v for k, v in doc.items() if k != "_segments0"},
            "format": 1,
            "archive": doc["_segments0"],
            "writes": [],
        },
    )
    real = (
        layout.HEAD_FORMAT.migrations
    )  # 1 -> 2: window segments (written only when there are some)
    monkeypatch.setattr(
        layout, "HEAD_FORMAT", dataclasses.replace(layout.HEAD_FORMAT, migrations=(step, *real))
    )
    upgraded = S3Store(s3_mock_client, "chat-memory-mock", "old-format")
    assert [(e.seq, e.content, e.archived) for e in upgraded.history("c")] == history
    assert (
        upgraded.search("c", SearchQuery.build("q0")).total == 2
    )  # "q0" and its reply: the archive is found through the old manifest
    assert _stored_head(upgraded, "c")["format"] == 0  # reading never writes
    upgraded.append("c", [Event.user("next", tokens=1)])
    written = _stored_head(upgraded, "c")
    assert (
        written["format"] == 1
        and written["archive"] == current["archive"]
        and "_segments0" not in written
    )
    monkeypatch.setattr(
        layout, "HEAD_FORMAT", dataclasses.replace(layout.HEAD_FORMAT, migrations=real)
    )
    assert (
        S3Store(s3_mock_client, "chat-memory-mock", "old-format").load("c").last_seq
        == history[-1][0] + 1
    )


def test_a_head_without_a_compaction_failure_count_counts_from_0(s3_mock_client):
    store = S3Store(s3_mock_client, "chat-memory-mock", "failure-count")
    store.append("c", [Event.user("hi", tokens=1)])
    assert "compaction_failures" not in _stored_head(store, "c")  # 0 is not written
    store.record_compaction_error("c", "summarizer down")
    store.record_compaction_error("c", "summarizer down")
    head = _stored_head(store, "c")
    assert head["compaction_failures"] == 2 and head["format"] == 1
    older = {k: v for k, v in head.items() if k != "compaction_failures"}  # before the count
    store.client.put_object(
        Bucket=store.bucket, Key=store.layout.head("c"), Body=json.dumps(older).encode()
    )
    reader = S3Store(s3_mock_client, "chat-memory-mock", "failure-count")  # nothing cached
    snapshot = reader.load("c")
    assert (snapshot.compaction_error, snapshot.compaction_failures) == ("summarizer down", 0)
    reader.record_compaction_error("c", "summarizer down")
    assert reader.load("c").compaction_failures == 1
    assert reader.apply("c", CompactionPlan(reader.load("c").version, archive_through_seq=0))
    head = _stored_head(reader, "c")
    assert head["compaction_error"] is None and "compaction_failures" not in head


def test_a_segment_in_a_newer_format_is_a_schema_error(s3_mock_client):
    store = S3Store(s3_mock_client, "chat-memory-mock", "newer-segment")
    store.append("c", turn("q0"))
    assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=2))
    key = store.layout.segment_key(*(lambda h: (h, h.segments[0]))(store._read_head("c")[0]))
    store.client.put_object(
        Bucket=store.bucket, Key=key, Body=b'{"format": 2, "events": [], "text": []}'
    )
    with pytest.raises(SchemaError, match=r"S3 archive segment .* version 2, newer than version 1"):
        store.history("c")


# -- archive layout ------------------------------------------------------------------------


def segment_keys(store: S3Store) -> set[str]:
    prefix = f"{store.layout.prefix}archive/"
    pages = store.client.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=prefix
    )
    return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


def test_the_cap_is_exact_and_dropped_segments_are_deleted(s3_mock_client):
    store = S3Store(s3_mock_client, "cap-bucket", "p", max_archived_events=7, segment_events=4)
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    for i in range(30):
        m.add("c", turn(f"t{i}"))
        archived = [e for e in m.history("c") if e.archived]
        assert len(archived) == min(7, 2 * i) == store.load("c").archived_count
    assert seqs(archived) == list(range(52, 59))
    head = store._read_head("c")[0]
    # what the head lists and nothing else: its archive segments and its fork timeline's
    folder = store.layout.segments("c", head.generation)
    assert segment_keys(store) == {store.layout.segment_key(head, ref) for ref in head.segments} | {
        folder + ref.name for ref in head.timeline.segments
    }
    assert all(ref.count <= 4 for ref in head.segments)


def test_small_compactions_merge_into_few_segments(s3_mock_client):
    store = S3Store(
        s3_mock_client, "merge-bucket", "p", max_archived_events=None, segment_events=16
    )
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    for i in range(101):
        m.add("c", turn(f"t{i}"))
    head = store._read_head("c")[0]
    assert head.archived_count == 200
    # 200 events in 2-event batches: full segments of 16 plus a binary tail, not 100 objects
    assert len(head.segments) <= 200 // 16 + 4
    assert [ref.first_seq for ref in head.segments] == sorted(
        ref.first_seq for ref in head.segments
    )


def _replay(store, operations: list[list[Event]]) -> ChatMemory:
    m = memory(
        store,
        compaction_strategy="recursive_summarization",
        max_events=5,
        max_events_to_keep=3,
        overlap_size=1,
    )
    for batch in operations:
        m.add("c", batch)
    return m


def test_summaries_archived_out_of_order_match_the_reference_store(s3_mock_client):
    """Recursive summarization archives the old summary with events older than it; segments
    must stay in seq order, the cap exact, and history and search equal to the memory store's."""
    operations = [
        turn(f"topic {i} bluefin" if i % 3 == 0 else f"topic {i}", tool=i % 2 == 0)
        for i in range(40)
    ]
    reference = _replay(InMemoryStore(max_archived_events=23), operations)
    s3 = _replay(
        S3Store(s3_mock_client, "ref-bucket", "p", max_archived_events=23, segment_events=5),
        operations,
    )
    view = lambda events: [(e.seq, e.type, e.content, e.archived) for e in events]  # noqa: E731
    assert view(s3.history("c")) == view(reference.history("c"))
    for keyword, mode, page in [
        ("bluefin", "phrase", 0),
        ("topic 1", "phrase", 1),
        ("topic lookup", "all", 0),
        ("3 7", "any", 2),
    ]:
        query = SearchQuery.build(keyword, mode, page, page_size=4)
        mine, theirs = s3.store.search("c", query), reference.store.search("c", query)
        assert (mine.total, view(mine.events)) == (theirs.total, view(theirs.events))


@pytest.mark.parametrize("seed", range(12))
def test_random_conversations_match_the_reference_store(s3_mock_client, seed):
    rnd = random.Random(seed)
    cap = rnd.choice([0, 1, 2, 5, 17, None])
    strategy = rnd.choice(
        ["turn_window", "sliding_window", "recursive_summarization", "token_count"]
    )
    config = MemoryConfig(
        compaction_strategy=strategy,
        max_turns=rnd.randint(1, 4),
        max_events=rnd.randint(3, 8),
        max_events_to_keep=2,
        overlap_size=1,
        max_tokens=30,
    )
    summarize = lambda previous, events, upcoming: f"summary of {len(events)}"  # noqa: E731
    reference = ChatMemory(
        InMemoryStore(max_archived_events=cap),
        config,
        summarizer=summarize,
        token_counter=fixed_tokens,
    )
    store = S3Store(
        s3_mock_client,
        "random-bucket",
        f"s{seed}",
        max_archived_events=cap,
        segment_events=rnd.choice([1, 3, 8, 128]),
    )
    s3 = ChatMemory(store, config, summarizer=summarize, token_counter=fixed_tokens)
    for i in range(rnd.randint(5, 40)):
        batch = turn(f"t{i} w{i % 5}", tool=rnd.random() < 0.3)
        if rnd.random() < 0.1:
            # two pin keys: a newer rule supersedes the older one of its key, which is archived
            # and then under the archive cap like every archived event
            batch.insert(0, Event.system(f"rule {i}", metadata={"key": f"rule {i % 2}"}))
        reference.add("c", batch)
        s3.add("c", batch)
    view = lambda events: [(e.seq, e.type, e.content, e.archived, e.tokens) for e in events]  # noqa: E731
    assert view(s3.history("c")) == view(reference.history("c"))
    assert s3.stats("c") == reference.stats("c")
    for keyword in ["w1", "t1", "lookup", "t"]:
        for page in range(3):
            mine, theirs = (
                s3.search("c", keyword, page=page, page_size=3),
                reference.search("c", keyword, page=page, page_size=3),
            )
            assert (mine.total, [h.seq for h in mine.hits]) == (
                theirs.total,
                [h.seq for h in theirs.hits],
            )


def test_readers_racing_compactions_see_consistent_archives(s3_mock_client):
    store = S3Store(s3_mock_client, "race-bucket", "p", max_archived_events=30, segment_events=4)
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    m.add("c", turn("t0"))
    done, problems = threading.Event(), []

    def reader() -> None:
        while not done.is_set():
            try:
                history = m.history("c")
                archived = [e for e in history if e.archived]
                assert seqs(history) == sorted(seqs(history)) and len(archived) <= 30
                hits = m.search("c", "reply", page_size=100).hits
                assert [h.seq for h in hits] == sorted({h.seq for h in hits}) and len(hits) <= 31
            except Exception as exc:
                problems.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(1, 40):
        m.add("c", turn(f"t{i}"))
    done.set()
    for t in threads:
        t.join()
    assert problems == []
    assert store.load("c").archived_count == 30


def test_clear_deletes_every_object_of_the_conversation(s3_mock_store):
    store = s3_mock_store
    m = memory(store, compaction_strategy="turn_window", max_turns=1)
    for i in range(12):
        m.add("c", turn(f"t{i}"))
        m.add("other", turn(f"t{i}"))
    assert segment_keys(store)
    store.clear("c")
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.layout.prefix)[
        "Contents"
    ]
    keys = {obj["Key"] for obj in listing}
    assert keys and all(
        "archive/" + conversation_key("other") in k or k == store.layout.head("other") for k in keys
    )
    m.add("c", turn("again"))
    assert seqs(m.history("c")) == [1, 2]


# -- keys, bucket, URL ---------------------------------------------------------------------

HOSTILE_IDS = [
    "../x",
    "../../etc/passwd",
    "*",
    "%",
    "%2F",
    "{}",
    "a/b",
    "'\"",
    "ünïcødé 💬",
    "x" * 1000,
    "heads",
    "b",
]


def test_hostile_conversation_ids_stay_distinct_and_inside_the_prefix(s3_mock_client):
    store = S3Store(s3_mock_client, "hostile-bucket", "tenant")
    neighbour = S3Store(s3_mock_client, "hostile-bucket", "tenant2")
    for cid in HOSTILE_IDS:
        store.append(cid, [Event.user(f"hello {cid}", tokens=1)])
    neighbour.append("other", [Event.user("x", tokens=1)])
    for cid in HOSTILE_IDS:
        assert [e.content for e in store.history(cid)] == [f"hello {cid}"]
    assert store.conversations() == sorted(HOSTILE_IDS)
    assert neighbour.conversations() == ["other"]
    keys = [
        obj["Key"] for obj in s3_mock_client.list_objects_v2(Bucket="hostile-bucket")["Contents"]
    ]
    ours = [k for k in keys if not k.startswith("tenant2/")]
    assert len(ours) == len(HOSTILE_IDS) and all(k.startswith("tenant/heads/") for k in ours)
    assert all(len(k.encode()) < 300 and ".." not in k for k in keys)
    store.clear("../x")
    assert store.history("../x") == [] and "../x" not in store.conversations()


def test_the_bucket_is_created_once_even_by_racing_stores(s3_mock_client):
    stores: list[S3Store] = []
    threads = [
        threading.Thread(
            target=lambda: stores.append(S3Store(s3_mock_client, "fresh-bucket", f"p{i}"))
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stores) == 6
    assert "fresh-bucket" in [b["Name"] for b in s3_mock_client.list_buckets()["Buckets"]]
    stores[0].append("c", [Event.user("x", tokens=1)])


def test_url_options_and_client_ownership(moto_server):
    url = f"s3://url-bucket/some/prefix?endpoint_url={moto_server}&region=us-east-1&max_archived_events=none&segment_events=7"
    store = open_store(url)
    assert isinstance(store, S3Store) and store.layout == Layout("some/prefix/")
    assert store.default_max_archived_events is None and store.segment_events == 7
    store.append("c", [Event.user("x", tokens=1)])
    store.close()
    client = make_client(endpoint_url=moto_server, region_name="us-east-1")
    borrowed = open_store("s3://url-bucket/some/prefix", client=client, max_archived_events=3)
    assert borrowed.default_max_archived_events == 3 and len(borrowed.history("c")) == 1
    borrowed.close()
    assert client.list_buckets()  # still usable: the store did not own it


@pytest.mark.parametrize(
    "url",
    [
        "s3://ab/p",
        "s3://bucket/p?colour=blue",
        "s3://bucket/p?max_archived_events=-1",
        "s3://bucket/p?segment_events=x",
    ],
)
def test_bad_urls_are_configuration_errors(url):
    with pytest.raises(ConfigurationError):
        open_store(url)


def test_unknown_keyword_options_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="colour"):
        open_store("s3://bucket/p", colour="blue")


def test_a_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ConfigurationError, match=r"chat-memory\[s3\]"):
        make_client()


# -- processes -----------------------------------------------------------------------------

ADDS = 8


@pytest.mark.s3
def test_eight_processes_writing_one_conversation_lose_nothing(s3_url, writer_processes):
    done = list(
        writer_processes.map(
            s3_writer, [s3_url] * WRITERS, range(WRITERS), [ADDS] * WRITERS, timeout=240
        )
    )
    assert done == [ADDS] * WRITERS
    store = open_store(s3_url)
    history = store.history("shared")
    store.close()
    assert seqs(history) == list(range(1, 2 * WRITERS * ADDS + 1))
    questions = [e for e in history if e.content.startswith("q ")]
    assert sorted(e.content for e in questions) == sorted(
        f"q {w} {i}" for w in range(WRITERS) for i in range(ADDS)
    )
    by_seq = {e.seq: e for e in history}
    for q in questions:
        assert by_seq[q.seq + 1].content == "a" + q.content[1:]
    for w in range(WRITERS):  # each writer's adds in its own order
        mine = [int(e.content.split()[2]) for e in questions if e.content.split()[1] == str(w)]
        assert mine == list(range(ADDS))
