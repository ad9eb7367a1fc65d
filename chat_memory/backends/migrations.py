"""Versions of stored formats, and the migrations that bring older data up to date.

Each store records which version of its format its data is in (the SQL schema, the S3 head
object, the Redis key layout) and lists here how to upgrade each version N to N+1. Data
at an older version is upgraded in place; data at a newer version than this code knows is
refused with a :class:`SchemaError`, since reading or writing it could lose what the newer
version added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import SchemaError

T = TypeVar("T")


@dataclass(frozen=True)
class Migration(Generic[T]):
    """One step: upgrade data at ``from_version`` to ``from_version + 1``. What ``upgrade``
    receives (and returns) depends on the store: a connection, a document, a client."""

    from_version: int
    description: str
    upgrade: Callable[[T], Any]

    @property
    def to_version(self) -> int:
        return self.from_version + 1


@dataclass(frozen=True)
class StoredFormat(Generic[T]):
    """The version of a format this code writes, and the migrations from older versions."""

    #: what the version describes, for messages ("SQL schema", "S3 head object")
    name: str
    current: int
    migrations: Sequence[Migration[T]] = field(default_factory=tuple)
    #: how to make a newer version readable, for the message that refuses it
    remedy: str = "upgrade chat-memory"

    def parse(self, found: Any, where: str) -> int:
        """The version recorded at ``where`` as an int (an int, or a string of digits)."""
        if isinstance(found, bytes):
            found = found.decode("utf-8", "replace")
        if isinstance(found, str) and found.strip().isdigit():
            return int(found)
        if isinstance(found, int) and not isinstance(found, bool):
            return found
        raise SchemaError(
            f"{where} records {self.name} version {found!r}, which is not a version number; "
            f"this version of chat-memory writes version {self.current}"
        )

    def steps(self, found: int, where: str) -> list[Migration[T]]:
        """The migrations that take data at ``found`` to :attr:`current`, in order (none when
        it is current). Raises :class:`SchemaError` for a newer version, or an older one that
        no migration starts from."""
        if found > self.current:
            raise SchemaError(
                f"{where} records {self.name} version {found}, newer than version {self.current}, the newest "
                f"this version of chat-memory understands ({self.remedy})"
            )
        by_version = {m.from_version: m for m in self.migrations}
        steps = []
        for version in range(found, self.current):
            if version not in by_version:
                raise SchemaError(
                    f"{where} records {self.name} version {found}, and this version of chat-memory has no "
                    f"migration from version {version} to {version + 1}"
                )
            steps.append(by_version[version])
        return steps

    def upgrade(self, data: T, found: Any, where: str) -> T:
        """Run every pending migration on ``data`` (each returning the upgraded data) and return it."""
        for step in self.steps(self.parse(found, where), where):
            data = step.upgrade(data)
        return data
