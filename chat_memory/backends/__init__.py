"""Storage backends and :func:`open_store`, which picks one by URL scheme.

Every store is a :class:`Store` subclass in its own module that declares its schemes, the
pip extra of its driver, its URL options, its canvas node, its native async twin and its
long-term memory (the last two as lazy ``"module:Class"`` strings); :mod:`.registry` finds
them, here and in installed packages (the ``chat_memory.stores`` entry-point group).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import ChatMemoryError, ConfigurationError
from .base import CompactionPlan, Snapshot, Store, check_conversation_id
from .declarations import ConnectionField, StoreNode, StoreOption
from .registry import schemes, store_class_for, store_classes
from .urls import password_span, redact_message, redact_url

ENV_URL = "CHAT_MEMORY_URL"
T = TypeVar("T")

#: The built-in store's node: it follows ``CHAT_MEMORY_URL``, else the embedded SQLite file.
BUILTIN_NODE = StoreNode(
    "chatMemory",
    "Chat Memory",
    "Chat memory in the built-in store (follows CHAT_MEMORY_URL; an embedded SQLite file by default).",
    "builtin",
    order=0,
)


def open_store(url: str | None = None, **options: Any) -> Store:
    """Open the store a URL names: ``memory://``, any SQLAlchemy URL (``sqlite:///chat.db``,
    ``postgresql+psycopg://…``, ``postgres://…``), ``redis://``/``rediss://``,
    ``redis+cluster://host:port``, or ``s3://bucket/prefix?endpoint_url=…&region=…``, or one
    of an installed plugin. Without a URL, the built-in store: ``CHAT_MEMORY_URL`` or the
    embedded SQLite file (see :func:`default_url`). Keyword options are the store's own."""
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"store URL ({url!r}) must be a string")
    url = url or default_url()
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ConfigurationError(
            f"store URL ({redact_url(url)!r}) has no scheme; use one of: {', '.join(f'{s}://' for s in schemes())}"
        )
    store_class = store_class_for(scheme)
    return opening(
        scheme, store_class.extra_for(scheme), lambda: store_class.from_url(url, **options), url
    )


def opening(scheme: str, extra: str | None, build: Callable[[], T], url: str | None = None) -> T:
    """``build()`` a store, turning what a driver raises into a
    :class:`ConfigurationError` that names the scheme (and the extra installing a missing
    driver) and never shows a password: not ``url``'s, nor a piece of it that a driver which
    cut the URL at an unencoded ``#`` or ``?`` shows in its complaint."""
    try:
        return build()
    except ChatMemoryError:
        raise
    except ModuleNotFoundError as exc:  # a driver imported when the store or its engine is built
        hint = f"pip install 'chat-memory[{extra}]'" if extra else f"install the {exc.name} package"
        raise ConfigurationError(
            f"the driver for {scheme}:// is missing ({exc.name}); {hint}"
        ) from exc
    except Exception as exc:  # whatever else a driver says about a URL it cannot use
        raise ConfigurationError(
            f"the {scheme}:// store cannot be opened from this URL: {type(exc).__name__}: "
            f"{redact_message(str(exc), [url])}{_encoding_hint(url)}"
        ) from None if url and password_span(url) else exc


def _encoding_hint(url: str | None) -> str:
    span = password_span(url) if url else None
    if url is None or span is None or not any(c in url[span[0] : span[1]] for c in "#?/@"):
        return ""
    return (
        " (a password holding # ? / or @ must be percent-encoded for this driver: %23 %3F %2F %40)"
    )


def default_path() -> Path:
    """Where the embedded SQLite store lives: ``$XDG_DATA_HOME/chat-memory/chat-memory.db``
    (``~/.local/share/chat-memory/chat-memory.db`` by default)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "chat-memory" / "chat-memory.db"


def default_url() -> str:
    """The built-in store's URL: ``CHAT_MEMORY_URL`` when set, else the embedded SQLite file.
    Creates nothing (the SQL store creates the file's folder when it is opened)."""
    url = os.environ.get(ENV_URL, "").strip()
    if url:
        return url
    return f"sqlite:///{default_path()}"


def is_default_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is the embedded default store's file (``default_path()``)."""
    return os.path.abspath(path) == os.path.abspath(default_path())


def prepare_sqlite_file(path: Path) -> None:
    """Create the folder of a SQLite file. The embedded default store's folder and file are
    created owner-only (0700, 0600) whatever the umask: they hold every conversation of the
    user, in a place nobody else needs to read. SQLite gives its ``-wal``, ``-shm`` and
    ``-journal`` files the mode of the database file, so they are 0600 too. A file the caller
    names keeps the caller's umask (a group may share it on purpose); an existing file or
    folder is left as it is."""
    if not is_default_sqlite_file(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    if not path.parent.is_dir():
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.parent.mkdir(mode=0o700)
            os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            pass  # another process made it first
    try:
        # an empty file is a valid SQLite database; O_EXCL: never touch an existing one
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


__all__ = [
    "BUILTIN_NODE",
    "ENV_URL",
    "CompactionPlan",
    "ConnectionField",
    "Snapshot",
    "Store",
    "StoreNode",
    "StoreOption",
    "check_conversation_id",
    "default_path",
    "default_url",
    "open_store",
    "prepare_sqlite_file",
    "redact_message",
    "redact_url",
    "schemes",
    "store_class_for",
    "store_classes",
]
