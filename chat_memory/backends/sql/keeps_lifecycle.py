"""The :class:`~chat_memory.backends.base.KeepsLifecycle` ability of the SQL stores:
:class:`SQLLifecycle` (mixed into :class:`~chat_memory.backends.sql.SQLStore`) and its async
twin :class:`AsyncSQLLifecycle` (into :class:`~chat_memory.backends.sql.AsyncSQLStore`), each
method one transaction of :class:`~chat_memory.backends.sql.lifecycle.LifecycleOperations` run
by the store's own retrying ``_write``/``_read`` (docs/lifecycle.md, docs/sql.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ...lifecycle.records import ConversationRecord, ErasureCounts
from ..base import KeepsLifecycle, check_conversation_id
from .lifecycle import NAMESPACE_BATCH, check_scope

if TYPE_CHECKING:
    from .operations import SQLOperations

T = TypeVar("T")


class SQLLifecycle(KeepsLifecycle):
    """:class:`KeepsLifecycle` for :class:`~chat_memory.backends.sql.SQLStore`: each method is
    one transaction of :class:`LifecycleOperations` (retried on a lost race), the sweeps and
    the scope's erasure batch by batch."""

    if TYPE_CHECKING:
        ops: SQLOperations

        def _ready(self) -> None: ...
        def _write(self, body: Callable[..., T], *args: Any, what: str) -> T: ...
        def _read(self, body: Callable[..., T], *args: Any) -> T: ...

    def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        return self._read(self.ops.life.record, check_conversation_id(conversation_id))

    def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(
            self.ops.life.set_metadata, cid, title, tags, values, what=f"metadata of {cid!r}"
        )

    def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        return self._read(self.ops.life.list_conversations, scope, tag, offset, limit)

    def idle_conversations(self, scope: str | None, cutoff: datetime, limit: int) -> list[str]:
        return self._read(self.ops.life.idle_conversations, scope, cutoff, limit)

    def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(self.ops.life.delete_idle, cid, cutoff, what=f"sweeping {cid!r}")

    def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        cid = check_conversation_id(conversation_id)
        self._ready()
        return self._write(self.ops.life.erase, cid, guard_seconds, what=f"erasing {cid!r}")

    def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        scope = check_scope(scope)
        self._ready()
        return self._write(
            self.ops.life.erase_scope, scope, limit, guard_seconds, what="erasing a scope"
        )

    def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        scope = check_scope(scope)
        self._ready()
        total = ErasureCounts()
        while True:
            n, counts = self._write(
                self.ops.life.erase_namespaces, scope, guard_seconds, what="erasing namespaces"
            )
            total += counts
            if n < NAMESPACE_BATCH:
                return total

    def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        self._ready()
        count, total = 0, ErasureCounts()
        while True:
            n, counts = self._write(
                self.ops.life.sweep_namespaces, scope, now, what="sweeping namespaces"
            )
            count, total = count + n, total + counts
            if n < NAMESPACE_BATCH:
                return count, total


class AsyncSQLLifecycle:
    """The same as coroutines, for :class:`~chat_memory.backends.sql.AsyncSQLStore` (the
    engine finds them by name)."""

    if TYPE_CHECKING:
        ops: SQLOperations

        async def _ready(self) -> None: ...
        async def _write(self, body: Callable[..., T], *args: Any, what: str) -> T: ...
        async def _read(self, body: Callable[..., T], *args: Any) -> T: ...

    async def conversation_record(self, conversation_id: str) -> ConversationRecord | None:
        """:meth:`KeepsLifecycle.conversation_record <chat_memory.backends.base.KeepsLifecycle.conversation_record>`."""
        return await self._read(self.ops.life.record, check_conversation_id(conversation_id))

    async def set_metadata(
        self,
        conversation_id: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        """:meth:`KeepsLifecycle.set_metadata <chat_memory.backends.base.KeepsLifecycle.set_metadata>`."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(
            self.ops.life.set_metadata, cid, title, tags, values, what=f"metadata of {cid!r}"
        )

    async def list_conversations(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        """:meth:`KeepsLifecycle.list_conversations <chat_memory.backends.base.KeepsLifecycle.list_conversations>`."""
        return await self._read(self.ops.life.list_conversations, scope, tag, offset, limit)

    async def idle_conversations(
        self, scope: str | None, cutoff: datetime, limit: int
    ) -> list[str]:
        """:meth:`KeepsLifecycle.idle_conversations <chat_memory.backends.base.KeepsLifecycle.idle_conversations>`."""
        return await self._read(self.ops.life.idle_conversations, scope, cutoff, limit)

    async def delete_idle(self, conversation_id: str, cutoff: datetime) -> ErasureCounts | None:
        """:meth:`KeepsLifecycle.delete_idle <chat_memory.backends.base.KeepsLifecycle.delete_idle>`."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(self.ops.life.delete_idle, cid, cutoff, what=f"sweeping {cid!r}")

    async def erase(self, conversation_id: str, guard_seconds: float) -> ErasureCounts:
        """:meth:`KeepsLifecycle.erase <chat_memory.backends.base.KeepsLifecycle.erase>`."""
        cid = check_conversation_id(conversation_id)
        await self._ready()
        return await self._write(self.ops.life.erase, cid, guard_seconds, what=f"erasing {cid!r}")

    async def erase_scope(self, scope: str, limit: int, guard_seconds: float) -> ErasureCounts:
        """:meth:`KeepsLifecycle.erase_scope <chat_memory.backends.base.KeepsLifecycle.erase_scope>`."""
        scope = check_scope(scope)
        await self._ready()
        return await self._write(
            self.ops.life.erase_scope, scope, limit, guard_seconds, what="erasing a scope"
        )

    async def erase_namespaces(self, scope: str, guard_seconds: float) -> ErasureCounts:
        """:meth:`KeepsLifecycle.erase_namespaces <chat_memory.backends.base.KeepsLifecycle.erase_namespaces>`."""
        scope = check_scope(scope)
        await self._ready()
        total = ErasureCounts()
        while True:
            n, counts = await self._write(
                self.ops.life.erase_namespaces, scope, guard_seconds, what="erasing namespaces"
            )
            total += counts
            if n < NAMESPACE_BATCH:
                return total

    async def sweep_namespaces(self, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
        """:meth:`KeepsLifecycle.sweep_namespaces <chat_memory.backends.base.KeepsLifecycle.sweep_namespaces>`."""
        await self._ready()
        count, total = 0, ErasureCounts()
        while True:
            n, counts = await self._write(
                self.ops.life.sweep_namespaces, scope, now, what="sweeping namespaces"
            )
            count, total = count + n, total + counts
            if n < NAMESPACE_BATCH:
                return count, total


__all__ = ["AsyncSQLLifecycle", "SQLLifecycle"]
