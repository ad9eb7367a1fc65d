"""JSON from outside (a model's tool arguments, an adapter's items, a workflow file) read
within limits that are checked before anything recurses.

``json.loads`` and ``json.dumps`` recurse once per level of nesting, so 2 KB of ``[[[[…``
reaches Python's recursion limit and raises ``RecursionError``; an integer of more than 4,300
digits makes ``int()`` raise ``ValueError``. Object hooks cannot help (the parser recurses
before it calls them). Here the depth of a text is measured first by a linear scan that
skips string literals, integers are converted only when short enough (``parse_int``), and a
value that is already parsed (a dict handed over by an SDK) is walked with an explicit stack.
Whatever breaks a limit is refused with a :class:`JSONLimitError` that says what and by how
much, in words a model can act on.

Depth counts containers: ``1`` and ``"x"`` are depth 0, ``{}`` and ``[1]`` depth 1,
``{"a": [1]}`` depth 2."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from .errors import InvalidInputError

#: Nesting accepted in a tool's arguments (the model's input to a tool).
MAX_ARGUMENT_DEPTH = 32
#: Nesting accepted in what an adapter stores (a message's content parts, an item) and in a
#: workflow file: below what the event envelope itself can carry (pydantic refuses about 200).
MAX_DOCUMENT_DEPTH = 100
#: Digits accepted in one integer (Python's own ``int()`` limit is 4,300).
MAX_INT_DIGITS = 100
#: Characters of a model's text (a keyword, an id, a bad value) quoted back in an answer.
ECHO_CHARS = 40

_INT_BOUND = 10**MAX_INT_DIGITS
# A JSON string literal, escapes included; an unterminated one runs to the end of the text
# (the text is invalid then, and whatever it holds must not count as nesting).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONLimitError(InvalidInputError):
    """JSON that is nested too deeply or holds too large an integer (or is not JSON at all);
    the message names what, the size found and the limit."""


def text_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON text, string literals skipped. Linear
    in the length of the text and never recursive; for an invalid text it may count more than
    a parser would reach, never less."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(
    text: str | bytes | bytearray,
    what: str = "the arguments",
    max_depth: int = MAX_ARGUMENT_DEPTH,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """Parse JSON text within the limits; raises :class:`JSONLimitError` for text nested
    deeper than ``max_depth``, an integer longer than ``max_int_digits`` digits, or text
    that is not JSON (``what`` names the text in the message)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONLimitError(f"{what} {_be(what)} not UTF-8 text (byte {exc.start})") from None
    depth = text_depth(text)
    if depth > max_depth:
        raise JSONLimitError(too_deep(what, f"{depth:,}", max_depth))

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip("-")) > max_int_digits:
            raise JSONLimitError(
                f"{what} {_hold(what)} an integer of {len(digits.lstrip('-')):,} digits; at most {max_int_digits} are accepted"
            )
        return int(digits)

    try:
        return json.loads(text, parse_int=bounded_int)
    except json.JSONDecodeError as exc:
        raise JSONLimitError(
            f"{what} {_be(what)} not valid JSON: {exc.msg} (character {exc.pos:,})"
        ) from None


def check(
    value: Any,
    what: str = "the arguments",
    max_depth: int = MAX_ARGUMENT_DEPTH,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """Return ``value`` (an already parsed JSON-like value: dicts, lists, tuples, scalars)
    when it is nested at most ``max_depth`` deep and holds no integer of more than
    ``max_int_digits`` digits; raise :class:`JSONLimitError` otherwise. Walked with an
    explicit stack, so any depth (even a container that holds itself) is refused, not
    recursed into."""
    bound = _INT_BOUND if max_int_digits == MAX_INT_DIGITS else 10**max_int_digits
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if depth + 1 > max_depth:
                raise JSONLimitError(too_deep(what, f"more than {max_depth}", max_depth))
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, int) and not isinstance(item, bool) and not -bound < item < bound:
            raise JSONLimitError(
                f"{what} {_hold(what)} an integer of about {int_digits(item):,} digits; at most {max_int_digits} are accepted"
            )
    return value


def too_deep(what: str, depth: str, max_depth: int) -> str:
    """The refusal of a value nested ``depth`` levels deep."""
    return f"{what} {_be(what)} nested {depth} levels deep; at most {max_depth} are accepted"


def _be(what: str) -> str:
    return "are" if what.endswith("s") else "is"


def _hold(what: str) -> str:
    return "hold" if what.endswith("s") else "holds"


def int_digits(value: int) -> int:
    """The number of decimal digits of ``value`` (about, for one too long to print)."""
    if -_INT_BOUND < value < _INT_BOUND:
        return len(str(abs(value)))
    return int(abs(value).bit_length() * 0.30103) + 1


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` quoted for an answer: at most ``limit`` characters (an ellipsis marks a cut),
    as a JSON string literal (quotes, backslashes and line breaks escaped; a lone surrogate
    as ``\\udxxx``), so that a model's input never comes back at length."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    quoted = json.dumps(cut, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def describe(value: Any, limit: int = ECHO_CHARS) -> str:
    """A short description of any value for an answer: a string as :func:`echo` quotes it,
    a short scalar as JSON, anything else by its kind and size (never its contents, so a deep
    or huge value costs nothing to describe)."""
    if isinstance(value, str):
        return echo(value, limit)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return (
            str(value)
            if int_digits(value) <= limit
            else f"an integer of about {int_digits(value):,} digits"
        )
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Mapping):
        return f"an object of {len(value):,} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} item(s)"
    return f"a value of type {type(value).__name__}"
