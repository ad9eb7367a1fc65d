"""The memory tool's arguments as the model sent them, checked before anything goes deep.

The arguments are model-controlled: :mod:`chat_memory.safe_json` measures the nesting and
the integers before parsing (``json.loads`` recurses once per level, and ``int()`` refuses
more than 4,300 digits). The memory tool's own arguments are flat (``view_range`` is the one
list), so its bounds are far tighter than a general tool's, and still far above any valid
call; its answers are in the SDK's style ("Error: ….").
"""

from __future__ import annotations

from typing import Any

from ..safe_json import JSONLimitError, check, loads

#: nesting levels of objects and arrays accepted in the arguments (valid calls use 2)
MAX_ARGUMENT_DEPTH = 8
#: digits of an integer accepted in the arguments (a 64-bit integer has at most 19)
MAX_INTEGER_DIGITS = 19
#: characters of JSON text accepted as arguments: two file-sized strings, each escaped
#: at worst six-fold (``\u0001``), and room for the rest
ARGUMENT_TEXT_FACTOR = 12
ARGUMENT_TEXT_SLACK = 65_536


class ArgumentError(ValueError):
    """Arguments the memory tool cannot take; the message is the answer for the model."""


def parse_tool_arguments(arguments: Any, max_text_chars: int) -> dict[str, Any]:
    """The arguments as a dict, or :class:`ArgumentError` with a short message naming the
    problem (never the arguments at length)."""
    if isinstance(arguments, (str, bytes, bytearray)):
        if len(arguments) > max_text_chars:
            raise ArgumentError(
                f"Error: the arguments are {len(arguments)} characters long; at most {max_text_chars} are accepted."
            )
        try:
            arguments = loads(
                arguments, max_depth=MAX_ARGUMENT_DEPTH, max_int_digits=MAX_INTEGER_DIGITS
            )
        except JSONLimitError as exc:
            raise ArgumentError(f"Error: {exc}.") from None
    if not isinstance(arguments, dict):
        raise ArgumentError(
            f'Error: the arguments must be an object such as {{"command": "view", "path": "/memories"}}, '
            f"got {type(arguments).__name__}."
        )
    try:
        check(arguments, max_depth=MAX_ARGUMENT_DEPTH, max_int_digits=MAX_INTEGER_DIGITS)
    except JSONLimitError as exc:
        raise ArgumentError(f"Error: {exc}.") from None
    return arguments
