"""The reads and writes of a conversation's objects in the bucket, which :class:`~.store.S3Store`
is built on: the head, stored only by conditional ``PutObject`` (``If-Match`` its ETag, or
``If-None-Match: *`` to create it), with the write ids that tell a retried PUT's 412 from a
lost race; the immutable archive segments (read concurrently, written once, deleted
best-effort); and a consistent read of a head with its segments (:meth:`_with_archive`).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...errors import ConcurrencyError, StorageError
from ...events import Event
from ..failures import Backoff
from .cache import HeadCache
from .client import is_conflict, is_missing, was_retried
from .layout import Head, Layout, Segment, SegmentRef

#: How often a read re-reads the head when a segment it lists was removed meanwhile by a
#: concurrent compaction.
READ_ATTEMPTS = 8
#: how many write ids a head remembers; more than the writers that can race one retry
RECENT_WRITES = 16


class SegmentGone(Exception):
    """A segment listed by the head we read no longer exists (a newer head dropped it)."""



class ConversationObjects:
    """The object layer of :class:`~.store.S3Store` (a base class: the store sets these
    attributes in its ``__init__``)."""

    client: Any
    bucket: str
    layout: Layout
    backoff: Backoff
    read_workers: int
    _heads: HeadCache

    def _read_head(self, cid: str) -> tuple[Head, str] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.layout.head(cid))
        except Exception as exc:
            if is_missing(exc):
                self._heads.drop(cid)
                return None
            raise
        head = Head.from_bytes(response["Body"].read(), f"S3 head object {self.layout.head(cid)!r}")
        if head.conversation_id != cid:
            raise StorageError(f"S3 head {self.layout.head(cid)!r} belongs to {head.conversation_id!r}, not {cid!r}")
        self._heads.put(cid, head, response.get("ETag"))
        return head, response["ETag"]

    def _write_head(self, head: Head, etag: str | None) -> bool:
        """Conditionally store the head; False when another writer changed (or deleted) it.

        Each write adds its own id to the head's ``writes``: when botocore retried the PUT
        (a 5xx or a dropped connection after the server had stored it), the retry's 412 is
        our own first attempt's doing, and the id tells that apart from a lost race, so
        the caller neither appends its events twice nor deletes segments the head uses."""
        write_id = uuid.uuid4().hex[:16]
        head = head.evolve(writes=(*head.writes, write_id)[-RECENT_WRITES:])
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        cid = head.conversation_id
        try:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=self.layout.head(cid),
                Body=head.to_bytes(),
                ContentType="application/json",
                **condition,
            )
        except Exception as exc:
            self._heads.drop(cid)
            # If-Match on a head deleted meanwhile (clear) answers 404
            if is_conflict(exc) or (etag is not None and is_missing(exc)):
                return was_retried(exc) and self._stored_by(cid, write_id)
            raise
        self._heads.put(cid, head, response.get("ETag"))
        return True

    def _stored_by(self, cid: str, write_id: str) -> bool:
        """True when the stored head is, or descends from, the write ``write_id``."""
        found = self._read_head(cid)
        return found is not None and write_id in found[0].writes

    def _read_segment(self, key: str) -> Segment:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                raise SegmentGone(key) from exc
            raise
        return Segment.from_bytes(response["Body"].read(), f"S3 archive segment {key!r}")

    def _read_segments(self, head: Head, refs: Sequence[SegmentRef]) -> list[Segment]:
        keys = [self.layout.segment_key(head, ref) for ref in refs]
        if len(keys) <= 1 or self.read_workers <= 1:
            return [self._read_segment(key) for key in keys]
        with ThreadPoolExecutor(max_workers=min(self.read_workers, len(keys))) as pool:
            return list(pool.map(self._read_segment, keys))

    def _write_segment(self, key: str, events: Sequence[Event]) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=Segment.of(events).to_bytes(),
            ContentType="application/gzip",
            IfNoneMatch="*",
        )

    def _delete_quietly(self, keys: Sequence[str]) -> None:
        """Best-effort removal of segments nothing references any more."""
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            except Exception:  # noqa: BLE001 - an orphaned segment is harmless
                pass

    def _with_archive(self, cid: str, read: Callable[[Head, list[Segment]], Any]) -> Any:
        """Read the head and its segments, consistently: when a concurrent compaction removed
        a segment in between, read the newer head and try again."""
        for delay in itertools.islice(self.backoff.delays(), READ_ATTEMPTS):
            found = self._read_head(cid)
            if found is None:
                return read(Head.new(cid), [])
            head = found[0]
            try:
                segments = self._read_segments(head, head.segments)
            except SegmentGone:
                time.sleep(delay)
                continue
            return read(head, segments)
        raise ConcurrencyError(f"reading the archive of conversation {cid!r} kept racing with compactions")

    def _read_head_by_key(self, key: str) -> str | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        return Head.from_bytes(response["Body"].read(), f"S3 head object {key!r}").conversation_id

