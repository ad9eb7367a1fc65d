"""The :class:`~chat_memory.backends.base.Forks` and :class:`~chat_memory.backends.base.Dumps`
abilities of :class:`~chat_memory.backends.sql.SQLStore` (:class:`SQLForksAndDumps`) and of
:class:`~chat_memory.backends.sql.AsyncSQLStore` (:class:`AsyncSQLForksAndDumps`, coroutines):
each method is one transaction of :class:`~chat_memory.backends.sql.transfer.SQLTransfer`,
run by the store's own ``_write`` (retried on a lost race) or ``_read``."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ..base import Dumps, Forks, Snapshot, check_conversation_id
from ..timeline import ConversationDump
from .transfer import SQLTransfer

if TYPE_CHECKING:
    from .operations import SQLOperations

__all__ = ["AsyncSQLForksAndDumps", "SQLForksAndDumps"]

T = TypeVar("T")


class SQLForksAndDumps(Forks, Dumps):
    """:class:`Forks` and :class:`Dumps` for :class:`~chat_memory.backends.sql.SQLStore`: each
    method one transaction of :class:`SQLTransfer` (retried on a lost race)."""

    if TYPE_CHECKING:
        ops: SQLOperations

        def _ready(self) -> None: ...
        def _write(self, body: Callable[..., T], *args: Any, what: str) -> T: ...
        def _read(self, body: Callable[..., T], *args: Any) -> T: ...

    @cached_property
    def _transfer(self) -> SQLTransfer:
        return SQLTransfer(self.ops)

    def fork(self, conversation_id: str, new_conversation_id: str, at: int | None) -> Snapshot:
        """One transaction, rows copied in the database (see :class:`SQLTransfer`)."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        self._ready()
        return self._write(self._transfer.fork, cid, new_cid, at, what=f"fork of {cid!r}")

    def dump(self, conversation_id: str) -> ConversationDump | None:
        return self._read(self._transfer.dump, check_conversation_id(conversation_id))

    def restore(self, dump: ConversationDump) -> None:
        cid = check_conversation_id(dump.conversation_id)
        self._ready()
        self._write(self._transfer.restore, dump, what=f"restore of {cid!r}")


class AsyncSQLForksAndDumps:
    """The same as coroutines, for :class:`~chat_memory.backends.sql.AsyncSQLStore` (the
    engine finds them by name)."""

    if TYPE_CHECKING:
        ops: SQLOperations

        async def _ready(self) -> None: ...
        async def _write(self, body: Callable[..., T], *args: Any, what: str) -> T: ...
        async def _read(self, body: Callable[..., T], *args: Any) -> T: ...

    @cached_property
    def _transfer(self) -> SQLTransfer:
        return SQLTransfer(self.ops)

    async def fork(
        self, conversation_id: str, new_conversation_id: str, at: int | None
    ) -> Snapshot:
        """:meth:`Forks.fork <chat_memory.backends.base.Forks.fork>`: one transaction."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        await self._ready()
        return await self._write(self._transfer.fork, cid, new_cid, at, what=f"fork of {cid!r}")

    async def dump(self, conversation_id: str) -> ConversationDump | None:
        """:meth:`Dumps.dump <chat_memory.backends.base.Dumps.dump>`."""
        return await self._read(self._transfer.dump, check_conversation_id(conversation_id))

    async def restore(self, dump: ConversationDump) -> None:
        """:meth:`Dumps.restore <chat_memory.backends.base.Dumps.restore>`: one transaction."""
        cid = check_conversation_id(dump.conversation_id)
        await self._ready()
        await self._write(self._transfer.restore, dump, what=f"restore of {cid!r}")
