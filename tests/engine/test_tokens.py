"""Offline token counting."""

from __future__ import annotations

import subprocess
import sys

from chat_memory import Event
from chat_memory.tokens import (
    PER_EVENT_OVERHEAD,
    count_event_tokens,
    default_token_counter,
    estimate_tokens,
)


def test_default_counter_is_cl100k_and_works_offline():
    # a fresh interpreter with every proxy pointed nowhere: loading must not touch the network
    code = "from chat_memory.tokens import default_token_counter as d; print(d()('hello world'))"
    env = {
        "PATH": "/usr/bin:/bin",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "TIKTOKEN_CACHE_DIR": "/nonexistent",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2" and "estimating" not in out.stderr
    assert default_token_counter()("Our new service is code-named Bluefin.") == 10


def test_a_failing_counter_falls_back_to_the_estimate(caplog):
    def broken(text: str) -> int:
        raise RuntimeError("tokenizer exploded")

    event = Event.user("x" * 40)
    assert count_event_tokens(event, broken) == estimate_tokens("x" * 40) + PER_EVENT_OVERHEAD == 14
    assert "tokenizer exploded" in caplog.text
    assert count_event_tokens(event, lambda t: -1) == 14


def test_tool_calls_count_their_name_and_arguments():
    call = Event.tool_call("get_order", {"id": 4512})
    assert count_event_tokens(call, len) == len('get_order {"id": 4512}') + PER_EVENT_OVERHEAD
