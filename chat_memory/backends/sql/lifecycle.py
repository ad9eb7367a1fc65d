"""The lifecycle half of the SQL store (:class:`~chat_memory.backends.base.KeepsLifecycle`):
metadata on the conversation's row, listing by scope through an index, the retention sweep's
conditional delete and erasure behind a guard (docs/lifecycle.md, docs/sql.md).

:class:`LifecycleOperations` holds the transaction bodies (each takes a sync
:class:`~sqlalchemy.Connection` inside a transaction its caller opened, as
:class:`~chat_memory.backends.sql.operations.SQLOperations` does), so the sync and the
async store (:mod:`~chat_memory.backends.sql.keeps_lifecycle`) run the same code.

Racing writers. Creating a conversation (or committing to a scoped long-term namespace) reads
the guards table in the creating transaction. On SQLite every write transaction holds the
database lock (``BEGIN IMMEDIATE``), so an erasure and a creation are ordered whole. On
PostgreSQL a creation first takes *shared* transaction-level advisory locks on its key's and
its scope's digests, an erasure an *exclusive* one on what it guards before it writes the
guard: a creation that began before the erasure commits before the erasure reads the rows it
deletes (so they are deleted), one that begins after waits and then sees the guard (refused).
The sweep needs no lock of its own: its ``DELETE`` condition (``updated_at < cutoff``) is
checked on the row locked with ``FOR UPDATE``, which a writer holding the row makes it wait
for and re-read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from ...errors import ConcurrencyError, InvalidInputError, StorageError
from ...events import EventType
from ...lifecycle.keys import SCOPE_PREFIX, guard_name, scope_of_key, stored_key
from ...lifecycle.records import ConversationRecord, ErasureCounts, merged_values
from .schema import Tables, row_key, scope_key

#: Long-term namespaces deleted per transaction by a sweep or an erasure.
NAMESPACE_BATCH = 100
_SUMMARY = EventType.SUMMARY.value


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite gives it back naive)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _lock_id(digest: str) -> int:
    """A PostgreSQL advisory lock id (a signed 64-bit integer) for a hex digest."""
    return int.from_bytes(bytes.fromhex(digest[:16]), "big", signed=True)


def check_scope(scope: Any) -> str:
    """``scope`` if it is a non-empty scope prefix (what erasing a scope needs)."""
    if not isinstance(scope, str) or not scope:
        raise InvalidInputError(f"scope ({scope!r}) must be a scope prefix, not empty")
    return scope


def _guarded_refusal(name: str, until: datetime, moment: datetime) -> ConcurrencyError:
    seconds = max(0.0, (_utc(until) - moment).total_seconds())
    return ConcurrencyError(
        f"{name[:80]!r} is being erased (forget); writes that would create it again are "
        f"refused for {seconds:.0f} more seconds"
    )


class LifecycleOperations:
    """The lifecycle's transaction bodies over the tables of one prefix."""

    def __init__(self, tables: Tables, new_conversation: sa.Insert) -> None:
        self.tables = tables
        conversations, events = tables.conversations, tables.events
        #: the INSERT of a conversation's row (``b_key``, ``b_cid``, ``b_now``, ``b_scope``)
        self.new_conversation = new_conversation
        guards = tables.guards
        self.live_guards = sa.select(guards.c.digest, guards.c.until).where(
            guards.c.digest.in_(sa.bindparam("b_digests", expanding=True)),
            guards.c.until > sa.bindparam("b_now"),
        )
        # every stored event of the conversation (len(history())), by the window index
        count = (
            sa.select(sa.func.count())
            .where(events.c.conversation_ref == conversations.c.id)
            .scalar_subquery()
        )
        self.record_columns = (
            conversations.c.conversation_id,
            conversations.c.created_at,
            conversations.c.updated_at,
            conversations.c.title,
            conversations.c.tags,
            conversations.c.meta,
            count.label("events"),
        )

    # -- guards ------------------------------------------------------------------------------

    def admit(self, connection: sa.Connection, cid: str, now: datetime) -> None:
        """Refuse creating conversation ``cid`` while an erasure guard on it or on its scope
        is live (:class:`ConcurrencyError`); inside the creating transaction."""
        self._refuse_guarded(connection, cid, [row_key(cid), scope_key(scope_of_key(cid))], now)

    def admit_namespace(self, connection: sa.Connection, namespace: str, now: datetime) -> None:
        """Refuse a commit to a scoped long-term namespace while its scope's guard is live."""
        if namespace.startswith(SCOPE_PREFIX):
            self._refuse_guarded(connection, namespace, [scope_key(scope_of_key(namespace))], now)

    def _refuse_guarded(
        self, connection: sa.Connection, name: str, digests: list[str], now: datetime
    ) -> None:
        if connection.dialect.name == "postgresql":
            # shared: creations do not wait for each other, only for an erasure (see above)
            for digest in sorted(set(digests)):
                connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock_shared(:id)"), {"id": _lock_id(digest)}
                )
        found = connection.execute(self.live_guards, {"b_digests": digests, "b_now": now}).first()
        if found is not None:
            raise _guarded_refusal(name, found.until, now)

    def _guard(self, connection: sa.Connection, name: str, seconds: float, now: datetime) -> None:
        """Write (or extend) the guard of ``name`` (a key or a scope prefix), first taking the
        exclusive lock creations of it share on PostgreSQL; lapsed guards are dropped."""
        guards, digest = self.tables.guards, guard_name(name)
        if connection.dialect.name == "postgresql":
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": _lock_id(digest)}
            )
        connection.execute(guards.delete().where(guards.c.until <= now))
        if seconds <= 0:
            return
        until = now + timedelta(seconds=seconds)
        updated = connection.execute(
            guards.update().where(guards.c.digest == digest).values(until=until)
        )
        if not updated.rowcount:
            connection.execute(guards.insert().values(digest=digest, until=until))

    # -- conversations -----------------------------------------------------------------------

    def new_row(self, connection: sa.Connection, cid: str, key: str, now: datetime) -> int:
        """Insert conversation ``cid``'s row at version 0, in its scope, unless an erasure
        guards it; its id."""
        self.admit(connection, cid, now)
        inserted = connection.execute(
            self.new_conversation,
            {"b_key": key, "b_cid": cid, "b_now": now, "b_scope": scope_key(scope_of_key(cid))},
        ).inserted_primary_key
        if inserted is None:  # SQLAlchemy has it for every single-row INSERT
            raise StorageError(f"the database gave no id to the new row of conversation {cid!r}")
        return int(inserted[0])

    def _record(self, row: Any) -> ConversationRecord:
        return ConversationRecord(
            conversation_id=stored_key(row.conversation_id),
            created_at=_utc(row.created_at),
            last_active_at=_utc(row.updated_at),
            events=int(row.events),
            title=row.title,
            tags=tuple(json.loads(row.tags)) if row.tags else (),
            values=json.loads(row.meta) if row.meta else {},
        )

    def record(self, connection: sa.Connection, cid: str) -> ConversationRecord | None:
        conversations = self.tables.conversations
        row = connection.execute(
            sa.select(*self.record_columns).where(conversations.c.conversation_key == row_key(cid))
        ).first()
        return None if row is None else self._record(row)

    def set_metadata(
        self,
        connection: sa.Connection,
        cid: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> ConversationRecord:
        """Lock the row (created empty when missing), merge, write it once with
        ``updated_at``, and replace the tag rows when ``tags`` is given."""
        conversations, tag_rows = self.tables.conversations, self.tables.conversation_tags
        key, now = row_key(cid), _now()
        row = connection.execute(
            sa.select(conversations.c.id, conversations.c.scope_key, conversations.c.meta)
            .where(conversations.c.conversation_key == key)
            .with_for_update()
        ).first()
        if row is None:
            ref, scope, current = self.new_row(connection, cid, key, now), None, {}
        else:
            ref, scope, current = row.id, row.scope_key, json.loads(row.meta or "{}")
        merged = merged_values(current, values)
        changes: dict[str, Any] = {
            "updated_at": now,
            "meta": json.dumps(merged) if merged else None,
        }
        if title is not None:
            changes["title"] = title
        if tags is not None:
            kept = sorted(set(tags))
            changes["tags"] = json.dumps(kept) if kept else None
            connection.execute(tag_rows.delete().where(tag_rows.c.conversation_ref == ref))
            if kept:
                scope = scope or scope_key(scope_of_key(cid))
                connection.execute(
                    tag_rows.insert(),
                    [
                        {"conversation_ref": ref, "tag_key": row_key(t), "scope_key": scope}
                        for t in kept
                    ],
                )
        connection.execute(
            conversations.update().where(conversations.c.id == ref).values(**changes)
        )
        found = self.record(connection, cid)
        if found is None:  # the row is locked by this transaction
            raise StorageError(f"conversation {cid!r} vanished inside its own transaction")
        return found

    def listing_query(self, scope: str, tag: str | None) -> sa.Select[Any]:
        """The scope's conversations (with ``tag``), newest activity first, ties by key: the
        ``(scope_key, updated_at)`` index walked backwards, or the tag index then a sort of
        the tagged rows."""
        conversations, tag_rows = self.tables.conversations, self.tables.conversation_tags
        query = sa.select(*self.record_columns)
        if tag is None:
            query = query.where(conversations.c.scope_key == scope_key(scope))
        else:
            query = query.join(tag_rows, tag_rows.c.conversation_ref == conversations.c.id).where(
                tag_rows.c.scope_key == scope_key(scope), tag_rows.c.tag_key == row_key(tag)
            )
        return query.order_by(conversations.c.updated_at.desc(), conversations.c.conversation_id)

    def list_conversations(
        self, connection: sa.Connection, scope: str, tag: str | None, offset: int, limit: int
    ) -> list[ConversationRecord]:
        query = self.listing_query(scope, tag).offset(offset).limit(limit)
        return [self._record(row) for row in connection.execute(query)]

    def idle_query(self, scope: str | None, cutoff: datetime, limit: int) -> sa.Select[Any]:
        """Keys last written before ``cutoff``, oldest first, by the scope's index (or, for
        every scope, the ``updated_at`` index)."""
        conversations = self.tables.conversations
        query = sa.select(conversations.c.conversation_id).where(
            conversations.c.updated_at < cutoff
        )
        if scope is not None:
            query = query.where(conversations.c.scope_key == scope_key(scope))
        return query.order_by(conversations.c.updated_at).limit(limit)

    def idle_conversations(
        self, connection: sa.Connection, scope: str | None, cutoff: datetime, limit: int
    ) -> list[str]:
        return [
            stored_key(cid)
            for cid in connection.execute(self.idle_query(scope, cutoff, limit)).scalars()
        ]

    def _counts(self, connection: sa.Connection, ref: int) -> ErasureCounts:
        """What deleting conversation row ``ref`` removes, by kind (read before the delete)."""
        tables = self.tables
        events, compactions, retracted = tables.events, tables.compactions, tables.retracted
        live = archived = summaries = 0
        for is_archived, kind, n in connection.execute(
            sa.select(events.c.archived, events.c.type, sa.func.count())
            .where(events.c.conversation_ref == ref)
            .group_by(events.c.archived, events.c.type)
        ):
            if kind == _SUMMARY:
                summaries += n
            elif is_archived:
                archived += n
            else:
                live += n

        def rows_of(table: sa.Table) -> int:
            return int(
                connection.execute(
                    sa.select(sa.func.count()).where(table.c.conversation_ref == ref)
                ).scalar_one()
            )

        return ErasureCounts(
            conversations=1,
            events=live,
            archived_events=archived,
            summaries=summaries,
            compaction_records=rows_of(compactions),
            retracted_events=rows_of(retracted),
        )

    def _delete(self, connection: sa.Connection, ref: int) -> ErasureCounts:
        """Count, then delete conversation row ``ref`` with every row it owns."""
        counts = self._counts(connection, ref)
        tables = self.tables
        for table in (
            tables.events,
            tables.retracted,
            tables.compactions,
            tables.conversation_tags,
            tables.timeline,
        ):
            connection.execute(table.delete().where(table.c.conversation_ref == ref))
        conversations = tables.conversations
        connection.execute(conversations.delete().where(conversations.c.id == ref))
        return counts

    def delete_idle(
        self, connection: sa.Connection, cid: str, cutoff: datetime
    ) -> ErasureCounts | None:
        """The conditional delete: the row is locked only if it is still idle (PostgreSQL
        re-reads the condition on the row a writer held), then deleted with what it owns."""
        conversations = self.tables.conversations
        ref = connection.execute(
            sa.select(conversations.c.id)
            .where(
                conversations.c.conversation_key == row_key(cid),
                conversations.c.updated_at < cutoff,
            )
            .with_for_update()
        ).scalar()
        return None if ref is None else self._delete(connection, ref)

    def erase(self, connection: sa.Connection, cid: str, guard_seconds: float) -> ErasureCounts:
        self._guard(connection, cid, guard_seconds, _now())
        conversations = self.tables.conversations
        ref = connection.execute(
            sa.select(conversations.c.id)
            .where(conversations.c.conversation_key == row_key(cid))
            .with_for_update()
        ).scalar()
        return ErasureCounts() if ref is None else self._delete(connection, ref)

    def erase_scope(
        self, connection: sa.Connection, scope: str, limit: int, guard_seconds: float
    ) -> ErasureCounts:
        self._guard(connection, scope, guard_seconds, _now())
        conversations = self.tables.conversations
        refs = connection.execute(
            sa.select(conversations.c.id)
            .where(conversations.c.scope_key == scope_key(scope))
            .order_by(conversations.c.id)
            .limit(limit)
            .with_for_update()
        ).scalars()
        total = ErasureCounts()
        for ref in list(refs):
            total += self._delete(connection, ref)
        return total

    # -- long-term namespaces ----------------------------------------------------------------

    def _drop_namespaces(self, connection: sa.Connection, keys: list[str]) -> ErasureCounts:
        """Count, then delete the namespaces ``keys`` with their files and versions."""
        namespaces, files, versions = (
            self.tables.memory_namespaces,
            self.tables.memory_files,
            self.tables.memory_versions,
        )
        if not keys:
            return ErasureCounts()

        def rows_of(table: sa.Table) -> int:
            return int(
                connection.execute(
                    sa.select(sa.func.count()).where(table.c.namespace_key.in_(keys))
                ).scalar_one()
            )

        counts = ErasureCounts(long_term_files=rows_of(files), long_term_versions=rows_of(versions))
        for table in (versions, files, namespaces):
            connection.execute(table.delete().where(table.c.namespace_key.in_(keys)))
        return counts

    def erase_namespaces(
        self, connection: sa.Connection, scope: str, guard_seconds: float
    ) -> tuple[int, ErasureCounts]:
        """Guard the scope, delete up to :data:`NAMESPACE_BATCH` of its namespaces; (how many, what they held)."""
        self._guard(connection, scope, guard_seconds, _now())
        namespaces = self.tables.memory_namespaces
        keys = list(
            connection.execute(
                sa.select(namespaces.c.namespace_key)
                .where(namespaces.c.scope_key == scope_key(scope))
                .order_by(namespaces.c.namespace_key)
                .limit(NAMESPACE_BATCH)
                .with_for_update()
            ).scalars()
        )
        return len(keys), self._drop_namespaces(connection, keys)

    def sweep_namespaces(
        self, connection: sa.Connection, scope: str | None, now: datetime
    ) -> tuple[int, ErasureCounts]:
        """Delete up to :data:`NAMESPACE_BATCH` namespaces whose retention lapsed before
        ``now`` (checked on the locked rows: a commit since keeps its namespace)."""
        namespaces = self.tables.memory_namespaces
        query = sa.select(namespaces.c.namespace_key).where(namespaces.c.expires_at < now)
        if scope is not None:
            query = query.where(namespaces.c.scope_key == scope_key(scope))
        keys = list(
            connection.execute(
                query.order_by(namespaces.c.expires_at).limit(NAMESPACE_BATCH).with_for_update()
            ).scalars()
        )
        return len(keys), self._drop_namespaces(connection, keys)


__all__ = ["NAMESPACE_BATCH", "LifecycleOperations", "check_scope"]
