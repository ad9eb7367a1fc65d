"""The lifecycle half of the S3 store (:class:`~chat_memory.backends.base.KeepsLifecycle`):
metadata in the head, listing by scope, the retention sweep's conditional delete, and erasure
(docs/lifecycle.md, docs/s3.md).

The index is the key layout itself: a scoped conversation's head is stored under its scope's
own prefix (``scopes/<scope>/heads/<key>``, :meth:`~.layout.Layout.head`), bare ids under
``heads/``, so listing a scope is a ``ListObjectsV2`` of that prefix and nothing else, and a
head is its own index entry: created, rewritten and deleted by the same request, it can never
disagree with it under concurrent writers. The head carries ``last_active_at`` (stamped by every
head write) and the metadata; a listing reads the scope's heads (concurrently) and sorts them.

The sweep lists heads with their ``LastModified`` and reads only those that may be idle; it
deletes a conversation with ``DeleteObject`` ``If-Match`` the ETag of the head it found idle,
so a write that landed since makes the delete fail (the conversation is kept), then deletes
the segments of that head's generation (a conversation created again has a new one).

Erasure writes a guard object ``guards/<digest>`` first, then deletes every head of the scope
and every object under each conversation's archive folder. A writer that creates a head checks
the guards after its create (:meth:`~.objects.ConversationObjects._refuse_if_guarded`) and
deletes what it wrote when one is live, so a racing write is erased or refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

from ...errors import ConcurrencyError, InvalidInputError
from ...events import EventType
from ...lifecycle.keys import scope_of_key, stored_key
from ...lifecycle.records import ConversationRecord, ErasureCounts, merged_values
from ..base import KeepsLifecycle, check_conversation_id
from ..failures import stored_data
from .client import is_conflict, is_missing
from .layout import Head, conversation_id_of
from .objects import ConversationObjects, SegmentGone

#: A head whose ``LastModified`` (the server's clock, whole seconds) is this much past the
#: cutoff is surely not idle, so the sweep does not read it (room for hosts' clock skew).
CLOCK_SKEW = timedelta(minutes=5)


def _parse_time(value: Any, fallback: datetime) -> datetime:
    if not isinstance(value, str):
        return fallback
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _record(head: Head, modified: datetime) -> ConversationRecord:
    """The record of a head (one written before heads kept metadata: its ``LastModified``)."""
    meta = head.meta
    last = _parse_time(meta.get("last_active_at"), modified)
    live_window = sum(ref.live for ref in head.window)
    return ConversationRecord(
        conversation_id=stored_key(head.conversation_id),
        created_at=_parse_time(meta.get("created_at"), last),
        last_active_at=last,
        events=len(head.pinned)
        + live_window
        + len(head.active)
        + head.archived_count
        + (head.summary is not None),
        title=meta.get("title"),
        tags=tuple(meta.get("tags") or ()),
        values=dict(meta.get("values") or {}),
    )


def _check_scope(scope: Any) -> str:
    if not isinstance(scope, str) or not scope:
        raise InvalidInputError(f"scope ({scope!r}) must be a scope prefix, not empty")
    return scope


def write_guard(store: Any, key_or_scope: str, guard_seconds: float) -> None:
    """Store the erasure guard of a key or a scope prefix, live for ``guard_seconds``."""
    if guard_seconds <= 0:
        return
    store.client.put_object(
        Bucket=store.bucket,
        Key=store.layout.guard(key_or_scope),
        Body=json.dumps({"until": time.time() + guard_seconds}).encode("utf-8"),
        ContentType="application/json",
    )


def refuse_if_erasing(store: Any, namespace: str, root: str) -> None:
    """After a long-term namespace of a scope was created: when the scope's erasure guard is
    live, delete what was written under ``root`` and raise :class:`ConcurrencyError`."""
    until = store._guard_until(store.layout.guard(scope_of_key(namespace)))
    if until is not None and until > time.time():
        store._delete_prefix(root)
        raise ConcurrencyError(
            f"namespace {namespace[:80]!r} is being erased (forget); writes are refused "
            f"for {until - time.time():.0f} more seconds"
        )


class S3Lifecycle(ConversationObjects, KeepsLifecycle):
    """:class:`KeepsLifecycle` for :class:`~.store.S3Store` (a base class of it)."""

    # -- reading heads with their ETag and LastModified -------------------------------------

    def _fetch(self, key: str) -> tuple[Head, str, datetime] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        head = Head.from_bytes(response["Body"].read(), f"S3 head object {key!r}")
        return head, response["ETag"], response["LastModified"]

    def _listed(self, prefix: str) -> list[dict[str, Any]]:
        """The objects directly under ``prefix`` (keys and ``LastModified``)."""
        return [
            obj
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            )
            for obj in page.get("Contents", [])
        ]

    def _fetch_all(self, keys: Sequence[str]) -> list[tuple[Head, str, datetime]]:
        """The heads at ``keys`` (read concurrently), those deleted meanwhile left out."""
        if len(keys) <= 1 or self.read_workers <= 1:
            found = [self._fetch(key) for key in keys]
        else:
            with ThreadPoolExecutor(max_workers=min(self.read_workers, len(keys))) as pool:
                found = list(pool.map(self._fetch, keys))
        return [item for item in found if item is not None]

    def _head_prefixes(self, scope: str | None) -> list[str]:
        """Where the heads of ``scope`` are (None: every scope's folder, and the bare ids')."""
        if scope is not None:
            return [self.layout.scope_heads(scope)]
        folders = [
            common["Prefix"]
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.layout.scopes, Delimiter="/"
            )
            for common in page.get("CommonPrefixes", [])
        ]
        return [self.layout.heads, *(f"{folder}heads/" for folder in folders)]

    # -- metadata and listing ---------------------------------------------------------------

    def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        cid = check_conversation_id(conversation_id)
        found = self._fetch(self.layout.head(cid))
        return None if found is None else _record(found[0], found[2])

    def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        cid = check_conversation_id(conversation_id)

        def attempt() -> ConversationRecord | None:
            found = self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            meta = dict(head.meta)
            meta["values"] = merged_values(meta.get("values") or {}, values)
            if title is not None:
                meta["title"] = title
            if tags is not None:
                meta["tags"] = sorted(set(tags))
            if not self._write_head(head.evolve(meta=meta), etag):
                return None
            stored = self._heads.get(cid)
            written = stored[0] if stored else head.evolve(meta=meta)
            return _record(written, datetime.now(timezone.utc))

        return self.backoff.run(attempt, what=f"metadata of conversation {cid!r}")

    def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        keys = [obj["Key"] for obj in self._listed(self.layout.scope_heads(scope))]
        records = [_record(head, modified) for head, _, modified in self._fetch_all(keys)]
        found = [r for r in records if tag is None or tag in r.tags]
        # newest activity first, ties by key (a stable order for paging)
        found.sort(key=lambda r: r.conversation_id)
        found.sort(key=lambda r: r.last_active_at, reverse=True)
        return found[offset : offset + limit]

    # -- the retention sweep ----------------------------------------------------------------

    def idle_conversations(self, scope: str | None, cutoff: datetime, limit: int) -> list[str]:
        # the listing's LastModified rules out every head written since the cutoff: only the
        # conversations that may be idle are read
        candidates = [
            obj["Key"]
            for prefix in self._head_prefixes(scope)
            for obj in self._listed(prefix)
            if obj["LastModified"] < cutoff + CLOCK_SKEW
        ]
        idle = [
            (record.last_active_at, record.conversation_id)
            for record in (_record(h, m) for h, _, m in self._fetch_all(candidates))
            if record.last_active_at < cutoff
        ]
        idle.sort()
        return [key for _, key in idle[:limit]]

    def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        cid = check_conversation_id(conversation_id)
        key = self.layout.head(cid)
        for _ in range(8):
            found = self._fetch(key)
            if found is None:
                return None
            head, etag, modified = found
            if _record(head, modified).last_active_at >= cutoff:
                return None
            try:
                counts = self._counts(head)
            except SegmentGone:  # compacted meanwhile: that head is no longer idle anyway
                continue
            if not self._delete_head(key, etag):
                return None  # written to (or deleted by another sweeper) since it was read
            self._heads.drop(cid)
            self._delete_prefix(self.layout.segments(cid, head.generation))
            return counts
        return None

    def _delete_head(self, key: str, etag: str | None) -> bool:
        """Delete the head if its ETag is still ``etag`` (None: whatever it is); False when it
        changed or is gone."""
        condition = {} if etag is None else {"IfMatch": etag}
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key, **condition)
        except Exception as exc:
            if is_conflict(exc) or is_missing(exc):
                return False
            raise
        return True

    def _counts(self, head: Head) -> ErasureCounts:
        """What deleting the conversation of ``head`` removes, by kind (its archive segments
        are read to tell archived summaries from other events)."""
        summaries = archived = 0
        for ref, segment in zip(head.segments, self._read_segments(head, head.segments)):
            for raw in segment.events[ref.skip :]:
                if raw.get("type") == EventType.SUMMARY.value:
                    summaries += 1
                else:
                    archived += 1
        return ErasureCounts(
            conversations=1,
            events=len(head.pinned) + sum(ref.live for ref in head.window) + len(head.active),
            archived_events=archived + len(head.unpinned),
            summaries=summaries + (head.summary is not None),
            compaction_records=len(head.compactions),
            retracted_events=sum(ref.live for ref in head.retracted),
        )

    # -- erasure ----------------------------------------------------------------------------

    def _erase_key(self, cid: str) -> ErasureCounts:
        """Delete the conversation's head (counting what it held) and every object of every
        generation under its archive folder; zeros when it is not stored."""
        key = self.layout.head(cid)
        counts = ErasureCounts()
        for _ in range(60):
            found = self._fetch(key)
            if found is None:
                break
            head, etag, _ = found
            try:
                held = self._counts(head)
            except SegmentGone:
                continue
            if self._delete_head(key, etag):
                counts = held
                break
        else:  # written to on every attempt: delete it whatever it holds now
            self._delete_head(key, None)
            counts = ErasureCounts(conversations=1)
        self._heads.drop(cid)
        self._delete_prefix(self.layout.archive(cid))
        return counts

    def _key_of(self, head_key: str) -> str | None:
        name = head_key.rsplit("/", 1)[-1]
        cid = conversation_id_of(name)
        if cid is None:  # a hashed name: the head holds the id
            found = self._fetch(head_key)
            cid = None if found is None else found[0].conversation_id
        return None if cid is None else stored_key(cid)

    def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        cid = check_conversation_id(conversation_id)
        write_guard(self, cid, guard_seconds)
        return self._erase_key(cid)

    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        scope = _check_scope(scope)
        write_guard(self, scope, guard_seconds)
        total = ErasureCounts()
        for obj in self._listed(self.layout.scope_heads(scope))[:limit]:
            cid = self._key_of(obj["Key"])
            if cid is not None:
                total += self._erase_key(cid)
        return total

    def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        scope = _check_scope(scope)
        write_guard(self, scope, guard_seconds)
        folder = self.layout.scope_namespaces(scope)
        total = ErasureCounts()
        for head_key in self._namespace_heads(folder):
            held = self._drop_namespace(head_key, None)
            if held is not None:
                total += held
        self._delete_prefix(folder)  # what a racing commit uploaded, orphans
        return total

    def _namespace_heads(self, folder: str) -> list[str]:
        return [key for key in self._keys_under(folder) if key.endswith("/head.json")]

    def _drop_namespace(self, head_key: str, expired: datetime | None) -> ErasureCounts | None:
        """Delete a namespace (its head, then its folder) and return what it held; with
        ``expired``, only if its retention has passed by then (else, or when a commit changed it
        since it was read, None)."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=head_key)
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        with stored_data(f"S3 object {head_key}"):
            doc = json.loads(response["Body"].read())
            files, log = len(doc["files"]), len(doc["log"])
            retention, written = doc.get("retention_seconds"), doc.get("written_at")
        if expired is not None:
            if retention is None or written is None:
                return None
            if expired - _parse_time(written, expired) <= timedelta(seconds=retention):
                return None
        if not self._delete_head(head_key, response["ETag"] if expired else None):
            return None
        self._delete_prefix(head_key[: -len("head.json")])
        return ErasureCounts(long_term_files=files, long_term_versions=log)

    def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        folder = self.layout.namespaces if scope is None else self.layout.scope_namespaces(scope)
        count, total = 0, ErasureCounts()
        for head_key in self._namespace_heads(folder):
            held = self._drop_namespace(head_key, now)
            if held is not None:
                count += 1
                total += held
        if scope is None:
            self._drop_lapsed_guards()
        return count, total

    def _drop_lapsed_guards(self) -> None:
        """Delete the erasure guards whose time is over (the whole-store sweep does it)."""
        moment = time.time()
        for key in self._keys_under(f"{self.layout.prefix}guards/"):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=key)
            except Exception as exc:
                if is_missing(exc):
                    continue
                raise
            with stored_data(f"S3 erasure guard {key!r}"):
                until = float(json.loads(response["Body"].read())["until"])
            if until < moment:  # If-Match: a guard written again meanwhile stays
                self._delete_head(key, response["ETag"])


__all__ = ["CLOCK_SKEW", "S3Lifecycle", "refuse_if_erasing", "write_guard"]
