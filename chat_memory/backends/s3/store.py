"""S3Store: one head object per conversation, updated only by conditional writes, plus
immutable archive segments. See :mod:`.layout` for the keys and objects."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlencode

from ...errors import ChatMemoryError, ConcurrencyError, ConfigurationError, StorageError
from ...events import Event
from ...pins import superseded
from ...search import SearchQuery, SearchResult, search_text
from ..base import (
    Backoff,
    CompactionPlan,
    CompactsWhileAppending,
    ConnectionField,
    Snapshot,
    Store,
    StoreNode,
    StoreOption,
    archived_copy,
    check_conversation_id,
    number,
    split_appended,
    unstored,
)
from .cache import HeadCache
from .client import ensure_bucket, is_conflict, is_missing, make_client, parse_location, was_retried
from .layout import (
    Head,
    Layout,
    Segment,
    SegmentRef,
    chunks,
    conversation_id_of,
    merge_start,
    normalize_prefix,
    segment_name,
    trim,
)

#: Options that configure the boto3 client rather than the store.
_CLIENT_OPTIONS = ("endpoint_url", "region_name", "addressing_style", "max_attempts")
#: Keyword-only options: objects, not text a URL could carry.
_OBJECT_KEYWORDS = frozenset({"client", "owns_client", "backoff", "read_workers"})

#: How often a read re-reads the head when a segment it lists was removed meanwhile by a
#: concurrent compaction.
READ_ATTEMPTS = 8
#: how many write ids a head remembers; more than the writers that can race one retry
RECENT_WRITES = 16


class _SegmentGone(Exception):
    """A segment listed by the head we read no longer exists (a newer head dropped it)."""


class S3Store(CompactsWhileAppending, Store):
    """Conversations in an S3 bucket (or anything that speaks S3 conditional writes).

    Every change to a conversation is one ``PutObject`` of its head with ``If-Match`` (or
    ``If-None-Match: *`` when creating it); a writer that loses the race re-reads, re-applies
    and retries with jittered backoff. Appends write only the head, whose size depends on
    the window; compaction also writes immutable archive segments (keyed by version and a
    nonce, so a segment of a lost race is never referenced and is deleted best-effort).

    Pass a ready boto3 ``client`` (left open by :meth:`close` unless ``owns_client``), or
    use :meth:`from_url`. ``max_archived_events`` is the archive cap when a plan names none
    (None: unbounded); ``segment_events`` the most events one archive segment holds;
    ``backoff`` bounds the retries of lost races; ``read_workers`` threads fetch segments
    for :meth:`search` and :meth:`history`.
    """

    schemes = ("s3",)
    extra = "s3"
    # the records ride in the head, which every turn rewrites: keep few (~200 bytes each)
    compaction_records_kept = 10
    url_options = (
        StoreOption("endpoint_url", nullable=True),
        StoreOption("region", nullable=True),
        StoreOption("region_name", nullable=True),
        StoreOption("addressing_style", nullable=True),
        StoreOption("max_attempts", int, minimum=1),
        StoreOption("max_archived_events", int, minimum=0, nullable=True),
        StoreOption("segment_events", int, minimum=1),
        StoreOption("create_bucket", bool),
    )
    node = StoreNode(
        "awsS3ChatMemory",
        "AWS S3 Chat Memory",
        "Chat memory in an S3 bucket (conditional writes).",
        "s3",
        fields=(
            ConnectionField("bucket", "Bucket", "S3 bucket (created when missing).", required=True, min_length=3),
            ConnectionField("prefix", "Key prefix", "Folder inside the bucket.", default="chat-memory"),
            ConnectionField("region", "Region", "AWS region; empty uses the usual AWS configuration.", advanced=True),
            ConnectionField(
                "endpointUrl", "Endpoint URL", "For S3-compatible services, e.g. http://127.0.0.1:9000.", advanced=True
            ),
        ),
        order=30,
    )
    default_max_archived_events = 1000

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        max_archived_events: int | None = 1000,
        segment_events: int = 128,
        create_bucket: bool = True,
        owns_client: bool = False,
        backoff: Backoff | None = None,
        read_workers: int = 8,
    ) -> None:
        if segment_events < 1:
            raise ConfigurationError(f"segment_events ({segment_events}) must be at least 1")
        self.client = client
        self.bucket = bucket
        self.layout = Layout(normalize_prefix(prefix))
        self.default_max_archived_events = max_archived_events
        self.segment_events = segment_events
        self.backoff = backoff or Backoff(attempts=60, base=0.004, cap=0.3)
        self.read_workers = read_workers
        self._owns_client = owns_client
        self._heads = HeadCache()
        if create_bucket:
            try:
                ensure_bucket(client, bucket)
            except ChatMemoryError:
                raise
            except Exception as exc:
                raise StorageError(f"S3Store could not reach or create bucket {bucket!r}: {exc}") from exc

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Store:
        """``s3://bucket/prefix?endpoint_url=…&region=…&max_archived_events=…&segment_events=…``.
        Keyword options override the URL's; ``client=`` uses a ready boto3 client instead of
        building one (and leaves it open on :meth:`close`)."""
        bucket, prefix, query = parse_location(url)
        unknown = sorted(set(options) - {o.name for o in cls.url_options} - _OBJECT_KEYWORDS)
        if unknown:
            known = ", ".join(sorted({*(o.name for o in cls.url_options), *_OBJECT_KEYWORDS}))
            raise ConfigurationError(f"S3 store option ({unknown[0]!r}) is not supported; known options: {known}")
        settings, _ = cls.url_settings(query, options)
        settings.update({name: options[name] for name in _OBJECT_KEYWORDS if name in options})
        if "region" in settings:
            settings["region_name"] = settings.pop("region")
        client_options = {name: settings.pop(name) for name in _CLIENT_OPTIONS if name in settings}
        client = settings.pop("client", None)
        if client is None:
            return cls(make_client(**client_options), bucket, prefix, owns_client=True, **settings)
        return cls(client, bucket, prefix, **settings)

    @classmethod
    def node_target(cls, connection: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        prefix = quote(str(connection.get("prefix") or "").strip("/"), safe="/")
        options = {"region": connection.get("region"), "endpoint_url": connection.get("endpointUrl")}
        query = urlencode({key: value for key, value in options.items() if value not in (None, "")})
        return f"s3://{connection['bucket']}/{prefix}" + (f"?{query}" if query else ""), {}

    # -- objects --------------------------------------------------------------------------

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
                raise _SegmentGone(key) from exc
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
            except _SegmentGone:
                time.sleep(delay)
                continue
            return read(head, segments)
        raise ConcurrencyError(f"reading the archive of conversation {cid!r} kept racing with compactions")

    # -- the Store protocol ---------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        found = self._read_head(cid)
        return found[0].snapshot() if found else Snapshot.empty(cid)

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        events = list(events)
        tries = itertools.count()

        def attempt() -> Snapshot | None:
            found = (self._heads.get(cid) if next(tries) == 0 else None) or self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            updated = self._appended(head, events)
            if updated is head:  # every event is stored already: nothing to write
                return head.snapshot()
            return updated.snapshot() if self._write_head(updated, etag) else None

        return self.backoff.run(attempt, what=f"append to conversation {cid!r}")

    def append_compacting(
        self, conversation_id: str, events: Sequence[Event], planner: Callable[[Snapshot], CompactionPlan | None]
    ) -> tuple[Snapshot, bool]:
        cid = check_conversation_id(conversation_id)
        events = list(events)
        tries = itertools.count()

        def attempt() -> tuple[Snapshot, bool] | None:
            found = (self._heads.get(cid) if next(tries) == 0 else None) or self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            appended = self._appended(head, events)
            snapshot = appended.snapshot()
            plan = planner(snapshot)
            if plan is None:
                if appended is head:  # every event is stored already: nothing to write
                    return snapshot, False
                return (snapshot, False) if self._write_head(appended, etag) else None
            # one head write carries both the append and the compaction
            won = self._write_compacted(appended, etag, plan)
            return None if won is None else (snapshot, True)

        return self.backoff.run(attempt, what=f"append to conversation {cid!r}")

    def apply(self, conversation_id: str, plan: CompactionPlan) -> bool:
        cid = check_conversation_id(conversation_id)
        tries = itertools.count()

        def attempt() -> bool | None:
            found = self._heads.get(cid) if next(tries) == 0 else None
            if found is None or found[0].version != plan.expected_version:
                found = self._read_head(cid)  # only a fresh read may refuse the plan
            if found is None or found[0].version != plan.expected_version:
                return False
            head, etag = found
            return self._write_compacted(head, etag, plan)

        return bool(self.backoff.run(attempt, what=f"compaction of conversation {cid!r}"))

    @staticmethod
    def _appended(head: Head, events: Sequence[Event]) -> Head:
        """``head`` with the events appended that it does not hold yet (by id; the write of
        this head is the atomic step), or ``head`` itself when it holds them all. A pinned
        event supersedes an older one with the same pin key, which is unpinned (archived)."""
        fresh = unstored(events, (*head.pinned, *head.active))
        if events and not fresh:
            return head
        pinned, real = split_appended(number(fresh, head.last_seq))
        all_pinned = (*head.pinned, *pinned)
        gone = {e.seq for e in superseded(all_pinned)} if pinned else set()
        return head.evolve(
            version=head.version + 1,
            last_seq=head.last_seq + len(fresh),
            pinned=tuple(e for e in all_pinned if e.seq not in gone),
            unpinned=(*head.unpinned, *(archived_copy(e) for e in all_pinned if e.seq in gone)),
            active=(*head.active, *real),
        )

    def _write_compacted(self, head: Head, etag: str | None, plan: CompactionPlan) -> bool | None:
        """Store ``head`` (as read, or with events appended) with ``plan`` applied: new archive
        segments first, then the head with If-Match ``etag`` (the stored head's). True when it
        won; None when it lost a race (its new segments are deleted again)."""
        cap = self.archive_cap(plan)
        moving = [e for e in head.active if (e.seq or 0) <= plan.archive_through_seq]
        # superseded pins wait in the head until a compaction files them with the rest of the
        # archive, so that the cap drops the oldest archived events exactly (a pin superseded
        # long after it was written makes this one compaction rewrite the archive from it)
        batch = [archived_copy(e) for e in moving] + list(head.unpinned)
        last_seq, summary = head.last_seq, head.summary
        if plan.summary is not None:
            if summary is not None:
                batch.append(archived_copy(summary))
            last_seq += 1
            summary = plan.summary.model_copy(update={"seq": last_seq, "archived": False})
        version = head.version + 1
        written: list[str] = []
        try:
            segments, retired = self._rearchive(head, batch, cap, version, written)
            updated = head.evolve(
                version=version,
                last_seq=last_seq,
                summary=summary,
                active=tuple(e for e in head.active if (e.seq or 0) > plan.archive_through_seq),
                segments=tuple(segments),
                unpinned=(),
                compaction_error=None,
                compactions=(*head.compactions, plan.record)[-self.compaction_records_kept :] if plan.record else head.compactions,
            )
        except _SegmentGone:
            # a segment to rewrite was retired by a compaction that won meanwhile
            self._delete_quietly(written)
            return None
        except BaseException:
            self._delete_quietly(written)
            raise
        # no cleanup when this raises: the head may have been stored, and with it the segments
        won = self._write_head(updated, etag)
        if not won:
            self._delete_quietly(written)
            return None
        self._delete_quietly([self.layout.segment_key(head, ref) for ref in retired])
        return True

    def _rearchive(
        self, head: Head, batch: list[Event], cap: int | None, version: int, written: list[str]
    ) -> tuple[list[SegmentRef], list[SegmentRef]]:
        """The new manifest after archiving ``batch`` and applying the cap, writing the new
        segments (their keys are added to ``written`` as they are stored). Returns (manifest,
        segments no longer referenced)."""
        kept: list[SegmentRef] = list(head.segments)
        merged: list[Event] = []
        retired: list[SegmentRef] = []
        if batch:
            batch.sort(key=lambda e: e.seq or 0)
            start = merge_start(kept, batch[0].seq or 0, len(batch), self.segment_events)
            rewritten = kept[start:]
            kept = kept[:start]
            old = self._read_segments(head, rewritten)
            merged = sorted(
                [e for ref, seg in zip(rewritten, old) for e in seg.live_events(ref.skip)] + batch,
                key=lambda e: e.seq or 0,
            )
            retired += rewritten
        kept, dropped, merged = trim(kept, merged, cap)
        retired += dropped
        for chunk in chunks(merged, self.segment_events):
            first, last = chunk[0].seq or 0, chunk[-1].seq or 0
            ref = SegmentRef(name=segment_name(first, last, version), first_seq=first, last_seq=last, count=len(chunk))
            key = self.layout.segment_key(head, ref)
            self._write_segment(key, chunk)
            written.append(key)
            kept.append(ref)
        return kept, retired

    def history(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)

        def read(head: Head, segments: list[Segment]) -> list[Event]:
            everything = [e for ref, seg in zip(head.segments, segments) for e in seg.live_events(ref.skip)]
            everything += [*head.pinned, *head.unpinned, *head.active]
            if head.summary is not None:
                everything.append(head.summary)
            return sorted(everything, key=lambda e: e.seq or 0)

        return self._with_archive(cid, read)

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        """Matches on the folded text stored beside each archived event, so only the events of
        the requested page are parsed; every segment is fetched (concurrently) because the
        total must be exact."""
        cid = check_conversation_id(conversation_id)

        def read(head: Head, segments: list[Segment]) -> SearchResult:
            matched: list[tuple[int, Callable[[], Event]]] = []
            for ref, seg in zip(head.segments, segments):
                for raw, text in zip(seg.events[ref.skip :], seg.text[ref.skip :]):
                    if text is not None and query.matches(text):
                        matched.append((raw["seq"], lambda raw=raw: Event.model_validate(raw)))
            for event in head.active:
                text = search_text(event)
                if text is not None and query.matches(text):
                    matched.append((event.seq or 0, lambda event=event: event))
            matched.sort(key=lambda item: item[0])
            page = matched[query.offset : query.offset + query.limit]
            return SearchResult(events=[load() for _, load in page], total=len(matched))

        return self._with_archive(cid, read)

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)

        def attempt() -> bool | None:
            found = self._read_head(cid)
            if found is None or found[0].compaction_error == message:
                return True
            head, etag = found
            return True if self._write_head(head.evolve(compaction_error=message), etag) else None

        self.backoff.run(attempt, what=f"recording the compaction error of conversation {cid!r}")

    def compactions(self, conversation_id: str) -> list[dict[str, Any]]:
        found = self._read_head(check_conversation_id(conversation_id))
        return [] if found is None else [dict(record) for record in found[0].compactions]

    def clear(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        found = self._read_head(cid)
        if found is None:
            return
        self.client.delete_object(Bucket=self.bucket, Key=self.layout.head(cid))
        self._heads.drop(cid)
        # only this generation's segments: a conversation re-created meanwhile has its own
        prefix = self.layout.segments(cid, found[0].generation)
        keys = [
            obj["Key"]
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
        ]
        self._delete_quietly(keys)

    def conversations(self) -> list[str]:
        ids: list[str] = []
        heads = self.layout.heads
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=heads):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(heads) :]
                cid = conversation_id_of(name)
                if cid is None:
                    found = self._read_head_by_key(obj["Key"])
                    if found is None:
                        continue
                    cid = found
                ids.append(cid)
        return sorted(ids)

    def _read_head_by_key(self, key: str) -> str | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        return Head.from_bytes(response["Body"].read(), f"S3 head object {key!r}").conversation_id

    def close(self) -> None:
        """Close the boto3 client if this store built it."""
        if self._owns_client:
            self.client.close()
