"""Prompt caching: what a 300-turn agent conversation costs in input tokens, per memory.

    .venv-bench/bin/python bench/bench_cache.py            # or: scripts/bench cache
    .venv-bench/bin/python bench/bench_cache.py --turns 100

One deterministic transcript (bench/cache_model.py: seeded, 0–3 tool calls a turn made one
model step at a time, tool results of 200–3,000 tokens, 50 planted facts) is replayed
through every chat-memory strategy (several ``compact_to_ratio`` values, with and without
cache breakpoints) and through LangChain's ``trim_messages`` (last N tokens) and its
``SummarizationMiddleware`` (a fake chat model from langchain_core writes the summaries, so
it runs offline). Every request is rendered with ``chat_memory.to_anthropic`` (the peers'
messages are converted to events first, so they get the same cache breakpoints) and priced
by the prefix-cache model in bench/cache_model.py. Everyone is counted with chat-memory's
token counter. Prints a markdown table and writes it to bench/results/cache.md."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cache_model import (
    SYSTEM_PROMPT,
    Fact,
    PrefixCache,
    Tally,
    Turn,
    keep_facts,
    run_chat_memory,
    transcript,
    unreachable,
)
from chat_memory import Event, MemoryConfig, to_anthropic
from chat_memory.tokens import PER_EVENT_OVERHEAD, default_token_counter

RESULTS = Path(__file__).resolve().parent / "results"
BASELINE = "turn window 10 · ratio 1.0 · no cache"
#: The peers' and token_count's budget: about what ten turns of this transcript hold.
TOKEN_BUDGET = 30_000
ARCHIVE = 100_000  # recall is about compaction; the archive here keeps everything

Row = tuple[str, Tally, str]


def chat_memory_rows(turns: list[Turn], facts: list[Fact]) -> list[Row]:
    configs: list[tuple[str, dict[str, Any], bool]] = [
        (
            BASELINE,
            {"compaction_strategy": "turn_window", "max_turns": 10, "compact_to_ratio": 1.0},
            False,
        ),
    ]
    for ratio in (1.0, 0.75, 0.5, 0.25):
        configs.append(
            (
                f"turn window 10 · ratio {ratio}",
                {"compaction_strategy": "turn_window", "max_turns": 10, "compact_to_ratio": ratio},
                True,
            )
        )
    for ratio in (1.0, 0.5):
        configs.append(
            (
                f"sliding window 46 events · ratio {ratio}",
                {
                    "compaction_strategy": "sliding_window",
                    "max_events": 46,
                    "compact_to_ratio": ratio,
                },
                True,
            )
        )
        configs.append(
            (
                f"token count {TOKEN_BUDGET} · ratio {ratio}",
                {
                    "compaction_strategy": "token_count",
                    "max_tokens": TOKEN_BUDGET,
                    "compact_to_ratio": ratio,
                },
                True,
            )
        )
    for ratio in (1.0, 0.25):
        configs.append(
            (
                f"recursive summarization 46→23 · ratio {ratio}",
                {
                    "compaction_strategy": "recursive_summarization",
                    "max_events": 46,
                    "max_events_to_keep": 23,
                    "compact_to_ratio": ratio,
                },
                True,
            )
        )
    configs.append(("none (everything in view)", {"compaction_strategy": "none"}, True))
    rows = []
    for label, settings, cache in configs:
        sys.stderr.write(f"chat-memory: {label}\n")
        config = MemoryConfig(**settings, max_archived_events=ARCHIVE)
        tally, memory, cid = run_chat_memory(turns, config, cache=cache, summarizer=keep_facts)
        found = len(facts) - len(unreachable(memory, cid, facts))
        rows.append((f"chat-memory · {label}", tally, f"{found}/{len(facts)}"))
    return rows


# -- LangChain ---------------------------------------------------------------------------------


def _langchain_history(turn: Turn) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    def user() -> Any:
        return HumanMessage(turn.user.content or "", id=turn.user.id)

    def step(i: int) -> list[Any]:
        s = turn.steps[i]
        assert s.call is not None and s.result is not None
        call = {
            "name": s.call.tool_name,
            "args": s.call.arguments,
            "id": s.call.tool_call_id,
            "type": "tool_call",
        }
        return [
            AIMessage("", tool_calls=[call], id=s.call.id),
            ToolMessage(s.result.content or "", tool_call_id=s.result.tool_call_id, id=s.result.id),
        ]

    def answer() -> Any:
        return AIMessage(turn.answer.content or "", id=turn.answer.id)

    return user, step, answer


def _as_events(messages: list[Any]) -> list[Event]:
    events: list[Event] = []
    for m in messages:
        kind = m.type
        text = m.content if isinstance(m.content, str) else json.dumps(m.content)
        if kind == "human":
            events.append(Event.user(text))
        elif kind == "ai":
            if text:
                events.append(Event.assistant(text))
            for call in getattr(m, "tool_calls", []) or []:
                events.append(Event.tool_call(call["name"], call["args"], call_id=call["id"]))
        elif kind == "tool":
            events.append(Event.tool_result(m.tool_call_id, text))
        elif kind == "system":
            events.append(Event.system(text))
    return events


def _message_tokens() -> Callable[[Any], int]:
    counter = default_token_counter()
    memo: dict[tuple[Any, ...], int] = {}

    def tokens(message: Any) -> int:
        key = (message.id, message.type, len(str(message.content)))
        n = memo.get(key) if message.id else None
        if n is None:
            n = sum(counter(e.text()) + PER_EVENT_OVERHEAD for e in _as_events([message]))
            memo[key] = n
        return n

    return tokens


def _drive(
    turns: list[Turn], before_request: Callable[[list[Any]], list[Any]]
) -> tuple[Tally, list[Any]]:
    """Replay as an agent built on LangChain: the full history is kept and appended to;
    ``before_request`` turns it into what the model is sent (and may replace the history)."""
    history: list[Any] = []
    sent: list[Any] = []
    cache = PrefixCache()

    def render() -> Any:
        nonlocal sent
        sent = before_request(history)
        return to_anthropic(_as_events(sent), SYSTEM_PROMPT, cache=True)

    for turn in turns:
        user, step, answer = _langchain_history(turn)
        history.append(user())
        for i in range(len(turn.steps)):
            cache.send(*render())
            history.extend(step(i))
        cache.send(*render())
        history.append(answer())
    return cache.tally, sent


def langchain_rows(turns: list[Turn], facts: list[Fact]) -> list[Row]:
    try:
        from langchain_core.messages import BaseMessage, trim_messages
    except ImportError as exc:
        sys.stderr.write(f"langchain_core not installed ({exc}); skipping LangChain\n")
        return []
    tokens = _message_tokens()

    def counted(messages: list[BaseMessage]) -> int:
        return sum(tokens(m) for m in messages)

    def window_facts(sent: list[Any]) -> str:
        text = "\n".join(e.text() for e in _as_events(sent))
        return f"{sum(f.sentence in text for f in facts)}/{len(facts)} (window only)"

    rows: list[Row] = []
    sys.stderr.write("LangChain: trim_messages\n")

    def trimmed(history: list[Any]) -> list[Any]:
        return trim_messages(
            history,
            max_tokens=TOKEN_BUDGET,
            strategy="last",
            token_counter=counted,
            start_on="human",
        )

    tally, sent = _drive(turns, trimmed)
    rows.append(
        (f"LangChain trim_messages · last {TOKEN_BUDGET} tokens", tally, window_facts(sent))
    )
    try:
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_core.language_models.fake_chat_models import FakeListChatModel
        from langchain_core.messages import RemoveMessage
    except ImportError as exc:
        sys.stderr.write(f"langchain v1 not installed ({exc}); skipping SummarizationMiddleware\n")
        return rows
    sys.stderr.write("LangChain: SummarizationMiddleware\n")
    summary = (
        "The user is working through logistics questions; the agent looked up orders and metrics. "
        * 3
    )
    middleware = SummarizationMiddleware(
        FakeListChatModel(responses=[summary]),
        trigger=("tokens", TOKEN_BUDGET),
        keep=("messages", 20),
        token_counter=lambda messages: sum(tokens(m) for m in messages),
    )

    def summarized(history: list[Any]) -> list[Any]:
        update = middleware.before_model({"messages": history}, None)  # type: ignore[arg-type]
        if update:
            kept = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
            history[:] = kept  # the agent's state is replaced, as the graph's reducer does
        return history

    tally, sent = _drive(turns, summarized)
    rows.append(
        (
            f"LangChain SummarizationMiddleware · {TOKEN_BUDGET} tokens, keep 20",
            tally,
            window_facts(sent),
        )
    )
    return rows


def table(rows: list[Row]) -> str:
    base = next(t for label, t, _ in rows if label.endswith(BASELINE)).cost_uncached
    lines = [
        "| Memory | Requests | Input tokens | Tokens / request | Cache-hit share | Cost, no caching | Cost, cached | Cached cost vs. baseline | Facts found |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, t, facts in rows:
        lines.append(
            f"| {label} | {t.requests} | {t.input_tokens:,} | {t.input_tokens // max(t.requests, 1):,} | "
            f"{t.hit_share:.1%} | {t.cost_uncached / 1e6:.2f} M | {t.cost_cached / 1e6:.2f} M | {t.cost_cached / base:.1%} | {facts} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--facts", type=int, default=50)
    args = parser.parse_args()
    turns, facts = transcript(args.turns, args.facts)
    rows = chat_memory_rows(turns, facts) + langchain_rows(turns, facts)
    text = (
        f"{args.turns} turns, {sum(len(t.steps) for t in turns)} tool calls, {len(facts)} planted facts; "
        "costs in millions of base-input-token units at list-price multipliers "
        "(cache read 0.1×, cache write 1.25×, uncached 1×), one request every 10 s, 5-minute cache lifetime. "
        f"Baseline: {BASELINE} (cost with breakpoints = cost without).\n\n" + table(rows)
    )
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cache.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
