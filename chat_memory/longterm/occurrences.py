"""Finding ``old_str`` for ``str_replace`` in time linear in the file, and saying so briefly.

Anthropic's reference implementation (``BetaLocalFilesystemMemoryTool``) decides with
``content.count(old_str)`` (non-overlapping occurrences) whether the text is unique, and when
it is not, lists the line of every occurrence found by ``find(old_str, previous + 1)``
(overlapping ones included), re-counting the newlines before each: quadratic in the file, and
an answer as long as the file when ``old_str`` is frequent. Here the same decision and the
same first lines are found in one pass, at most :data:`MAX_LISTED_LINES` lines are listed, and
the rest are counted ("and N more")."""

from __future__ import annotations

from dataclasses import dataclass

#: line numbers listed when ``old_str`` occurs more than once; the rest are counted
MAX_LISTED_LINES = 10
#: characters of ``old_str`` (or another echoed argument) repeated back in an error text
MAX_ECHO_CHARS = 200


@dataclass(frozen=True)
class Occurrences:
    """Where ``old_str`` occurs: its first position (-1: nowhere), whether it is unique as
    ``str.count`` judges, and when it is not, the lines of the first occurrences and how many
    occurrences (overlapping ones included) there are in all."""

    first: int
    unique: bool
    lines: tuple[int, ...] = ()
    total: int = 0


def find_occurrences(content: str, old_str: str) -> Occurrences:
    """Locate ``old_str`` in ``content`` with work linear in both lengths."""
    if old_str == "":
        # the reference's reading: "" occurs once in an empty file (the replacement is new_str)
        # and at every position of any other, so it is "not unique" there
        if content == "":
            return Occurrences(0, True)
    first = content.find(old_str)
    if first == -1:
        return Occurrences(-1, False)
    if content.find(old_str, first + len(old_str)) == -1:
        return Occurrences(first, True)
    lines: list[int] = []
    line, scanned, at = 1, 0, first
    while at != -1 and len(lines) < MAX_LISTED_LINES:
        line += content.count("\n", scanned, at)  # newlines since the previous occurrence only
        scanned = at
        lines.append(line)
        at = content.find(old_str, at + 1)
    return Occurrences(first, False, tuple(lines), count_overlapping(content, old_str))


def count_overlapping(content: str, pattern: str) -> int:
    """Occurrences of ``pattern`` in ``content``, overlapping ones included, in O(n + m).

    Two occurrences can overlap only when the pattern has a border (a proper prefix that is
    also a suffix); without one, ``str.count`` (non-overlapping, in C) is already exact.
    With one, a Knuth-Morris-Pratt scan: repeated ``find(pattern, at + 1)`` would cost
    O(n * m) on periodic patterns like ``"aaaa"``."""
    if pattern == "":
        return len(content) + 1
    failure = _failure(pattern)
    if failure[-1] == 0:
        return content.count(pattern)
    count = matched = 0
    last = len(pattern)
    for char in content:
        while matched and pattern[matched] != char:
            matched = failure[matched - 1]
        if pattern[matched] == char:
            matched += 1
            if matched == last:
                count += 1
                matched = failure[matched - 1]
    return count


def _failure(pattern: str) -> list[int]:
    """KMP failure function: for each prefix, the length of its longest proper border."""
    failure = [0] * len(pattern)
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = failure[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        failure[i] = k
    return failure


def line_list(found: Occurrences) -> str:
    """``1, 4, 9`` or ``1, 1, 2, … and 99990 more``: the lines of a non-unique ``old_str``."""
    listed = ", ".join(map(str, found.lines))
    more = found.total - len(found.lines)
    return f"{listed} and {more} more" if more > 0 else listed


def echo(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` as repeated back in an error: whole when short, else its start and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters in all)"


def shown(value: object) -> str:
    """``repr(value)`` for an error text, bounded; never raises (an integer of more than 4,300
    digits or a list nested a thousand deep cannot be turned into text)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__} too large to show>"
    return echo(text)
