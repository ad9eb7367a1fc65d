"""The texts of the memory tool's ``view`` command (Anthropic's documented format)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .paths import MemoryToolError

if TYPE_CHECKING:
    from .files import FileEntry

MAX_LINES = 999_999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))


def format_size(size: int) -> str:
    """Sizes as the memory tool shows them: 0B, 512B, 1.5K, 2M."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    value = size / 1024**i
    return f"{int(value)}{units[i]}" if value == int(value) else f"{value:.1f}{units[i]}"


def numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines, start=start))


def file_view(path: str, content: str, view_range: Any) -> str:
    """A file as the memory tool shows it: a header, then numbered lines (``view_range``: first
    and last line, 1-based, last -1 for the end)."""
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
            raise MemoryToolError(f"Invalid `view_range` parameter: {view_range!r}. It should be a list of two integers.")
        first, last = view_range
        if first < 1 or first > max(len(lines), 1) or (last != -1 and last < first):
            raise MemoryToolError(
                f"Invalid `view_range` parameter: {list(view_range)}. Its first element should be within the range "
                f"[1, {len(lines)}] and its second -1 or at least the first."
            )
        start = first
        lines = lines[first - 1 :] if last == -1 else lines[first - 1 : last]
    return f"Here's the content of {path} with line numbers:\n" + numbered(lines, start)

def directory_view(path: str, under: list[FileEntry]) -> str:
    """A directory as the memory tool shows it: its files and directories two levels deep,
    each with its size (a directory's is the total of the files under it)."""
    rows: dict[str, int] = {}
    for entry in under:
        parts = entry.path[len(path) + 1 :].split("/")
        for depth in range(1, min(len(parts), 2) + 1):
            name = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            rows[name] = rows.get(name, 0) + entry.size
    total = sum(e.size for e in under)
    lines = [f"{format_size(total)}\t{path}"]
    lines += [f"{format_size(size)}\t{path}/{name}" for name, size in sorted(rows.items())]
    return (
        f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n" + "\n".join(lines)
    )
