"""What a namespace may store, decided the same way by every backend inside its atomic step.

Two budgets bound a namespace (:class:`MemoryLimits`):

- the **live** files: at most ``max_files`` files and ``max_namespace_bytes`` bytes of
  content. Checked against the listing before a write (for the model's error text) and again
  inside the commit against what is stored then, so racing writers cannot pass it together:
  a commit that would pass it reports a lost race, and the retry re-reads and is refused;
- the **history** (kept versions): at most ``max_versions`` versions holding at most
  ``max_version_bytes`` bytes of content. Each commit drops the oldest versions until both
  hold; it never drops its own versions (a single change recording more than the byte budget
  is refused before anything is written) and never touches the current files.

Sizes are UTF-8 bytes of content (a deletion's version holds none), the same number on every
store; what a store adds around it (keys, JSON quoting, row headers) is its overhead,
documented in docs/long-term-memory.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import ConfigurationError
from .views import MIN_ANSWER_CHARS


@dataclass(frozen=True)
class MemoryLimits:
    """Bounds of one namespace. A write past one is refused with :class:`MemoryLimitError`.

    What a namespace stores is bounded by ``max_namespace_bytes`` (current files) plus
    ``max_version_bytes`` (kept versions, oldest dropped first; by default as much as the
    larger of ``max_namespace_bytes`` and ``max_file_bytes``), in UTF-8 bytes of content.
    ``max_answer_chars`` bounds every answer of the memory tool."""

    max_file_bytes: int = 100_000
    max_files: int = 200
    max_namespace_bytes: int = 2_000_000
    #: versions kept per namespace (the oldest are dropped first)
    max_versions: int = 1_000
    #: content bytes of the kept versions per namespace (None: max of the two limits above)
    max_version_bytes: int | None = None
    #: characters of one answer of the memory tool (a longer view is cut, saying how to see more)
    max_answer_chars: int = 120_000

    def __post_init__(self) -> None:
        version_bytes = self.max_version_bytes
        if version_bytes is None:
            version_bytes = max(self.max_namespace_bytes, self.max_file_bytes)
            object.__setattr__(self, "max_version_bytes", version_bytes)
        for name in (
            "max_file_bytes",
            "max_files",
            "max_namespace_bytes",
            "max_versions",
            "max_version_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"MemoryLimits {name} ({value!r}) must be a whole number, 1 or more"
                )
        if version_bytes < self.max_file_bytes:
            raise ConfigurationError(
                f"MemoryLimits max_version_bytes ({self.max_version_bytes}) must be at least max_file_bytes "
                f"({self.max_file_bytes}): every change of a file is kept as a version"
            )
        answer = self.max_answer_chars
        if isinstance(answer, bool) or not isinstance(answer, int) or answer < MIN_ANSWER_CHARS:
            raise ConfigurationError(
                f"MemoryLimits max_answer_chars ({answer!r}) must be a whole number, {MIN_ANSWER_CHARS} or more"
            )

    @property
    def version_bytes(self) -> int:
        """``max_version_bytes`` as a number (it is set once the limits are built)."""
        return int(self.max_version_bytes or 0)


def live_limits_hold(
    sizes: Mapping[str, int], writes: Mapping[str, int | None], max_files: int, max_bytes: int
) -> bool:
    """True when applying ``writes`` (path -> new size, None: delete) to the files of
    ``sizes`` stays within the live limits, or at least does not grow past them (a write
    that shrinks an over-full namespace is always allowed)."""
    after = dict(sizes)
    for path, size in writes.items():
        if size is None:
            after.pop(path, None)
        else:
            after[path] = size
    count, total = len(after), sum(after.values())
    return (count <= max_files or count <= len(sizes)) and (
        total <= max_bytes or total <= sum(sizes.values())
    )


def versions_to_keep(
    sizes_newest_first: Iterable[int], own: int, max_versions: int, max_bytes: int
) -> tuple[int, int]:
    """(how many of the newest versions to keep, their content bytes): the longest run of
    newest versions within ``max_versions`` and ``max_bytes``, but at least the ``own``
    newest (the versions the committing change itself records)."""
    kept = total = 0
    for size in sizes_newest_first:
        if kept >= own and (kept + 1 > max_versions or total + size > max_bytes):
            break
        kept += 1
        total += size
    return kept, total
