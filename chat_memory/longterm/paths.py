"""Memory paths: every path the memory tool names is confined to ``/memories``.

A path is checked as text before any store sees it: stores never build a file-system
path, a key or a query pattern from anything but a path this module accepted. The
refusals (``..``, other roots, percent-encoded or look-alike traversal, NUL and control
characters, backslashes, symlink-like names, overlong names) are
:class:`MemoryPathError`, whose message is the text the tool returns to the model.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidInputError

ROOT = "/memories"
MAX_PATH_CHARS = 512
MAX_NAME_BYTES = 255
MAX_DEPTH = 12

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class MemoryToolError(InvalidInputError):
    """A memory command that cannot be carried out; the message is what the model is told
    (the error texts of Anthropic's memory tool)."""


class MemoryPathError(MemoryToolError):
    """A path outside ``/memories`` or otherwise unsafe."""


class MemoryLimitError(MemoryToolError):
    """A write that would pass a limit (file size, file count, namespace size)."""


def check_path(path: Any, *, field: str = "path") -> str:
    """The normalised path (``/memories`` or ``/memories/a/b``, no trailing slash) if safe,
    else :class:`MemoryPathError` naming the field and the value.

    Where the SDK's reference implementation refuses a path, the text is its own
    (``Path must start with /memories, got: /etc``, ``Path /memories/.. would escape /memories
    directory``); the path forms refused beyond it have texts of their own."""
    if not isinstance(path, str):
        raise MemoryPathError(
            f"Invalid `{field}` parameter: {path!r}. It must be a path starting with {ROOT}."
        )
    shown = path[:80] + ("…" if len(path) > 80 else "")
    if len(path) > MAX_PATH_CHARS:
        raise MemoryPathError(
            f"Path {shown!r} is {len(path)} characters long; at most {MAX_PATH_CHARS} are allowed."
        )
    # before any text repeats the path back: control and invisible characters are never echoed
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in path):
        raise MemoryPathError(
            f"Path {shown!r} contains NUL, control or invisible characters, which are not allowed."
        )
    if not path.startswith(ROOT):
        raise MemoryPathError(f"Path must start with {ROOT}, got: {path}")
    if path != ROOT and not path.startswith(ROOT + "/"):
        # the reference reads /memoriesX as /memories/X; a typo should not name another file
        raise MemoryPathError(f"Path must be {ROOT} or start with {ROOT}/, got: {path}")
    if _escapes(path):
        raise MemoryPathError(f"Path {path} would escape {ROOT} directory")
    if "\\" in path:
        raise MemoryPathError(f"Path {shown!r} contains a backslash; use / to separate names.")
    if _PERCENT_ESCAPE.search(path):
        raise MemoryPathError(
            f"Path {shown!r} contains a percent-encoded character; write the character itself."
        )
    names = [name for name in path[len(ROOT) :].split("/") if name != ""]
    if "//" in path[len(ROOT) :].rstrip("/"):
        raise MemoryPathError(f"Path {shown!r} contains an empty name (//).")
    if len(names) > MAX_DEPTH:
        raise MemoryPathError(
            f"Path {shown!r} is {len(names)} levels deep; at most {MAX_DEPTH} are allowed."
        )
    for name in names:
        _check_name(name, path, shown)
    return "/".join([ROOT, *names])


def _escapes(path: str) -> bool:
    """True when the path, resolved as the reference resolves it, lies outside ``/memories``."""
    resolved = posixpath.normpath(ROOT + "/" + path[len(ROOT) :].lstrip("/"))
    return not (resolved == ROOT or resolved.startswith(ROOT + "/"))


def _check_name(name: str, path: str, shown: str) -> None:
    folded = unicodedata.normalize("NFKC", name)
    if name in (".", ".."):
        raise MemoryPathError(
            f"Path {shown!r} contains a {name!r} name; name the file or directory without it."
        )
    if folded in (".", ".."):
        raise MemoryPathError(
            f"Path {shown!r} contains a look-alike of {folded!r} in {name!r}, which is not allowed."
        )
    if folded != name and any(c in folded for c in "./\\%"):
        # full-width dots, one-dot leaders and the like that some layer may fold into ".."
        raise MemoryPathError(
            f"Path {shown!r} contains a look-alike of '.', '/' or '\\' in {name!r}, which is not allowed."
        )
    if name.startswith("~") or ":" in name or "->" in name or name.lower().endswith(".lnk"):
        raise MemoryPathError(
            f"Path {shown!r} has a name ({name!r}) that looks like a link, a home directory or a drive; "
            "names may not start with '~' or contain ':' or '->', nor end in '.lnk'."
        )
    if name != name.strip() or name.endswith("."):
        raise MemoryPathError(
            f"Path {shown!r} has a name ({name!r}) with leading or trailing spaces or dots."
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise MemoryPathError(f"Path {shown!r} has a name longer than {MAX_NAME_BYTES} bytes.")


def check_text(value: Any, field: str) -> str:
    """A text argument (file content, old or new string) as given, if it is text a store can
    keep: no NUL, valid Unicode."""
    if not isinstance(value, str):
        raise MemoryToolError(
            f"Invalid `{field}` parameter: it must be a string, got {type(value).__name__}."
        )
    if "\x00" in value:
        raise MemoryToolError(f"Invalid `{field}` parameter: it contains a NUL character.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryToolError(
            f"Invalid `{field}` parameter: it is not valid Unicode text."
        ) from None
    return value


def is_within(path: str, directory: str) -> bool:
    """True when ``path`` is ``directory`` or lies under it (both checked paths)."""
    return path == directory or path.startswith(directory + "/")


def placement_holds(stored: Iterable[str], writes: Mapping[str, object | None]) -> bool:
    """True when, after ``writes`` (path -> new content, None: delete) are applied to the files
    ``stored``, no newly written file lies under another file and no file lies under a written one:
    no path is both a file and a directory. Stores check it inside their atomic step, so a
    command's compare-and-swap covers the parent paths it relies on (a file created at
    ``/memories/a`` and one at ``/memories/a/b.md`` by two racing writers cannot both land)."""
    before = set(stored)
    after = set(before)
    for path, content in writes.items():
        if content is None:
            after.discard(path)
        else:
            after.add(path)
    directories = {path[:at] for path in after for at in _slashes(path)}
    for path, content in writes.items():
        if content is None or path in before:  # a rewrite of a file changes no shape
            continue
        if path in directories or any(path[:at] in after for at in _slashes(path)):
            return False
    return True


def _slashes(path: str) -> list[int]:
    return [at for at, char in enumerate(path) if char == "/" and at > 0]
