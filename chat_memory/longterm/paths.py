"""Memory paths: every path the memory tool names is confined to ``/memories``.

A path is checked as text before any store sees it: stores never build a file-system
path, a key or a query pattern from anything but a path this module accepted. The
refusals (``..``, other roots, percent-encoded or look-alike traversal, NUL and control
characters, backslashes, symlink-like names, overlong names) are
:class:`MemoryPathError`, whose message is the text the tool returns to the model.
"""

from __future__ import annotations

import re
import unicodedata
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
    else :class:`MemoryPathError` naming the field and the value."""
    if not isinstance(path, str) or not path:
        raise MemoryPathError(f"Invalid `{field}` parameter: {path!r}. It must be a path starting with {ROOT}.")
    shown = path[:80] + ("…" if len(path) > 80 else "")
    if len(path) > MAX_PATH_CHARS:
        raise MemoryPathError(f"Path {shown!r} is {len(path)} characters long; at most {MAX_PATH_CHARS} are allowed.")
    if not (path == ROOT or path.startswith(ROOT + "/")):
        raise MemoryPathError(f"Path must start with {ROOT}, got: {path!r}")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in path):
        raise MemoryPathError(f"Path {shown!r} contains NUL, control or invisible characters, which are not allowed.")
    if "\\" in path:
        raise MemoryPathError(f"Path {shown!r} contains a backslash; use / to separate names.")
    if _PERCENT_ESCAPE.search(path):
        raise MemoryPathError(f"Path {shown!r} contains a percent-encoded character; write the character itself.")
    names = [name for name in path[len(ROOT) :].split("/") if name != ""]
    if "//" in path[len(ROOT) :].rstrip("/"):
        raise MemoryPathError(f"Path {shown!r} contains an empty name (//).")
    if len(names) > MAX_DEPTH:
        raise MemoryPathError(f"Path {shown!r} is {len(names)} levels deep; at most {MAX_DEPTH} are allowed.")
    for name in names:
        _check_name(name, path, shown)
    return "/".join([ROOT, *names])


def _check_name(name: str, path: str, shown: str) -> None:
    folded = unicodedata.normalize("NFKC", name)
    if folded in (".", "..") or name in (".", ".."):
        raise MemoryPathError(f"Path {path!r} would escape {ROOT} directory")
    if folded != name and any(c in folded for c in "./\\%"):
        # full-width dots, one-dot leaders and the like that some layer may fold into ".."
        raise MemoryPathError(f"Path {shown!r} contains a look-alike of '.', '/' or '\\' in {name!r}, which is not allowed.")
    if name.startswith("~") or ":" in name or "->" in name or name.lower().endswith(".lnk"):
        raise MemoryPathError(
            f"Path {shown!r} has a name ({name!r}) that looks like a link, a home directory or a drive; "
            "names may not start with '~' or contain ':' or '->', nor end in '.lnk'."
        )
    if name != name.strip() or name.endswith("."):
        raise MemoryPathError(f"Path {shown!r} has a name ({name!r}) with leading or trailing spaces or dots.")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise MemoryPathError(f"Path {shown!r} has a name longer than {MAX_NAME_BYTES} bytes.")


def check_text(value: Any, field: str) -> str:
    """A text argument (file content, old or new string) as given, if it is text a store can
    keep: no NUL, valid Unicode."""
    if not isinstance(value, str):
        raise MemoryToolError(f"Invalid `{field}` parameter: it must be a string, got {type(value).__name__}.")
    if "\x00" in value:
        raise MemoryToolError(f"Invalid `{field}` parameter: it contains a NUL character.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryToolError(f"Invalid `{field}` parameter: it is not valid Unicode text.") from None
    return value


def is_within(path: str, directory: str) -> bool:
    """True when ``path`` is ``directory`` or lies under it (both checked paths)."""
    return path == directory or path.startswith(directory + "/")
