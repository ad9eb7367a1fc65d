"""What the lifecycle calls return (:class:`ConversationInfo`, :class:`ErasureReceipt`,
:class:`SweepReport`), what a store hands the engine (:class:`ConversationRecord`,
:class:`ErasureCounts`), and the checks of metadata and paging (docs/lifecycle.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from ..errors import InvalidInputError
from .keys import Scope, parse_scoped_key

MAX_TITLE_LENGTH = 500
MAX_TAGS = 50
MAX_TAG_LENGTH = 100
#: the free key-values of one conversation, as compact JSON
MAX_METADATA_BYTES = 16_384
MAX_PAGE_SIZE = 500


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation as a store lists it: its store key (scoped or bare) and metadata."""

    conversation_id: str
    created_at: datetime
    last_active_at: datetime
    events: int
    title: str | None = None
    tags: tuple[str, ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConversationInfo:
    """One conversation of a scope, as :meth:`ChatMemory.conversations
    <chat_memory.ChatMemory.conversations>` lists it. ``id`` is the id the caller knows (the
    bare id inside the scope); ``events`` counts every stored event, archive and summaries
    included (``len(history())``); ``tags`` are sorted."""

    id: str
    user: str | None
    app: str | None
    title: str | None
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    created_at: datetime
    last_active_at: datetime
    events: int

    @classmethod
    def of(cls, record: ConversationRecord, scope: Scope | None) -> ConversationInfo:
        """The info of a store record: ``scope`` is the memory's (its records carry bare ids),
        None for the unbound memory (its records carry store keys)."""
        if scope is None:
            scope, cid = parse_scoped_key(record.conversation_id)
        else:
            cid = record.conversation_id
        return cls(
            id=str(cid),
            user=scope.user if scope else None,
            app=scope.app if scope else None,
            title=record.title,
            tags=tuple(sorted(record.tags)),
            metadata=json.loads(json.dumps(dict(record.values))),
            created_at=record.created_at,
            last_active_at=record.last_active_at,
            events=record.events,
        )


@dataclass(frozen=True)
class ErasureCounts:
    """What deleting conversations or namespaces removed, by kind. ``events``: pinned and
    active events (the window's, summary aside); ``archived_events``: archived events that
    are not summaries; ``summaries``: the current summary and archived ones."""

    conversations: int = 0
    events: int = 0
    archived_events: int = 0
    summaries: int = 0
    compaction_records: int = 0
    retracted_events: int = 0
    long_term_files: int = 0
    long_term_versions: int = 0

    def __add__(self, other: ErasureCounts) -> ErasureCounts:
        return ErasureCounts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


@dataclass(frozen=True)
class ErasureReceipt:
    """What :meth:`ChatMemory.forget <chat_memory.ChatMemory.forget>` deleted, counted by kind
    before deleting; all zeros when there was nothing (forgetting twice is harmless).
    ``user``/``app`` name the scope erased, ``conversation`` the one conversation (if so)."""

    user: str | None
    app: str | None
    conversation: str | None
    conversations: int
    events: int
    archived_events: int
    summaries: int
    compaction_records: int
    retracted_events: int
    long_term_files: int
    long_term_versions: int

    @classmethod
    def of(
        cls, counts: ErasureCounts, scope: Scope | None, conversation: str | None
    ) -> ErasureReceipt:
        return cls(
            user=scope.user if scope else None,
            app=scope.app if scope else None,
            conversation=conversation,
            **{f.name: getattr(counts, f.name) for f in fields(counts)},
        )

    @property
    def total(self) -> int:
        """Everything deleted, all kinds together."""
        return sum(getattr(self, f.name) for f in fields(ErasureCounts))


@dataclass(frozen=True)
class SweepReport:
    """What :meth:`ChatMemory.sweep <chat_memory.ChatMemory.sweep>` deleted: conversations idle
    longer than ``retention_seconds`` (None: no retention, nothing swept) and what they held
    (``erased``), long-term namespaces past their own retention, and ``skipped``: found idle
    but written to before their delete, so kept."""

    retention_seconds: int | None
    conversations: int
    long_term_namespaces: int
    skipped: int
    erased: ErasureCounts


def check_metadata(
    title: Any, tags: Any, values: Mapping[str, Any]
) -> tuple[str | None, tuple[str, ...] | None, dict[str, Any]]:
    """``set_metadata``'s arguments checked (an :class:`InvalidInputError` naming the field and
    the value): title None or text of at most 500 characters; tags None or a list of at most 50
    distinct non-empty strings of at most 100 characters; values JSON-serialisable, at most
    16 KB as JSON (a value None removes its key)."""
    if title is not None:
        if not isinstance(title, str) or len(title) > MAX_TITLE_LENGTH or "\x00" in title:
            raise InvalidInputError(
                f"title ({str(title)[:60]!r}) must be text without NUL, at most "
                f"{MAX_TITLE_LENGTH} characters"
            )
    checked_tags: tuple[str, ...] | None = None
    if tags is not None:
        if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
            raise InvalidInputError(f"tags ({tags!r}) must be a list of strings")
        listed = list(tags)
        for tag in listed:
            if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH or "\x00" in tag:
                raise InvalidInputError(
                    f"tag ({str(tag)[:60]!r}) must be a non-empty string without NUL, "
                    f"at most {MAX_TAG_LENGTH} characters"
                )
        checked_tags = tuple(sorted(set(listed)))
        if len(checked_tags) > MAX_TAGS:
            raise InvalidInputError(f"tags ({len(checked_tags)} of them): at most {MAX_TAGS}")
    try:
        text = json.dumps(dict(values), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata values must be JSON: {exc}") from None
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidInputError(
            f"metadata values ({len(text.encode('utf-8'))} bytes as JSON): at most "
            f"{MAX_METADATA_BYTES} bytes"
        )
    checked: dict[str, Any] = json.loads(text)
    return title, checked_tags, checked


def merged_values(current: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with ``changes`` applied (a value None removes its key), checked for size."""
    merged = {**current, **changes}
    result = {k: v for k, v in merged.items() if v is not None}
    check_metadata(None, None, result)
    return result


def check_page(page: Any, page_size: Any) -> tuple[int, int]:
    """``(offset, limit)`` of a listing page: ``page`` from 1, ``page_size`` 1 to 500."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise InvalidInputError(f"page ({page!r}) must be a whole number, 1 or more")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise InvalidInputError(
            f"page_size ({page_size!r}) must be a whole number from 1 to {MAX_PAGE_SIZE}"
        )
    return (page - 1) * page_size, page_size


def check_tag(tag: Any) -> str | None:
    """A listing's tag filter: None or a non-empty string."""
    if tag is not None and (not isinstance(tag, str) or not tag):
        raise InvalidInputError(f"tag ({tag!r}) must be a non-empty string or None")
    result: str | None = tag
    return result


__all__ = [
    "MAX_METADATA_BYTES",
    "MAX_PAGE_SIZE",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "MAX_TITLE_LENGTH",
    "ConversationInfo",
    "ConversationRecord",
    "ErasureCounts",
    "ErasureReceipt",
    "SweepReport",
    "check_metadata",
    "check_page",
    "check_tag",
    "merged_values",
]
