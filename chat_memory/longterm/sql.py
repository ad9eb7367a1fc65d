"""Memory files in the SQL store's database (the ``<prefix>memory_*`` tables, schema version 2).

A commit is one write transaction that first locks the namespace's row (``SELECT … FOR
UPDATE``; SQLite's ``BEGIN IMMEDIATE`` holds the database write lock already), then checks
every expected file revision, writes, records versions and bumps the namespace revision.
Conflicts the database reports (a concurrent first insert of the namespace row, busy
SQLite) are retried by the store's own loop."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import sqlalchemy as sa

from ..backends.sql.connections import SQL_DRIVER_ERRORS
from ..backends.sql.schema import scope_key
from ..backends.sql.store import SQLStore
from ..lifecycle.keys import scope_of_key
from .budget import live_limits_hold, versions_to_keep
from .files import FileEntry, FileVersion, MemoryFiles, StoredFile, size_of
from .paths import placement_holds

T = TypeVar("T")


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class SQLFiles(MemoryFiles):
    """One namespace in the tables of a :class:`~chat_memory.backends.sql.SQLStore`."""

    driver_errors = SQL_DRIVER_ERRORS
    #: ``expires_at`` on the namespace row (schema version 7): what ``memory.sweep()`` reads
    keeps_retention = True

    def __init__(self, store: SQLStore, namespace: str, **options: Any) -> None:
        super().__init__(namespace, **options)
        self.store = store
        self._ns_key = _key(self.namespace)
        tables = store.tables
        self._namespaces, self._files, self._log = (
            tables.memory_namespaces,
            tables.memory_files,
            tables.memory_versions,
        )

    def _run(self, operation: Callable[[], T], what: str) -> T:
        self.store._ready()
        return self.store._retrying(operation, what)

    def _listing(self) -> dict[str, FileEntry]:
        f = self._files
        query = sa.select(f.c.path, f.c.size, f.c.revision).where(f.c.namespace_key == self._ns_key)

        def read() -> dict[str, FileEntry]:
            with self.store._tx.read() as connection:
                return {
                    row.path: FileEntry(row.path, row.size, row.revision)
                    for row in connection.execute(query)
                }

        return self._run(read, "listing memory files")

    def _read(self, path: str) -> StoredFile | None:
        f = self._files
        query = sa.select(f.c.content, f.c.revision).where(
            f.c.namespace_key == self._ns_key, f.c.path_key == _key(path)
        )

        def read() -> StoredFile | None:
            with self.store._tx.read() as connection:
                row = connection.execute(query).first()
            return StoredFile(path, row.content, row.revision) if row is not None else None

        return self._run(read, "reading a memory file")

    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        n, f, log = self._namespaces, self._files, self._log

        def commit() -> bool:
            now = datetime.now(timezone.utc)
            with self.store._tx.write() as connection:
                # a scoped namespace being erased (forget) refuses the commit
                self.store.ops.life.admit_namespace(connection, self.namespace, now)
                by_key = n.c.namespace_key == self._ns_key
                revision = connection.execute(
                    sa.select(n.c.revision).where(by_key).with_for_update()
                ).scalar()
                if revision is None:
                    connection.execute(
                        n.insert().values(
                            namespace_key=self._ns_key,
                            namespace=self.namespace,
                            revision=0,
                            updated_at=now,
                            scope_key=_scope_key_of(self.namespace),
                        )
                    )
                    revision = 0
                keys = {path: _key(path) for path in {*expected, *writes}}
                stored = connection.execute(
                    sa.select(f.c.path_key, f.c.path, f.c.revision, f.c.size).where(
                        f.c.namespace_key == self._ns_key
                    )
                ).all()
                current = {row.path_key: row.revision for row in stored}
                if any(current.get(keys[path]) != rev for path, rev in expected.items()):
                    return False
                if not placement_holds((row.path for row in stored), writes):
                    return False
                sizes = {row.path_key: row.size for row in stored}
                new_sizes = {keys[p]: None if c is None else size_of(c) for p, c in writes.items()}
                limits = self.limits
                if not live_limits_hold(
                    sizes, new_sizes, limits.max_files, limits.max_namespace_bytes
                ):
                    return False
                revision += 1
                for path, content in writes.items():
                    where = sa.and_(f.c.namespace_key == self._ns_key, f.c.path_key == keys[path])
                    if content is None:
                        connection.execute(f.delete().where(where))
                    elif keys[path] in current:
                        connection.execute(
                            f.update()
                            .where(where)
                            .values(content=content, size=size_of(content), revision=revision)
                        )
                    else:
                        connection.execute(
                            f.insert().values(
                                namespace_key=self._ns_key,
                                path_key=keys[path],
                                path=path,
                                revision=revision,
                                size=size_of(content),
                                content=content,
                            )
                        )
                    connection.execute(
                        log.insert().values(
                            namespace_key=self._ns_key,
                            path_key=keys[path],
                            path=path,
                            revision=revision,
                            content=content,
                            created_at=now,
                        )
                    )
                # the retention of the namespace's last writer, from its last write
                expires = (
                    None
                    if self.retention_seconds is None
                    else now + timedelta(seconds=self.retention_seconds)
                )
                connection.execute(
                    n.update()
                    .where(by_key)
                    .values(revision=revision, updated_at=now, expires_at=expires)
                )
                self._trim(connection, len(writes))
            return True

        return self._run(commit, "committing memory files")

    def _trim(self, connection: sa.Connection, own: int) -> None:
        """Drop the oldest versions past the count and byte budgets. The sizes are read from
        the rows themselves (no stored counter can drift, and a namespace written before the
        byte budget existed is trimmed by its next commit); at most ``max_versions`` plus
        this commit's rows are read, newest first, only their lengths."""
        log = self._log
        length = _byte_length(connection, log.c.content)
        rows = connection.execute(
            sa.select(log.c.id, sa.func.coalesce(length, 0))
            .where(log.c.namespace_key == self._ns_key)
            .order_by(log.c.id.desc())
            .limit(self.limits.max_versions + own + 1)  # one past the most that can be kept
        ).all()
        kept, _ = versions_to_keep(
            (row[1] for row in rows), own, self.limits.max_versions, self.limits.version_bytes
        )
        if kept < len(rows):
            connection.execute(
                log.delete().where(log.c.namespace_key == self._ns_key, log.c.id <= rows[kept][0])
            )

    def stored_bytes(self) -> tuple[int, int]:
        """(content bytes of the current files, of the kept versions), as the database counts them."""
        f, log = self._files, self._log

        def read() -> tuple[int, int]:
            with self.store._tx.read() as connection:
                length = _byte_length(connection, log.c.content)
                live = connection.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(f.c.size), 0)).where(
                        f.c.namespace_key == self._ns_key
                    )
                ).scalar_one()
                kept = connection.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(length), 0)).where(
                        log.c.namespace_key == self._ns_key
                    )
                ).scalar_one()
            return int(live), int(kept)

        return self._run(read, "measuring memory files")

    def _versions(self, path: str) -> list[FileVersion]:
        log = self._log
        query = (
            sa.select(log.c.revision, log.c.content, log.c.created_at)
            .where(log.c.namespace_key == self._ns_key, log.c.path_key == _key(path))
            .order_by(log.c.revision)
        )

        def read() -> list[FileVersion]:
            with self.store._tx.read() as connection:
                return [
                    FileVersion(path, r.revision, r.content, _utc(r.created_at))
                    for r in connection.execute(query)
                ]

        return self._run(read, "listing memory file versions")

    def _drop(self) -> None:
        def drop() -> None:
            with self.store._tx.write() as connection:
                for table in (self._log, self._files, self._namespaces):
                    connection.execute(table.delete().where(table.c.namespace_key == self._ns_key))

        self._run(drop, "deleting a memory namespace")

    def namespaces(self) -> list[str]:
        """Every namespace holding files."""
        n, f = self._namespaces, self._files
        query = (
            sa.select(n.c.namespace)
            .where(sa.exists().where(f.c.namespace_key == n.c.namespace_key))
            .order_by(n.c.namespace)
        )

        def read() -> list[str]:
            with self.store._tx.read() as connection:
                return list(connection.execute(query).scalars())

        return self._run(read, "listing memory namespaces")


def _scope_key_of(namespace: str) -> str | None:
    """The ``scope_key`` of a namespace's row: its scope's, None for a bare namespace."""
    scope = scope_of_key(namespace)
    return scope_key(scope) if scope else None


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _byte_length(connection: sa.Connection, column: Any) -> Any:
    """UTF-8 bytes of a text column (SQLite's ``length()`` of text counts characters)."""
    if connection.dialect.name == "sqlite":
        return sa.func.length(sa.cast(column, sa.LargeBinary))
    return sa.func.octet_length(column)
