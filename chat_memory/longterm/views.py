"""The texts of the memory tool's ``view`` command (Anthropic's documented format), bounded:
a view longer than ``max_chars`` is cut at a line and ends with a note saying how to see the
rest (the reference implementation shows everything; a 100 KB file of empty lines would be
an 800 KB answer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .occurrences import shown
from .paths import MemoryToolError

if TYPE_CHECKING:
    from .files import FileEntry

MAX_LINES = 999_999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
#: the smallest answer bound allowed: room for a header, a few lines and the note
MIN_ANSWER_CHARS = 2_000
#: characters of one line shown in a ``str_replace`` snippet
MAX_SNIPPET_LINE_CHARS = 2_000
#: characters kept free under the bound for the note that ends a cut view (and the tool's reference note)
_NOTE_ROOM = 500


def format_size(size: int) -> str:
    """Sizes as the memory tool shows them: 0B, 512B, 1.5K, 2M."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    value = size / 1024**i
    return f"{int(value)}{units[i]}" if value == int(value) else f"{value:.1f}{units[i]}"


def numbered(lines: list[str], start: int) -> str:
    """Lines as the memory tool numbers them: the number right-aligned in six places, a tab."""
    return "\n".join(
        f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines, start=start)
    )


def snippet_line(line: str) -> str:
    """One line of a ``str_replace`` snippet, cut past :data:`MAX_SNIPPET_LINE_CHARS`."""
    if len(line) <= MAX_SNIPPET_LINE_CHARS:
        return line
    return f"{line[:MAX_SNIPPET_LINE_CHARS]}… (line cut: {len(line)} characters; view the file to see it)"


def file_view(path: str, content: str, view_range: Any, max_chars: int = 120_000) -> str:
    """A file as the memory tool shows it: a header, then numbered lines (``view_range``: first
    and last line, 1-based, last -1 for the end), at most ``max_chars`` characters."""
    lines = content.split("\n")
    if len(lines) > MAX_LINES:
        raise MemoryToolError(f"File {path} exceeds maximum line limit of 999,999 lines.")
    start = 1
    if view_range is not None:
        if not isinstance(view_range, (list, tuple)):
            raise MemoryToolError(
                f"Invalid `view_range` parameter: {shown(view_range)}. It should be a list of two integers."
            )
        # as the reference reads it: a pair [first, last], first below 1 read as 1, last -1 for
        # the end and otherwise a Python slice end; any other length shows the whole file
        if len(view_range) == 2:
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range):
                raise MemoryToolError(
                    f"Invalid `view_range` parameter: {shown(list(view_range))}. It should be a list of two integers."
                )
            first, last = view_range
            start = max(1, first)
            lines = lines[start - 1 : len(lines) if last == -1 else last]
    header = f"Here's the content of {path} with line numbers:\n"
    room = max_chars - len(header) - _NOTE_ROOM
    out: list[str] = []
    used = 0
    for n, line in enumerate(lines, start=start):
        row = f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}"
        if used + len(row) + 1 > room:
            if not out:  # a single line longer than the bound: show its start
                out.append(row[:room])
                return (
                    header
                    + out[0]
                    + (
                        f"\n(Cut: line {n} is {len(line)} characters long; at most {max_chars} characters are shown in "
                        "one answer. Shorten or split that line to read all of it.)"
                    )
                )
            return (
                header
                + "\n".join(out)
                + (
                    f"\n(Cut: lines {start}-{n - 1} of {start + len(lines) - 1} shown; at most {max_chars} characters are "
                    f"shown in one answer. View the rest with view_range [{n}, -1].)"
                )
            )
        out.append(row)
        used += len(row) + 1
    return header + "\n".join(out)


def directory_view(
    path: str, under: list[FileEntry], max_chars: int = 120_000, shown_path: str | None = None
) -> str:
    """A directory as the memory tool shows it: its files and directories two levels deep,
    hidden ones (a name starting with ``.``) left out, each directory followed by what it
    holds, names in order; each row with its size (a directory's is the total of the files
    under it), at most ``max_chars`` characters. ``shown_path`` is the path as the model wrote
    it (``/memories/notes/``), repeated in the rows as the reference repeats it."""
    shown_path = path if shown_path is None else shown_path
    rows: dict[tuple[str, ...], int] = {}
    for entry in under:
        parts = entry.path[len(path) + 1 :].split("/")
        for depth in range(1, min(len(parts), 2) + 1):
            if parts[depth - 1].startswith("."):
                break
            key = tuple(parts[:depth])
            rows[key] = rows.get(key, 0) + entry.size
    directories: set[tuple[str, ...]] = set()  # rows with something under them end in "/"
    for entry in under:
        parts = entry.path[len(path) + 1 :].split("/")
        directories.update(tuple(parts[:depth]) for depth in range(1, min(len(parts) - 1, 2) + 1))
    total = sum(e.size for e in under)
    lines = [f"{format_size(total)}\t{shown_path}"]
    header = f"Here're the files and directories up to 2 levels deep in {shown_path}, excluding hidden items:\n"
    used = len(header) + len(lines[0]) + _NOTE_ROOM
    # a directory's rows right after it, siblings by name: the reference's walk, name by name
    ordered = sorted(rows.items())
    for shown_rows, (key, size) in enumerate(ordered):
        name = "/".join(key) + ("/" if key in directories else "")
        row = f"{format_size(size)}\t{shown_path}/{name}"
        if used + len(row) + 1 > max_chars:
            return (
                header
                + "\n".join(lines)
                + (
                    f"\n(Cut: {shown_rows} of {len(ordered)} entries shown; at most {max_chars} characters are shown in "
                    "one answer. View a subdirectory to see the rest.)"
                )
            )
        lines.append(row)
        used += len(row) + 1
    return header + "\n".join(lines)
