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
    return "\n".join(f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines, start=start))


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
        if (
            not isinstance(view_range, (list, tuple))
            or len(view_range) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
        ):
            raise MemoryToolError(f"Invalid `view_range` parameter: {shown(view_range)}. It should be a list of two integers.")
        first, last = view_range
        if first < 1 or first > max(len(lines), 1) or (last != -1 and last < first):
            raise MemoryToolError(
                f"Invalid `view_range` parameter: {shown(list(view_range))}. Its first element should be within the range "
                f"[1, {len(lines)}] and its second -1 or at least the first."
            )
        start = first
        lines = lines[first - 1 :] if last == -1 else lines[first - 1 : last]
    header = f"Here's the content of {path} with line numbers:\n"
    room = max_chars - len(header) - _NOTE_ROOM
    out: list[str] = []
    used = 0
    for n, line in enumerate(lines, start=start):
        row = f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}"
        if used + len(row) + 1 > room:
            if not out:  # a single line longer than the bound: show its start
                out.append(row[:room])
                return header + out[0] + (
                    f"\n(Cut: line {n} is {len(line)} characters long; at most {max_chars} characters are shown in "
                    "one answer. Shorten or split that line to read all of it.)"
                )
            return header + "\n".join(out) + (
                f"\n(Cut: lines {start}-{n - 1} of {start + len(lines) - 1} shown; at most {max_chars} characters are "
                f"shown in one answer. View the rest with view_range [{n}, -1].)"
            )
        out.append(row)
        used += len(row) + 1
    return header + "\n".join(out)

def directory_view(path: str, under: list[FileEntry], max_chars: int = 120_000) -> str:
    """A directory as the memory tool shows it: its files and directories two levels deep,
    each with its size (a directory's is the total of the files under it), at most
    ``max_chars`` characters."""
    rows: dict[str, int] = {}
    for entry in under:
        parts = entry.path[len(path) + 1 :].split("/")
        for depth in range(1, min(len(parts), 2) + 1):
            name = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            rows[name] = rows.get(name, 0) + entry.size
    total = sum(e.size for e in under)
    lines = [f"{format_size(total)}\t{path}"]
    header = f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
    used = len(header) + len(lines[0]) + _NOTE_ROOM
    ordered = sorted(rows.items())
    for shown_rows, (name, size) in enumerate(ordered):
        row = f"{format_size(size)}\t{path}/{name}"
        if used + len(row) + 1 > max_chars:
            return header + "\n".join(lines) + (
                f"\n(Cut: {shown_rows} of {len(ordered)} entries shown; at most {max_chars} characters are shown in "
                "one answer. View a subdirectory to see the rest.)"
            )
        lines.append(row)
        used += len(row) + 1
    return header + "\n".join(lines)
