"""What the command line writes to a terminal: stored text made harmless.

Conversations hold what users, models and tools wrote, and any of them may have written
terminal control sequences: ``ESC [2J`` clears the screen, ``ESC ]0;…BEL`` sets the window
title, ``ESC ]8;;…`` makes a hyperlink, and a right-to-left override turns ``txt.exe``
into what looks like ``exe.txt``. Every command prints through :func:`say`, which shows
such characters as visible escapes (``\\x1b``, ``\\u202e``) instead of sending them to the
operator's terminal; ``--json`` output gets JSON escapes (:func:`json_text`), so it stays
valid JSON that parses back to the stored text.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

#: C0 controls (tab and newline excepted: layout needs them), DEL, C1 controls, and the bidi
#: embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# the same set minus C0, which json.dumps escapes itself
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """``text`` with every control character but newline and tab, DEL, the C1 controls and
    the bidi overrides written as a visible escape (``\\x1b``, ``\\r``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


def json_text(text: str) -> str:
    """JSON text (as ``json.dumps`` writes it, non-ASCII kept) with DEL, the C1 controls and
    the bidi overrides written as ``\\u202e``-style escapes: still valid JSON, the same values once
    parsed. (These characters can only occur inside JSON strings, so the replacement never
    touches the syntax.)"""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def say(
    *values: Any, sep: str = " ", end: str = "\n", file: TextIO | None = None, flush: bool = False
) -> None:
    """``print`` for the command line: the same arguments, the text made terminal-safe."""
    text = sep.join(str(value) for value in values)
    print(terminal_text(text), end=terminal_text(end), file=file or sys.stdout, flush=flush)


__all__ = ["json_text", "say", "terminal_text"]
