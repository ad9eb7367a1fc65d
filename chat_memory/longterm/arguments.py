"""The memory tool's arguments as the model sent them, checked before anything goes deep.

The arguments are model-controlled. ``json.loads`` recurses once per nesting level (a 2 KB
text of ``[`` raises ``RecursionError``) and refuses integers of more than 4,300 digits with
``ValueError``; formatting such an integer in an error text raises the same. So JSON text is
pre-scanned in linear time (strings skipped by one regular expression, then the nesting depth
and the longest run of digits measured) and a dict the host already parsed is walked
iteratively, no deeper than the limit. The memory tool's own arguments are flat (``view_range``
is the one list), so the bounds are far above any valid call.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: nesting levels of objects and arrays accepted in the arguments (valid calls use 2)
MAX_ARGUMENT_DEPTH = 8
#: digits of an integer accepted in the arguments (a 64-bit integer has at most 19)
MAX_INTEGER_DIGITS = 19
#: characters of JSON text accepted as arguments: two file-sized strings, each escaped
#: at worst six-fold (``\u0001``), and room for the rest
ARGUMENT_TEXT_FACTOR = 12
ARGUMENT_TEXT_SLACK = 65_536

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_DIGITS = re.compile(r"\d{%d,}" % (MAX_INTEGER_DIGITS + 1))
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class ArgumentError(ValueError):
    """Arguments the memory tool cannot take; the message is the answer for the model."""


def parse_tool_arguments(arguments: Any, max_text_chars: int) -> dict[str, Any]:
    """The arguments as a dict, or :class:`ArgumentError` with a short message naming the
    problem (never the arguments at length)."""
    if isinstance(arguments, (bytes, bytearray)):
        try:
            arguments = arguments.decode("utf-8")
        except UnicodeDecodeError:
            raise ArgumentError("Error: the arguments are not valid UTF-8 text.") from None
    if isinstance(arguments, str):
        arguments = _parse_text(arguments, max_text_chars)
    if not isinstance(arguments, dict):
        raise ArgumentError(
            f"Error: the arguments must be an object such as {{\"command\": \"view\", \"path\": \"/memories\"}}, "
            f"got {type(arguments).__name__}."
        )
    check_structure(arguments)
    return arguments


def _parse_text(text: str, max_text_chars: int) -> Any:
    if len(text) > max_text_chars:
        raise ArgumentError(f"Error: the arguments are {len(text)} characters long; at most {max_text_chars} are accepted.")
    skeleton = _STRING.sub('""', text)
    brackets = _NOT_BRACKET.sub("", skeleton)
    depth = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if depth > MAX_ARGUMENT_DEPTH:
        raise ArgumentError(
            f"Error: the arguments are nested {depth} levels deep; at most {MAX_ARGUMENT_DEPTH} are accepted."
        )
    digits = _DIGITS.search(skeleton)
    if digits is not None:
        raise ArgumentError(_too_many_digits(len(digits.group())))
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise ArgumentError(f"Error: the arguments are not valid JSON ({len(text)} characters).") from None


def check_structure(arguments: dict[str, Any]) -> None:
    """Refuse nesting past :data:`MAX_ARGUMENT_DEPTH` and integers past
    :data:`MAX_INTEGER_DIGITS` digits in already-parsed arguments; iterative and bounded, so
    cyclic or very deep structures cannot make it recurse or loop."""
    pending: list[tuple[Any, int]] = [(arguments, 1)]
    seen: set[int] = set()  # a container shared many times (or a cycle) is walked once
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list, tuple)):
            if id(value) in seen:
                continue
            seen.add(id(value))
        if isinstance(value, dict):
            children: Any = list(value.keys()) + list(value.values())
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 63:
                raise ArgumentError(_too_many_digits(None))
            continue
        if depth > MAX_ARGUMENT_DEPTH:
            raise ArgumentError(
                f"Error: the arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep; "
                f"at most {MAX_ARGUMENT_DEPTH} are accepted."
            )
        pending.extend((child, depth + 1) for child in children)


def _too_many_digits(digits: int | None) -> str:
    size = f"of {digits} digits" if digits is not None else "beyond 64 bits"
    return (
        f"Error: the arguments hold a number {size}; numbers of at most {MAX_INTEGER_DIGITS} digits "
        "(64-bit integers) are accepted."
    )
