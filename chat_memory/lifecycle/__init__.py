"""Whose conversation it is and forgetting it: scopes and scoped keys (:mod:`.keys`), the
records the lifecycle calls return (:mod:`.records`); the scoped view of a store is in
:mod:`.scoped`. See docs/lifecycle.md."""

from __future__ import annotations

from .keys import (
    SCOPE_PREFIX,
    Scope,
    ScopedKey,
    is_scoped,
    parse_scoped_key,
    scope_of_key,
    scope_prefix,
    scoped_key,
    scoped_namespace,
    stored_key,
)
from .records import (
    ConversationInfo,
    ConversationRecord,
    ErasureCounts,
    ErasureReceipt,
    SweepReport,
)

__all__ = [
    "SCOPE_PREFIX",
    "ConversationInfo",
    "ConversationRecord",
    "ErasureCounts",
    "ErasureReceipt",
    "Scope",
    "ScopedKey",
    "SweepReport",
    "is_scoped",
    "parse_scoped_key",
    "scope_of_key",
    "scope_prefix",
    "scoped_key",
    "scoped_namespace",
    "stored_key",
]
