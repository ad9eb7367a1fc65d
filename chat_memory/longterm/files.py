"""``MemoryFiles``: one namespace of small text files under ``/memories``, with the memory
tool's commands, per-file compare-and-swap and a version for every change.

A backend supplies six primitives (list, read, commit, versions, drop, stored bytes); every command is
written once, here, as a read-modify-write that commits only if each file it read is
still at the revision it read (compare-and-swap per file) and is retried with bounded,
jittered backoff when another writer got there first. So two agents editing one file
never lose an update: the loser re-reads and re-applies its edit (or is told why it no
longer applies). Each commit gets the namespace's next revision; every file it writes or
deletes is recorded as a :class:`FileVersion` at that revision.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from ..backends.failures import DriverErrors, wrap_driver_errors
from ..backoff import Backoff
from ..errors import ConcurrencyError, ConfigurationError
from ..lifecycle.keys import SCOPE_PREFIX, ScopedKey, is_scoped
from .budget import MemoryLimits
from .occurrences import echo, find_occurrences, line_list, shown
from .paths import ROOT, MemoryLimitError, MemoryToolError, check_path, check_text, is_within
from .views import directory_view, file_view, numbered, snippet_line

T = TypeVar("T")


@dataclass(frozen=True)
class FileEntry:
    """A stored file as listed: its path, size in bytes (UTF-8) and the revision that wrote it."""

    path: str
    size: int
    revision: int


@dataclass(frozen=True)
class StoredFile:
    """A stored file with its content."""

    path: str
    content: str
    revision: int


@dataclass(frozen=True)
class FileVersion:
    """One recorded change of a file: its content after the change (None: deleted)."""

    path: str
    revision: int
    content: str | None
    created_at: datetime


def check_namespace(namespace: Any) -> str:
    """A namespace is any non-empty text without NUL, at most 1024 characters."""
    if (
        not isinstance(namespace, str)
        or not namespace
        or "\x00" in namespace
        or len(namespace) > 1024
    ):
        raise ConfigurationError(
            f"namespace ({str(namespace)[:60]!r}) must be non-empty text without NUL, at most 1024 characters"
        )
    try:
        namespace.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(f"namespace ({namespace!r}) is not valid Unicode text") from None
    if is_scoped(namespace) and not isinstance(namespace, ScopedKey):
        raise ConfigurationError(
            f"namespace ({namespace[:60]!r}) starts with {SCOPE_PREFIX!r}, reserved for users' "
            "namespaces: pass user= (and app=) to long_term_memory instead"
        )
    return namespace


def _check_retention(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(
            f"retention_seconds ({value!r}) must be a whole number of seconds, 1 or more, or None"
        )
    result: int | None = value
    return result


def size_of(content: str) -> int:
    return len(content.encode("utf-8"))


class MemoryFiles(ABC):
    """One namespace of memory files on some store. Commands take and return what the memory
    tool (``memory_20250818``) documents; refusals are :class:`MemoryToolError`."""

    #: The driver's exceptions that become :class:`~chat_memory.errors.StorageError` when they
    #: escape a primitive (as :attr:`Store.driver_errors
    #: <chat_memory.backends.base.Store.driver_errors>`); anything else propagates as itself.
    driver_errors: ClassVar[DriverErrors] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a driver exception (driver_errors) escaping a primitive becomes a StorageError, once, here
        for name in (
            "_listing",
            "_read",
            "_commit",
            "_versions",
            "_drop",
            "namespaces",
            "stored_bytes",
        ):
            method = cls.__dict__.get(name)
            if method is not None:
                setattr(cls, name, wrap_driver_errors(method))

    #: Whether this backend keeps a namespace's ``retention_seconds`` (and so may be given one).
    keeps_retention: ClassVar[bool] = False

    def __init__(
        self,
        namespace: str,
        *,
        limits: MemoryLimits | None = None,
        retry: Backoff | None = None,
        retention_seconds: int | None = None,
    ) -> None:
        self.namespace = check_namespace(namespace)
        self.limits = limits or MemoryLimits()
        self.retry = retry or Backoff(attempts=60, base=0.003, cap=0.3)
        #: the namespace is deleted by ``memory.sweep()`` once nothing was written to it for
        #: this long (docs/lifecycle.md); None keeps it forever
        self.retention_seconds = _check_retention(retention_seconds)
        if retention_seconds is not None and not self.keeps_retention:
            raise ConfigurationError(
                f"retention_seconds ({retention_seconds!r}): {type(self).__name__} does not keep "
                "a long-term retention yet (memory:// does)"
            )

    # -- what a backend implements -------------------------------------------------------------

    @abstractmethod
    def _listing(self) -> dict[str, FileEntry]:
        """Every file of the namespace by path."""

    @abstractmethod
    def _read(self, path: str) -> StoredFile | None:
        """One file, or None."""

    @abstractmethod
    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        """Atomically: if every path in ``expected`` is at that revision (None: absent), no
        new file of ``writes`` lies under a stored file or over one
        (:func:`~.paths.placement_holds`: the parents a command relies on are part of its
        swap) and the files after ``writes`` pass :func:`~.budget.live_limits_hold` against
        what is stored now, apply ``writes`` (None: delete) at the namespace's next revision, record
        a version of each, drop the oldest versions beyond ``limits.max_versions`` and
        ``limits.max_version_bytes`` (:func:`~.budget.versions_to_keep`), and return True;
        else change nothing and return False."""

    @abstractmethod
    def _versions(self, path: str) -> list[FileVersion]:
        """The kept versions of ``path``, oldest first."""

    @abstractmethod
    def _drop(self) -> None:
        """Delete the namespace: files and versions."""

    @abstractmethod
    def stored_bytes(self) -> tuple[int, int]:
        """(content bytes of the current files, of the kept versions), as the store counts
        them: at most ``limits.max_namespace_bytes`` and ``limits.max_version_bytes``."""

    # -- reads ---------------------------------------------------------------------------------

    def files(self) -> list[FileEntry]:
        """Every file, sorted by path."""
        return sorted(self._listing().values(), key=lambda e: e.path)

    def read(self, path: str) -> str:
        """A file's content (raises when it does not exist)."""
        path = check_path(path)
        found = self._read(path)
        if found is None:
            raise MemoryToolError(f"The path {path} does not exist. Please provide a valid path.")
        return found.content

    def view(self, path: str = ROOT, view_range: Any = None) -> str:
        """A directory listing (two levels deep, with sizes) or a file with line numbers.

        Texts repeat the path as it was given (``/memories/notes/``), as the reference does."""
        given, path = path, check_path(path)
        listing = self._listing()
        if path in listing:
            found = self._read(path)
            if found is not None:
                return file_view(given, found.content, view_range, self.limits.max_answer_chars)
            listing = self._listing()
        under = [e for e in listing.values() if is_within(e.path, path) and e.path != path]
        if not under and path != ROOT:
            raise MemoryToolError(f"The path {given} does not exist. Please provide a valid path.")
        return directory_view(path, under, self.limits.max_answer_chars, shown_path=given)

    def versions(self, path: str) -> list[FileVersion]:
        """Every kept version of a file (deletions included), oldest first."""
        return self._versions(check_path(path))

    # -- writes --------------------------------------------------------------------------------

    def create(self, path: str, file_text: str) -> str:
        """Create a new file (an existing one is not overwritten)."""
        given, path = path, check_path(path)
        file_text = check_text(file_text, "file_text")

        def attempt(
            listing: dict[str, FileEntry],
        ) -> tuple[dict[str, int | None], dict[str, str | None]]:
            # a file or a directory already there (the root included): the reference's O_EXCL answer
            if path == ROOT or any(is_within(p, path) for p in listing):
                raise MemoryToolError(f"File {given} already exists")
            self._check_placement(path, listing)
            return {path: None}, {path: file_text}

        self._transact(attempt, f"creating {path}")
        return f"File created successfully at: {given}"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of ``old_str`` in a file with ``new_str``."""
        given, path = path, check_path(path)
        old_str, new_str = check_text(old_str, "old_str"), check_text(new_str, "new_str")
        result: dict[str, str] = {}

        def edit(content: str) -> str:
            found = find_occurrences(content, old_str)
            if found.first == -1:
                raise MemoryToolError(
                    f"No replacement was performed, old_str `{echo(old_str)}` did not appear verbatim in {given}."
                )
            if not found.unique:
                raise MemoryToolError(
                    f"No replacement was performed. Multiple occurrences of old_str `{echo(old_str)}` in lines: "
                    f"{line_list(found)}. Please ensure it is unique"
                )
            changed = content.count("\n", 0, found.first)
            new_content = content[: found.first] + new_str + content[found.first + len(old_str) :]
            new_lines = new_content.split("\n")
            first = max(0, changed - 2)
            shown = [
                snippet_line(line) for line in new_lines[first : min(len(new_lines), changed + 3)]
            ]
            result["snippet"] = numbered(shown, first + 1)
            return new_content

        self._edit(path, given, edit)
        return (
            "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
            + result["snippet"]
        )

    def insert(self, path: str, insert_line: Any, insert_text: str) -> str:
        """Insert ``insert_text`` after line ``insert_line`` (0: at the top)."""
        given, path = path, check_path(path)
        insert_text = check_text(insert_text, "insert_text")
        if isinstance(insert_line, bool) or not isinstance(insert_line, int):
            raise MemoryToolError(
                f"Invalid `insert_line` parameter: {shown(insert_line)}. It should be an integer."
            )

        def edit(content: str) -> str:
            lines = content.split("\n")
            if lines[-1] == "":
                lines.pop()
            if insert_line < 0 or insert_line > len(lines):
                raise MemoryToolError(
                    f"Invalid `insert_line` parameter: {shown(insert_line)}. It should be within the range [0, {len(lines)}]."
                )
            lines.insert(insert_line, insert_text.rstrip("\n"))
            joined = "\n".join(lines)
            return joined if joined.endswith("\n") else joined + "\n"

        self._edit(path, given, edit)
        return f"The file {given} has been edited."

    def delete(self, path: str) -> str:
        """Delete a file, or a directory and everything under it."""
        given, path = path, check_path(path)
        if path == ROOT:
            raise MemoryToolError(f"Cannot delete the {ROOT} directory itself")

        def attempt(
            listing: dict[str, FileEntry],
        ) -> tuple[dict[str, int | None], dict[str, str | None]]:
            doomed = [e for e in listing.values() if is_within(e.path, path)]
            if not doomed:
                raise MemoryToolError(f"The path {given} does not exist")
            return {e.path: e.revision for e in doomed}, {e.path: None for e in doomed}

        self._transact(attempt, f"deleting {path}")
        return f"Successfully deleted {given}"

    def rename(self, old_path: str, new_path: str) -> str:
        """Rename or move a file or directory; the destination must not exist."""
        old_given, new_given = old_path, new_path
        old_path, new_path = (
            check_path(old_path, field="old_path"),
            check_path(new_path, field="new_path"),
        )
        if old_path == ROOT:
            raise MemoryToolError(f"Cannot rename the {ROOT} directory itself")

        def attempt(
            listing: dict[str, FileEntry],
        ) -> tuple[dict[str, int | None], dict[str, str | None]]:
            # the reference's order: the destination first (renaming onto itself finds it there)
            if new_path == ROOT or any(is_within(e.path, new_path) for e in listing.values()):
                raise MemoryToolError(f"The destination {new_given} already exists")
            moving = [e for e in listing.values() if is_within(e.path, old_path)]
            if not moving:
                raise MemoryToolError(f"The path {old_given} does not exist")
            if is_within(new_path, old_path):
                raise MemoryToolError(f"Cannot move {old_given} to {new_given}, inside itself.")
            expected: dict[str, int | None] = {}
            writes: dict[str, str | None] = {}
            remaining = {p: e for p, e in listing.items() if not is_within(p, old_path)}
            for entry in moving:
                stored = self._read(entry.path)
                if stored is None or stored.revision != entry.revision:
                    raise _Stale()
                target = new_path + entry.path[len(old_path) :]
                self._check_placement(target, remaining)
                expected[entry.path], expected[target] = entry.revision, None
                writes[entry.path], writes[target] = None, stored.content
            return expected, writes

        self._transact(attempt, f"renaming {old_path}")
        return f"Successfully renamed {old_given} to {new_given}"

    def restore(self, path: str, revision: int) -> str:
        """Make a kept version of a file its current content again (a new version)."""
        path = check_path(path)
        wanted = next((v for v in self._versions(path) if v.revision == revision), None)
        if wanted is None:
            raise MemoryToolError(f"No version {shown(revision)} of {path} is kept.")
        if wanted.content is None:
            raise MemoryToolError(
                f"Version {revision} of {path} is its deletion; restore an earlier version."
            )
        content = wanted.content

        def attempt(
            listing: dict[str, FileEntry],
        ) -> tuple[dict[str, int | None], dict[str, str | None]]:
            current = listing.get(path)
            if current is None:
                self._check_placement(path, listing)
            return {path: current.revision if current else None}, {path: content}

        self._transact(attempt, f"restoring {path}")
        return f"Restored {path} to version {revision}."

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Every namespace of this store that holds files (for the command line)."""

    def clear(self) -> None:
        """Delete every file and version of this namespace."""
        self._drop()

    # -- the read-modify-write loop -------------------------------------------------------------

    def _edit(self, path: str, given: str, edit: Callable[[str], str]) -> None:
        def attempt(
            listing: dict[str, FileEntry],
        ) -> tuple[dict[str, int | None], dict[str, str | None]]:
            if path not in listing:
                if path == ROOT or any(
                    is_within(p, path) for p in listing
                ):  # the root is always a directory
                    raise MemoryToolError(f"The path {given} is not a file.")
                raise MemoryToolError(
                    f"The path {given} does not exist. Please provide a valid path."
                )
            stored = self._read(path)
            if stored is None:
                raise _Stale()
            return {path: stored.revision}, {path: edit(stored.content)}

        self._transact(attempt, f"editing {path}")

    def _transact(
        self,
        attempt: Callable[
            [dict[str, FileEntry]], tuple[dict[str, int | None], dict[str, str | None]]
        ],
        what: str,
    ) -> None:
        for delay in self.retry.delays():
            listing = self._listing()
            try:
                expected, writes = attempt(listing)
            except _Stale:  # the file changed between the listing and the read: list again
                pass
            else:
                self._check_limits(listing, writes)
                if self._commit(expected, writes):
                    return
            time.sleep(delay)
        raise ConcurrencyError(
            f"{what} lost {self.retry.attempts} races with other writers of namespace {self.namespace!r}; "
            "read the file again and retry."
        )

    def _check_placement(self, path: str, listing: Mapping[str, Any]) -> None:
        """A file may not sit where a directory is, nor under another file."""
        if any(is_within(p, path) and p != path for p in listing):
            raise MemoryToolError(f"The path {path} is a directory.")
        parent = path.rsplit("/", 1)[0]
        while parent != ROOT:
            if parent in listing:
                raise MemoryToolError(f"The path {parent} is a file, not a directory.")
            parent = parent.rsplit("/", 1)[0]

    def _check_limits(
        self, listing: Mapping[str, FileEntry], writes: Mapping[str, str | None]
    ) -> None:
        limits = self.limits
        sizes = {p: e.size for p, e in listing.items()}
        for path, content in writes.items():
            if content is None:
                sizes.pop(path, None)
                continue
            size = size_of(content)
            if size > limits.max_file_bytes:
                raise MemoryLimitError(
                    f"File {path} would be {size} bytes; a memory file may hold at most {limits.max_file_bytes} bytes. "
                    "Keep notes short, or split them into several files."
                )
            sizes[path] = size
        if len(sizes) > limits.max_files and len(sizes) > len(listing):
            raise MemoryLimitError(
                f"The memory directory holds {len(listing)} files, the most allowed is {limits.max_files}. "
                "Delete or merge files first."
            )
        total = sum(sizes.values())
        if total > limits.max_namespace_bytes and total > sum(e.size for e in listing.values()):
            raise MemoryLimitError(
                f"The memory directory would hold {total} bytes; at most {limits.max_namespace_bytes} are allowed. "
                "Delete or shorten files first."
            )
        recorded = sum(size_of(content) for content in writes.values() if content is not None)
        if recorded > limits.version_bytes:
            # the only change that cannot fit even once every older version is dropped
            raise MemoryLimitError(
                f"This change would keep {recorded} bytes of file versions; at most {limits.version_bytes} are kept. "
                "Move or delete fewer files at once."
            )


class _Stale(Exception):
    """A file changed between listing and reading it: start the attempt again."""
