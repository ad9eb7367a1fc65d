"""Helpers for the tests of the S3 store's segments (window, archive and retracted segments):
numbered tool pairs, the stored head, and the objects a head references against those stored."""

from __future__ import annotations

import json

from chat_memory import Event
from chat_memory.backends.s3 import S3Store


def numbered(n: int, start: int = 0) -> list[Event]:
    """Tool calls and their results: c<k> and r<k> for k = start, start + 2, …"""
    events: list[Event] = []
    for k in range(start, start + n, 2):
        events += [
            Event.tool_call("f", {"k": k}, call_id=f"c{k}", tokens=1),
            Event.tool_result(f"c{k}", f"r{k}", tokens=1),
        ]
    return events[:n]


def stored_head(store: S3Store, cid: str) -> dict:
    """The head object as stored (JSON), read past the store."""
    return json.loads(
        store.client.get_object(Bucket=store.bucket, Key=store.layout.head(cid))["Body"].read()
    )


def object_keys(store: S3Store) -> set[str]:
    """Every segment object stored under the store's prefix."""
    listing = store.client.list_objects_v2(
        Bucket=store.bucket, Prefix=f"{store.layout.prefix}archive/"
    )
    return {obj["Key"] for obj in listing.get("Contents", [])}


def referenced(store: S3Store, cid: str) -> set[str]:
    """The segment objects the conversation's head lists (archive, window, retracted and
    fork timeline segments)."""
    head = store._read_head(cid)[0]
    folder = store.layout.segments(cid, head.generation)
    return {
        store.layout.segment_key(head, ref)
        for ref in (*head.segments, *head.window, *head.retracted)
    } | {folder + ref.name for ref in head.timeline.segments}
