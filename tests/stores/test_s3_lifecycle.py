"""The lifecycle on S3 (docs/lifecycle.md, docs/s3.md), against moto's server over HTTP: the
conformance suite with a raw scan of every object of the bucket (keys, decoded key names and
bodies, gzipped segments unpacked), listing through the scope's own prefix, other users'
objects byte for byte intact after an erasure, and eight processes writing and sweeping."""

from __future__ import annotations

import gzip
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from chat_memory import ChatMemory, Event
from chat_memory.backends.base import Store
from chat_memory.backends.s3 import S3Store
from chat_memory.backends.s3.client import make_client
from chat_memory.backends.s3.layout import conversation_id_of, conversation_key
from chat_memory.lifecycle import Scope, scoped_key
from chat_memory.testing.lifecycle_conformance import LifecycleConformance
from tests.conftest import WRITER_PROCESSES
from tests.support.lifecycle_workers import writers_race_sweepers

pytestmark = pytest.mark.s3


def _client(endpoint: str) -> Any:
    return make_client(endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def bucket_store(moto_server: str) -> Iterator[S3Store]:
    """A store alone in a bucket of its own, so that a scan of every object of the bucket
    sees this store's objects and nothing else."""
    store = S3Store(_client(moto_server), f"lifecycle-{uuid.uuid4().hex[:12]}", "app-data")
    yield store
    store.close()


def every_object(store: S3Store) -> dict[str, bytes]:
    """Every object of the store's bucket, by key, with its body."""
    paginator = store.client.get_paginator("list_objects_v2")
    keys = [
        obj["Key"]
        for page in paginator.paginate(Bucket=store.bucket)
        for obj in page.get("Contents", [])
    ]
    return {
        key: store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read() for key in keys
    }


def readable(key: str, body: bytes) -> list[str]:
    """The strings a reader of the raw object finds: its key, every key segment decoded
    (conversation and scope names are base64 in keys), its body (a segment unzipped)."""
    found = [key]
    for part in key.split("/"):
        try:
            decoded = conversation_id_of(part)
        except (ValueError, UnicodeDecodeError):
            decoded = None
        if decoded:
            found.append(decoded)
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    found.append(body.decode("utf-8", errors="replace"))
    return found


class TestS3Lifecycle(LifecycleConformance):
    """The lifecycle conformance suite on S3 (moto's server), sync and through ThreadedStore."""

    @pytest.fixture
    def store(self, bucket_store: S3Store) -> S3Store:
        return bucket_store

    def raw_strings(self, store: Store) -> list[str]:
        assert isinstance(store, S3Store)
        return [text for key, body in every_object(store).items() for text in readable(key, body)]


def test_listing_a_scope_reads_only_that_scope(bucket_store: S3Store) -> None:
    memory = ChatMemory(bucket_store)
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    for i in range(3):
        alice.add(f"a{i}", Event.user(f"alice {i}"))
        bob.add(f"b{i}", Event.user(f"bob {i}"))
    memory.add("bare", Event.user("unscoped"))
    requests: list[tuple[str, str]] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        requests.append((params.get("Prefix") or params.get("Key") or "", params["Bucket"]))

    events = bucket_store.client.meta.events
    events.register("before-parameter-build.s3.ListObjectsV2", seen)
    events.register("before-parameter-build.s3.GetObject", seen)
    try:
        assert [c.id for c in alice.conversations()] == ["a2", "a1", "a0"]
    finally:
        events.unregister("before-parameter-build.s3.ListObjectsV2", seen)
        events.unregister("before-parameter-build.s3.GetObject", seen)
    folder = bucket_store.layout.scope_heads(Scope("alice").prefix)
    assert requests and all(name.startswith(folder) for name, _ in requests), requests
    assert len(requests) == 1 + 3  # one listing, one read of each of alice's heads


def test_listing_stays_exact_under_concurrent_writers(bucket_store: S3Store) -> None:
    memory = ChatMemory(bucket_store)
    alice = memory.for_user("alice")
    created: list[str] = []
    stop = threading.Event()
    seen: list[list[str]] = []

    def write(writer: int) -> None:
        for i in range(6):
            alice.add(f"w{writer}-{i}", Event.user("hello"))
            created.append(f"w{writer}-{i}")

    def list_all() -> None:
        while not stop.is_set():
            seen.append([c.id for c in alice.conversations(page_size=500)])

    lister = threading.Thread(target=list_all)
    lister.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    lister.join()
    final = [c.id for c in alice.conversations(page_size=500)]
    assert sorted(final) == sorted(created) and len(final) == 18
    # a listing taken meanwhile holds only conversations that exist, each once
    assert all(len(ids) == len(set(ids)) and set(ids) <= set(created) for ids in seen)
    stamps = [c.last_active_at for c in alice.conversations(page_size=500)]
    assert stamps == sorted(stamps, reverse=True)


def test_forget_leaves_every_other_object_byte_for_byte(bucket_store: S3Store) -> None:
    memory = ChatMemory(bucket_store, {"compaction_strategy": "turn_window", "max_turns": 1})
    suite = TestS3Lifecycle()
    suite._plant(memory, bucket_store, "alice", "aardvark")
    suite._plant(memory, bucket_store, "bob", "bluebird")
    memory.add("bare", Event.user("unscoped words"))
    before = every_object(bucket_store)
    memory.forget(user="alice", app="app")
    after = every_object(bucket_store)
    guards = {key for key in after if key.startswith(f"{bucket_store.layout.prefix}guards/")}
    assert guards and all("alice" not in b.decode() for k, b in after.items() if k in guards)
    assert {key: after[key] for key in after if key not in guards} == {
        key: body for key, body in before.items() if key in after
    }
    removed = set(before) - set(after)
    assert removed and all(
        any("alice" in text or "aardvark" in text for text in readable(key, before[key]))
        for key in removed
    )
    for key, body in after.items():
        assert not any("alice" in t or "aardvark" in t for t in readable(key, body)), key


def test_sweep_deletes_every_object_of_an_idle_conversation(bucket_store: S3Store) -> None:
    memory = ChatMemory(
        bucket_store,
        {"compaction_strategy": "turn_window", "max_turns": 1, "retention_seconds": 60},
    )
    alice = memory.for_user("alice")
    for i in range(3):
        alice.add("old", [Event.user(f"old {i}"), Event.assistant("ok")])
    alice.retract("old", [alice.history("old")[-1].id])
    key = scoped_key(Scope("alice"), "old")
    assert any(k.startswith(bucket_store.layout.archive(key)) for k in every_object(bucket_store))
    cutoff = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert bucket_store.idle_conversations(None, cutoff, 10) == [key]
    counts = bucket_store.delete_idle(key, cutoff)
    assert counts is not None and counts.conversations == 1 and counts.retracted_events == 1
    assert every_object(bucket_store) == {}
    assert bucket_store.conversations() == []


def test_eight_processes_writing_and_sweeping(
    s3_server_url: str, writer_processes: Any, moto_server: str
) -> None:
    """Four writers add to their users' conversations (one seeded before the cutoff) while
    four sweepers sweep the whole store with the cutoff after the seeds: every idle
    conversation goes, with every object, and no event written after the cutoff is lost."""
    store = S3Store.from_url(s3_server_url)
    memory = ChatMemory(store, {"compaction_strategy": "turn_window", "max_turns": 1})
    idle = writers_race_sweepers(memory, s3_server_url, writer_processes, WRITER_PROCESSES)
    folders = [store.layout.archive(k) for k in idle] + [store.layout.head(k) for k in idle]
    objects = every_object(store)
    assert not [k for k in objects for f in folders if k.startswith(f)]
    assert all(conversation_key(k) not in " ".join(objects) for k in idle)
    store.close()


def test_a_versioned_bucket_keeps_erased_objects_as_versions(moto_server: str) -> None:
    """What S3 cannot erase by itself (docs/s3.md): in a versioned bucket a delete leaves
    noncurrent versions; the lifecycle rule the docs give is one S3 accepts."""
    client = _client(moto_server)
    bucket = f"versioned-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store = S3Store(client, bucket, "chat-memory")
    try:
        memory = ChatMemory(store)
        memory.for_user("alice").add("c", Event.user("aardvark"))
        assert memory.forget(user="alice").conversations == 1
        assert not [k for k in every_object(store) if "guards/" not in k]
        versions = client.list_object_versions(Bucket=bucket).get("Versions", [])
        kept = [v for v in versions if not v["IsLatest"] and "/heads/" in v["Key"]]
        assert kept, "a versioned bucket keeps the erased head as a noncurrent version"
        rule = {
            "ID": "chat-memory-erasure",
            "Status": "Enabled",
            "Filter": {"Prefix": "chat-memory/"},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            "Expiration": {"ExpiredObjectDeleteMarker": True},
        }
        client.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": [rule]}
        )
        rules = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        assert rules[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    finally:
        store.close()


def test_the_guard_refuses_recreating_a_forgotten_user(bucket_store: S3Store) -> None:
    from chat_memory import ConcurrencyError
    from chat_memory.longterm import long_term_memory

    memory = ChatMemory(bucket_store)
    alice = memory.for_user("alice")
    alice.add("c", Event.user("before"))
    files = long_term_memory(bucket_store, "notes", user="alice")
    files.create("/memories/a.md", "remember")
    receipt = memory.forget(user="alice")
    assert (receipt.conversations, receipt.long_term_files) == (1, 1)
    for write in (
        lambda: alice.add("c", Event.user("racing")),
        lambda: alice.set_metadata("new", title="racing"),
        lambda: files.create("/memories/b.md", "racing"),
    ):
        with pytest.raises(ConcurrencyError, match="being erased"):
            write()
    memory.for_user("bob").add("c", Event.user("other users write on"))
    left = {k: b for k, b in every_object(bucket_store).items() if "/guards/" not in k}
    assert left and all(any("bob" in t for t in readable(k, b)) for k, b in left.items())
    assert not any("alice" in t for k, b in left.items() for t in readable(k, b))
