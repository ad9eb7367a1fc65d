"""Memory files kept in the process, beside an :class:`~chat_memory.backends.in_memory.InMemoryStore`."""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import ConcurrencyError
from ..lifecycle.keys import guard_name, is_scoped, scope_of_key
from ..lifecycle.records import ErasureCounts
from .budget import live_limits_hold
from .files import FileEntry, FileVersion, MemoryFiles, StoredFile, size_of
from .paths import placement_holds


@dataclass
class _Namespace:
    revision: int = 0
    files: dict[str, StoredFile] = field(default_factory=dict)
    log: deque[FileVersion] = field(default_factory=deque)
    #: content bytes of the versions in ``log``
    log_bytes: int = 0
    #: the retention of the namespace's last writer and when it wrote (docs/lifecycle.md)
    retention_seconds: int | None = None
    written_at: datetime | None = None


@dataclass
class _Namespaces:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_name: dict[str, _Namespace] = field(default_factory=dict)
    #: scope prefixes being erased, until a deadline (``time.monotonic``): commits refused
    guards: dict[str, float] = field(default_factory=dict)


#: the namespaces of each store object, living as long as it does
_of_store: weakref.WeakKeyDictionary[Any, _Namespaces] = weakref.WeakKeyDictionary()
_of_store_lock = threading.Lock()


def namespaces_of(store: Any) -> _Namespaces:
    with _of_store_lock:
        found = _of_store.get(store)
        if found is None:
            found = _of_store[store] = _Namespaces()
        return found


class InMemoryFiles(MemoryFiles):
    """One namespace held in this process (tests, demos); shared by every ``InMemoryFiles``
    made for the same store object."""

    keeps_retention = True

    def __init__(self, store: Any = None, namespace: str = "default", **options: Any) -> None:
        super().__init__(namespace, **options)
        self._space = namespaces_of(store if store is not None else self)

    def _ns(self) -> _Namespace:
        return self._space.by_name.setdefault(self.namespace, _Namespace())

    def _listing(self) -> dict[str, FileEntry]:
        with self._space.lock:
            return {
                p: FileEntry(p, size_of(f.content), f.revision) for p, f in self._ns().files.items()
            }

    def _read(self, path: str) -> StoredFile | None:
        with self._space.lock:
            return self._ns().files.get(path)

    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        with self._space.lock:
            _refuse_guarded(self._space, self.namespace)
            ns = self._ns()
            for path, revision in expected.items():
                current = ns.files.get(path)
                if (current.revision if current else None) != revision:
                    return False
            if not placement_holds(ns.files, writes):
                return False
            limits = self.limits
            sizes = {p: size_of(f.content) for p, f in ns.files.items()}
            new_sizes = {p: None if c is None else size_of(c) for p, c in writes.items()}
            if not live_limits_hold(sizes, new_sizes, limits.max_files, limits.max_namespace_bytes):
                return False
            ns.revision += 1
            now = datetime.now(timezone.utc)
            ns.retention_seconds, ns.written_at = self.retention_seconds, now
            for path, content in writes.items():
                if content is None:
                    ns.files.pop(path, None)
                else:
                    ns.files[path] = StoredFile(path, content, ns.revision)
                ns.log.append(FileVersion(path, ns.revision, content, now))
                ns.log_bytes += new_sizes[path] or 0
            # the oldest go first, never this commit's own (the same rule as versions_to_keep)
            while len(ns.log) > len(writes) and (
                len(ns.log) > limits.max_versions or ns.log_bytes > limits.version_bytes
            ):
                ns.log_bytes -= _bytes(ns.log.popleft())
            return True

    def stored_bytes(self) -> tuple[int, int]:
        """(content bytes of the current files, of the kept versions): what this namespace holds."""
        with self._space.lock:
            ns = self._ns()
            return sum(size_of(f.content) for f in ns.files.values()), ns.log_bytes

    def _versions(self, path: str) -> list[FileVersion]:
        with self._space.lock:
            return [v for v in self._ns().log if v.path == path]

    def _drop(self) -> None:
        with self._space.lock:
            self._space.by_name.pop(self.namespace, None)

    def namespaces(self) -> list[str]:
        """Every namespace holding files."""
        with self._space.lock:
            return sorted(n for n, ns in self._space.by_name.items() if ns.files)


def _refuse_guarded(space: _Namespaces, namespace: str) -> None:
    if space.guards and is_scoped(namespace):
        until = space.guards.get(guard_name(scope_of_key(namespace)))
        if until is not None and until > time.monotonic():
            raise ConcurrencyError(
                f"namespace {namespace[:80]!r} is being erased (forget); writes are refused "
                f"for {until - time.monotonic():.0f} more seconds"
            )


def _erased(ns: _Namespace) -> ErasureCounts:
    return ErasureCounts(long_term_files=len(ns.files), long_term_versions=len(ns.log))


def erase_namespaces(store: Any, scope: str, guard_seconds: float = 0.0) -> ErasureCounts:
    """Delete the namespaces of ``scope`` (a scope prefix) kept for ``store``, files and
    versions, refusing commits to them for ``guard_seconds``; what they held."""
    space = namespaces_of(store)
    total = ErasureCounts()
    with space.lock:
        moment = time.monotonic()
        space.guards = {k: v for k, v in space.guards.items() if v > moment}
        if guard_seconds > 0:
            space.guards[guard_name(scope)] = moment + guard_seconds
        for name in [n for n in space.by_name if n.startswith(scope)]:
            total += _erased(space.by_name.pop(name))
    return total


def sweep_namespaces(store: Any, scope: str | None, now: datetime) -> tuple[int, ErasureCounts]:
    """Delete the namespaces of ``store`` (of ``scope``; None: all) whose retention passed
    since their last write; how many and what they held."""
    space = namespaces_of(store)
    count, total = 0, ErasureCounts()
    with space.lock:
        for name, ns in list(space.by_name.items()):
            if scope is not None and not name.startswith(scope):
                continue
            if ns.retention_seconds is None or ns.written_at is None:
                continue
            if (now - ns.written_at).total_seconds() > ns.retention_seconds:
                count += 1
                total += _erased(space.by_name.pop(name))
    return count, total


def _bytes(version: FileVersion) -> int:
    return 0 if version.content is None else size_of(version.content)
