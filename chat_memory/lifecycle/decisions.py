"""The lifecycle decisions both memories share, as steps (:mod:`chat_memory.steps`): metadata,
listing, the retention sweep and erasure (docs/lifecycle.md). ``scope`` is the memory's
(None: the unbound memory); ``keeps`` says whether its store has
:class:`~chat_memory.backends.base.KeepsLifecycle`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import steps
from ..backends.base import check_conversation_id
from ..errors import ConfigurationError, InvalidInputError
from ..steps import Steps
from .keys import Scope, scope_prefix
from .records import (
    ConversationInfo,
    ErasureCounts,
    ErasureReceipt,
    SweepReport,
    check_metadata,
    check_page,
    check_tag,
)

#: How long, after an erasure, a write that would create an erased conversation again is
#: refused: longer than any write that began before the erasure can take to land.
ERASURE_GUARD_SECONDS = 30.0
#: Conversations a sweep or an erasure handles per store call.
BATCH = 100


def now() -> datetime:
    """The sweep's clock (aware UTC); a module function, so that a test can move it on."""
    return datetime.now(timezone.utc)


def require_lifecycle(keeps: bool, what: str) -> None:
    """A store without the ability: a clear :class:`ConfigurationError`, not an AttributeError."""
    if not keeps:
        raise ConfigurationError(
            f"this store cannot {what} (it lacks the KeepsLifecycle ability: conversation "
            "metadata, listing by scope, retention sweeps and erasure; memory:// has it)"
        )


def set_metadata(
    scope: Scope | None,
    conversation_id: str,
    title: Any,
    tags: Any,
    values: Mapping[str, Any],
    keeps: bool,
) -> Steps[ConversationInfo]:
    """Set a conversation's title, tags and free key-values (see ChatMemory.set_metadata)."""
    cid = check_conversation_id(conversation_id)
    checked_title, checked_tags, checked_values = check_metadata(title, tags, values)
    require_lifecycle(keeps, "keep conversation metadata")
    record = yield from steps.set_metadata(cid, checked_title, checked_tags, checked_values)
    return ConversationInfo.of(record, scope)


def conversations(
    scope: Scope | None, tag: Any, page: Any, page_size: Any, keeps: bool
) -> Steps[list[ConversationInfo]]:
    """One page of the scope's conversations, newest activity first."""
    offset, limit = check_page(page, page_size)
    checked_tag = check_tag(tag)
    require_lifecycle(keeps, "list conversations")
    records = yield from steps.list_conversations(scope_prefix(scope), checked_tag, offset, limit)
    return [ConversationInfo.of(record, scope) for record in records]


def sweep(scope: Scope | None, retention_seconds: int | None, keeps: bool) -> Steps[SweepReport]:
    """Delete the conversations idle longer than the retention (the scope's, or the whole
    store's for the unbound memory), batch by batch, each by a conditional delete; then the
    long-term namespaces past their own retention."""
    require_lifecycle(keeps, "sweep conversations")
    moment = now()
    reach = None if scope is None else scope.prefix
    deleted, skipped, erased = 0, 0, ErasureCounts()
    if retention_seconds is not None:
        cutoff = moment - timedelta(seconds=retention_seconds)
        while True:
            keys = yield from steps.idle_conversations(reach, cutoff, BATCH)
            done = 0
            for key in keys:
                counts = yield from steps.delete_idle(key, cutoff)
                if counts is None:  # written to (or deleted by another sweeper) since listed
                    skipped += 1
                else:
                    done += 1
                    erased += counts
            deleted += done
            # a short batch was the last; a batch that deleted nothing would only repeat
            if len(keys) < BATCH or done == 0:
                break
    namespaces, held = yield from steps.sweep_namespaces(reach, moment)
    return SweepReport(
        retention_seconds=retention_seconds,
        conversations=deleted,
        long_term_namespaces=namespaces,
        skipped=skipped,
        erased=erased + held,
    )


def forget(
    scope: Scope | None,
    user: Any,
    app: Any,
    conversation: Any,
    keeps: bool,
) -> Steps[ErasureReceipt]:
    """Erase a user's scope (conversations and long-term namespaces) or one conversation."""
    if (user is None) == (conversation is None):
        raise InvalidInputError(
            f"forget needs exactly one of user ({user!r}) and conversation ({conversation!r})"
        )
    if conversation is not None:
        if app is not None:
            raise InvalidInputError(
                f"app ({app!r}) goes with user=, not conversation= (a conversation is "
                "forgotten in this memory's own scope)"
            )
        cid = check_conversation_id(conversation)
        require_lifecycle(keeps, "forget a conversation")
        counts = yield from steps.erase(cid, ERASURE_GUARD_SECONDS)
        return ErasureReceipt.of(counts, scope, cid)
    target = Scope(user, app)
    if scope is not None and target != scope:
        raise InvalidInputError(
            f"user ({user!r}, app {app!r}) is not this memory's (user {scope.user!r}, app "
            f"{scope.app!r}): a memory bound to a user forgets only that user"
        )
    require_lifecycle(keeps, "forget a user")
    total = ErasureCounts()
    while True:  # erase until empty: writes racing the erasure are erased by a later batch
        counts = yield from steps.erase_scope(target.prefix, BATCH, ERASURE_GUARD_SECONDS)
        total += counts
        if counts.conversations < BATCH:
            break
    total += yield from steps.erase_namespaces(target.prefix, ERASURE_GUARD_SECONDS)
    return ErasureReceipt.of(total, target, None)


__all__ = [
    "BATCH",
    "ERASURE_GUARD_SECONDS",
    "conversations",
    "forget",
    "now",
    "require_lifecycle",
    "set_metadata",
    "sweep",
]
