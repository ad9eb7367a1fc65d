"""Memory files kept in the process, beside an :class:`~chat_memory.backends.in_memory.InMemoryStore`."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

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


@dataclass
class _Namespaces:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_name: dict[str, _Namespace] = field(default_factory=dict)


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


def _bytes(version: FileVersion) -> int:
    return 0 if version.content is None else size_of(version.content)
