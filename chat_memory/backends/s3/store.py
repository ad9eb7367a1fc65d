"""S3Store: one head object per conversation, updated only by conditional writes, plus
immutable archive segments. See :mod:`.layout` for the keys and objects, :mod:`.objects`
for how they are read and written, and :mod:`.compaction` for how a plan is applied; this
module holds the store's configuration and the Store protocol on top of them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from chat_memory.backoff import Backoff

from ...errors import ChatMemoryError, ConfigurationError, InvalidInputError, StorageError
from ...events import Event
from ...lifecycle.keys import stored_key
from ...pins import superseded
from ...search import SearchQuery, SearchResult, search_text
from ..base import (
    AppendsWithoutWindow,
    CompactionPlan,
    CompactsWhileAppending,
    Retracts,
    Snapshot,
    Store,
    check_conversation_id,
)
from ..bookkeeping import archived_copy, number, split_appended, unstored
from ..declarations import ConnectionField, StoreNode, StoreOption
from .cache import HeadCache
from .client import S3_DRIVER_ERRORS, ensure_bucket, make_client, parse_location
from .compaction import Compacting
from .layout import TAIL_EVENTS, Head, Layout, Segment, conversation_id_of, normalize_prefix
from .lifecycle import S3Lifecycle
from .objects import SegmentGone
from .retraction import Retracting
from .transfer import S3Transfer

#: Options that configure the boto3 client rather than the store.
_CLIENT_OPTIONS = ("endpoint_url", "region_name", "addressing_style", "max_attempts")
#: Keyword-only options: objects, not text a URL could carry.
_OBJECT_KEYWORDS = frozenset({"client", "owns_client", "backoff", "read_workers"})


class S3Store(
    Compacting,
    Retracting,
    S3Lifecycle,
    S3Transfer,
    CompactsWhileAppending,
    AppendsWithoutWindow,
    Retracts,
    Store,
):
    """Conversations in an S3 bucket (or anything that speaks S3 conditional writes).

    Every change to a conversation is one ``PutObject`` of its head with ``If-Match`` (or
    ``If-None-Match: *`` when creating it); a writer that loses the race re-reads, re-applies
    and retries with jittered backoff. Appends write the head (and, once per ``tail_events``
    events, a window segment first); compaction also writes immutable archive segments (keyed by version and a
    nonce, so a segment of a lost race is never referenced and is deleted best-effort).

    Pass a ready boto3 ``client`` (left open by :meth:`close` unless ``owns_client``), or
    use :meth:`from_url`. ``max_archived_events`` is the archive cap when a plan names none
    (None: unbounded); ``segment_events`` the most events one archive segment holds;
    ``tail_events`` the most active events the head holds (older ones are sealed into
    immutable window segments of that many, so an append writes a head of bounded size);
    ``backoff`` bounds the retries of lost races; ``read_workers`` threads fetch segments
    for :meth:`search` and :meth:`history`.
    """

    schemes = ("s3",)
    extra = "s3"
    driver_errors = S3_DRIVER_ERRORS
    long_term = "chat_memory.longterm.s3:S3Files"
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
        StoreOption("tail_events", int, minimum=1),
        StoreOption("create_bucket", bool),
    )
    node = StoreNode(
        "awsS3ChatMemory",
        "AWS S3 Chat Memory",
        "Chat memory in an S3 bucket (conditional writes).",
        "s3",
        fields=(
            ConnectionField(
                "bucket", "Bucket", "S3 bucket (created when missing).", required=True, min_length=3
            ),
            ConnectionField(
                "prefix", "Key prefix", "Folder inside the bucket.", default="chat-memory"
            ),
            ConnectionField(
                "region",
                "Region",
                "AWS region; empty uses the usual AWS configuration.",
                advanced=True,
            ),
            ConnectionField(
                "endpointUrl",
                "Endpoint URL",
                "For S3-compatible services, e.g. http://127.0.0.1:9000.",
                advanced=True,
            ),
        ),
        order=30,
    )
    default_max_archived_events: int | None = 1000

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        max_archived_events: int | None = 1000,
        segment_events: int = 128,
        tail_events: int = TAIL_EVENTS,
        create_bucket: bool = True,
        owns_client: bool = False,
        backoff: Backoff | None = None,
        read_workers: int = 8,
    ) -> None:
        if segment_events < 1:
            raise ConfigurationError(f"segment_events ({segment_events}) must be at least 1")
        if tail_events < 1:
            raise ConfigurationError(f"tail_events ({tail_events}) must be at least 1")
        self.client = client
        self.bucket = bucket
        self.layout = Layout(normalize_prefix(prefix))
        self.default_max_archived_events = max_archived_events
        self.segment_events = segment_events
        self.tail_events = tail_events
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
                raise StorageError(
                    f"S3Store could not reach or create bucket {bucket!r}: {exc}"
                ) from exc

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Store:
        """``s3://bucket/prefix?endpoint_url=…&region=…&max_archived_events=…&segment_events=…``.
        Keyword options override the URL's; ``client=`` uses a ready boto3 client instead of
        building one (and leaves it open on :meth:`close`)."""
        bucket, prefix, query = parse_location(url)
        unknown = sorted(set(options) - {o.name for o in cls.url_options} - _OBJECT_KEYWORDS)
        if unknown:
            known = ", ".join(sorted({*(o.name for o in cls.url_options), *_OBJECT_KEYWORDS}))
            raise ConfigurationError(
                f"S3 store option ({unknown[0]!r}) is not supported; known options: {known}"
            )
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
        options = {
            "region": connection.get("region"),
            "endpoint_url": connection.get("endpointUrl"),
        }
        query = urlencode({key: value for key, value in options.items() if value not in (None, "")})
        return f"s3://{connection['bucket']}/{prefix}" + (f"?{query}" if query else ""), {}

    # -- the Store protocol ---------------------------------------------------------------

    def load(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        return self._consistently(cid, lambda head: head.snapshot(self._read_window(head)))

    def append(self, conversation_id: str, events: Sequence[Event]) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        events = list(events)
        tries = itertools.count()

        def attempt() -> Snapshot | None:
            found = (self._heads.get(cid) if next(tries) == 0 else None) or self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            try:
                window = self._read_window(head)
            except SegmentGone:  # a stale head: a newer one sealed or archived that segment
                return None
            updated = self._appended(head, events, window)
            if updated is head:  # every event is stored already: nothing to write
                return head.snapshot(window)
            return updated.snapshot(window) if self._commit(updated, etag) else None

        return self.backoff.run(attempt, what=f"append to conversation {cid!r}")

    def append_without_window(self, conversation_id: str, events: Sequence[Event]) -> list[Event]:
        """Append like :meth:`append`, reading only the head (its tail of at most
        :data:`~.layout.TAIL_EVENTS` active events) and the window segments whose Bloom
        filter may hold one of the batch's ids; return the stored copies of ``events``."""
        cid = check_conversation_id(conversation_id)
        events = list(events)
        tries = itertools.count()

        def attempt() -> list[Event] | None:
            found = (self._heads.get(cid) if next(tries) == 0 else None) or self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            try:
                known = self._window_by_id(head, [e.id for e in events])
            except SegmentGone:
                return None
            updated = self._appended(head, events, known.values())
            if updated is not head and not self._commit(updated, etag):
                return None
            fresh = {
                e.id: e
                for e in (*updated.unpinned, *updated.pinned, *updated.active)
                if (e.seq or 0) > head.last_seq
            }
            return [known.get(e.id) or fresh[e.id] for e in events]

        return self.backoff.run(attempt, what=f"append to conversation {cid!r}")

    def find_events(
        self, conversation_id: str, event_ids: Collection[str], tool_call_ids: Collection[str]
    ) -> list[Event]:
        """The window events with one of ``event_ids`` and the tool events (archived ones
        marked) with one of ``tool_call_ids``: the head, and only the segments whose Bloom
        filter may hold one of them."""
        cid = check_conversation_id(conversation_id)

        def read(head: Head) -> list[Event]:
            by_seq = {e.seq: e for e in self._window_by_id(head, event_ids).values()}
            for event in self._tool_events(head, tool_call_ids):
                by_seq.setdefault(event.seq, event)
            return [by_seq[seq] for seq in sorted(by_seq, key=lambda seq: seq or 0)]

        return self._consistently(cid, read)

    def find_tool_events(self, conversation_id: str, tool_call_ids: Collection[str]) -> list[Event]:
        return self.find_events(conversation_id, (), tool_call_ids)

    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
    ) -> tuple[Snapshot, bool]:
        cid = check_conversation_id(conversation_id)
        events = list(events)
        tries = itertools.count()

        def attempt() -> tuple[Snapshot, bool] | None:
            found = (self._heads.get(cid) if next(tries) == 0 else None) or self._read_head(cid)
            head, etag = found if found else (Head.new(cid), None)
            try:
                parts = self._read_window_parts(head)
            except SegmentGone:
                return None
            window = [e for part in parts for e in part]
            appended = self._appended(head, events, window)
            snapshot = appended.snapshot(window)
            plan = planner(snapshot)
            if plan is None:
                if appended is head:  # every event is stored already: nothing to write
                    return snapshot, False
                return (snapshot, False) if self._commit(appended, etag) else None
            # one head write carries both the append and the compaction
            won = self._write_compacted(appended, etag, plan, parts)
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
    def _appended(head: Head, events: Sequence[Event], window: Iterable[Event]) -> Head:
        """``head`` with the events appended that it does not hold yet (by id, against the
        pinned events, the tail and ``window``: the window segments' events, or those of them
        that share an id with ``events``; the write of this head is the atomic step), or
        ``head`` itself when it holds them all. A pinned event supersedes an older one with
        the same pin key, which is unpinned (archived)."""
        fresh = unstored(events, (*head.pinned, *window, *head.active))
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

    def history(self, conversation_id: str) -> list[Event]:
        cid = check_conversation_id(conversation_id)

        def read(head: Head, segments: list[Segment], window: list[Event]) -> list[Event]:
            everything = [
                e for ref, seg in zip(head.segments, segments) for e in seg.live_events(ref.skip)
            ]
            everything += [*head.pinned, *head.unpinned, *window, *head.active]
            if head.summary is not None:
                everything.append(head.summary)
            return sorted(everything, key=lambda e: e.seq or 0)

        return self._with_archive(cid, read)

    def search(self, conversation_id: str, query: SearchQuery) -> SearchResult:
        """Matches on the folded text stored beside each archived event, so only the events of
        the requested page are parsed; every segment is fetched (concurrently) because the
        total must be exact."""
        cid = check_conversation_id(conversation_id)

        def read(head: Head, segments: list[Segment], window: list[Event]) -> SearchResult:
            # an archived event is parsed only when it is on the page
            matched: list[tuple[int, Event | dict[str, Any]]] = []
            for ref, seg in zip(head.segments, segments):
                for raw, text in zip(seg.events[ref.skip :], seg.text[ref.skip :]):
                    if text is not None and query.matches(text):
                        matched.append((raw["seq"], raw))
            for event in (*window, *head.active):
                text = search_text(event)
                if text is not None and query.matches(text):
                    matched.append((event.seq or 0, event))
            matched.sort(key=lambda item: item[0])
            page = matched[query.offset : query.offset + query.limit]
            return SearchResult(
                events=[e if isinstance(e, Event) else Event.model_validate(e) for _, e in page],
                total=len(matched),
            )

        return self._with_archive(cid, read)

    def retract(self, conversation_id: str, event_ids: Collection[str]) -> list[Event]:
        """One conditional head swap: the events (and their tool partners) move to a new
        retracted segment, the window and archive segments that held them are rewritten
        without them (see :mod:`.retraction`)."""
        cid = check_conversation_id(conversation_id)
        if isinstance(event_ids, str):
            raise InvalidInputError(
                f"event_ids must be a collection of event ids, not the string {event_ids!r}"
            )
        ids = list(event_ids)
        for event_id in ids:
            if not isinstance(event_id, str):
                raise InvalidInputError(f"event_ids: {event_id!r} is not an event id (a string)")
        return self._retract(cid, ids)

    def retracted(self, conversation_id: str) -> list[Event]:
        """The retracted events, oldest first, read from the head's retracted segments."""
        return self._retracted_events(check_conversation_id(conversation_id))

    def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        cid = check_conversation_id(conversation_id)

        def attempt() -> bool | None:
            found = self._read_head(cid)
            if found is None:
                return True
            head, etag = found
            if message is None:
                if head.compaction_error is None and not head.compaction_failures:
                    return True  # nothing to forget: no write
                update = head.evolve(compaction_error=None, compaction_failures=0)
            else:
                update = head.evolve(
                    compaction_error=message, compaction_failures=head.compaction_failures + 1
                )
            # a conditional write: a failure another worker counted meanwhile is re-read, not lost
            return True if self._write_head(update, etag) else None

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
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for obj in page.get("Contents", [])
        ]
        self._delete_quietly(keys)

    def conversations(self) -> list[str]:
        """Every key: bare ids (under ``heads/``) and scoped ones (under ``scopes/``), marked
        with :func:`~chat_memory.lifecycle.keys.stored_key`."""
        ids: list[str] = []
        for folder in (self.layout.heads, self.layout.scopes):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder
            ):
                for obj in page.get("Contents", []):
                    cid = conversation_id_of(obj["Key"].rsplit("/", 1)[-1])
                    if cid is None:
                        found = self._read_head_by_key(obj["Key"])
                        if found is None:
                            continue
                        cid = found
                    ids.append(stored_key(cid))
        return sorted(ids)

    def close(self) -> None:
        """Close the boto3 client if this store built it."""
        if self._owns_client:
            self.client.close()
