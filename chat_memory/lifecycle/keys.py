"""Scopes and the scoped key: how a conversation of (app, user) is named in a store so that no
bare id and no other scope's id can name it (docs/lifecycle.md, "Scope and the scoped key").

A scoped key is ``"~scope/" + esc(app or "") + "/" + esc(user) + "/" + conversation_id``,
``esc`` percent-encoding exactly ``%`` and ``/``: injective, and the scope is a prefix of
every key in it. A scoped key travels as a :class:`ScopedKey` (a ``str`` subclass) from the
scoped view to the store; a plain string starting with the reserved prefix (an id that came
from data) is refused by :func:`~chat_memory.backends.base.check_conversation_id`, so the
unbound memory cannot name a scoped conversation by accident or by guessing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError

#: The reserved prefix of scoped keys (and scoped long-term namespaces).
SCOPE_PREFIX = "~scope/"
#: The longest user or app name.
MAX_SCOPE_PART_LENGTH = 256


class ScopedKey(str):
    """A store key made by :func:`scoped_key` (or re-marked by :func:`stored_key`): the only
    kind of string with the reserved prefix the stores accept as a conversation id."""

    __slots__ = ()


@dataclass(frozen=True)
class Scope:
    """Whose conversations: ``user`` (non-empty) within ``app`` (None: no app)."""

    user: str
    app: str | None = None

    def __post_init__(self) -> None:
        _check_part("user", self.user)
        if self.app is not None:
            _check_part("app", self.app)

    @property
    def prefix(self) -> str:
        """The prefix every key of this scope starts with."""
        return f"{SCOPE_PREFIX}{_escape(self.app or '')}/{_escape(self.user)}/"


def _check_part(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{field} ({value!r}) must be a non-empty string")
    if len(value) > MAX_SCOPE_PART_LENGTH:
        raise InvalidInputError(
            f"{field} ({value[:40]!r}…) is {len(value)} characters; "
            f"at most {MAX_SCOPE_PART_LENGTH} are allowed"
        )
    if "\x00" in value:
        raise InvalidInputError(f"{field} ({value!r}) must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{field} ({value!r}) is not valid Unicode text") from None
    return value


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


def scope_prefix(scope: Scope | None) -> str:
    """The scope's key prefix; ``""`` for the unscoped conversations (bare ids)."""
    return "" if scope is None else scope.prefix


def is_scoped(key: str) -> bool:
    """Whether ``key`` is in the reserved (scoped) part of the key space."""
    return key.startswith(SCOPE_PREFIX)


def scoped_key(scope: Scope, conversation_id: str) -> ScopedKey:
    """The store key of ``conversation_id`` in ``scope``."""
    return ScopedKey(scope.prefix + conversation_id)


def parse_scoped_key(key: str) -> tuple[Scope | None, str]:
    """``(scope, conversation_id)`` of a store key: ``(None, key)`` for a bare id. A key with
    the reserved prefix that is not a well-formed scoped key raises :class:`InvalidInputError`."""
    if not is_scoped(key):
        return None, key
    parts = key[len(SCOPE_PREFIX) :].split("/", 2)
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise InvalidInputError(
            f"conversation key ({key[:80]!r}) starts with the reserved prefix {SCOPE_PREFIX!r} "
            "but is not a scoped key (app/user/conversation id)"
        )
    app, user, conversation_id = parts
    return Scope(_unescape(user), _unescape(app) or None), conversation_id


def scope_of_key(key: str) -> str:
    """The scope prefix of a store key (``""`` for a bare id): what a store indexes it under."""
    if not is_scoped(key):
        return ""
    scope, _ = parse_scoped_key(key)
    return scope_prefix(scope)


def stored_key(key: str) -> str:
    """A key read back from a store (a listing, an export), marked as a :class:`ScopedKey` when
    it is a well-formed scoped one, so that it may be passed to a store again; a bare id as is."""
    if is_scoped(key) and not isinstance(key, ScopedKey):
        parse_scoped_key(key)
        return ScopedKey(key)
    return key


def guard_name(key_or_scope: str) -> str:
    """How an erasure guard (a tombstone) names the key or scope prefix it guards: a digest,
    so that no user id outlives its erasure in storage."""
    return hashlib.sha256(key_or_scope.encode("utf-8")).hexdigest()


def scoped_namespace(scope: Scope, namespace: str) -> ScopedKey:
    """The long-term namespace ``namespace`` of ``scope`` (same encoding as a scoped key)."""
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInputError(f"namespace ({namespace!r}) must be a non-empty string")
    return ScopedKey(scope.prefix + namespace)


__all__ = [
    "MAX_SCOPE_PART_LENGTH",
    "SCOPE_PREFIX",
    "Scope",
    "ScopedKey",
    "guard_name",
    "is_scoped",
    "parse_scoped_key",
    "scope_of_key",
    "scope_prefix",
    "scoped_key",
    "scoped_namespace",
    "stored_key",
]
