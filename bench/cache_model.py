"""The prompt-caching workload, shared by bench/bench_cache.py and tests/engine/test_prompt_cache.py:
a deterministic agent transcript, its replay through chat-memory (one request per model
step, rendered with ``to_anthropic``), and a model of Anthropic's prefix cache that prices
each request.

The cache model (Anthropic's prompt caching rules, at list-price multipliers of the base
input price): a request's cached part is the longest prefix ending at one of its
``cache_control`` breakpoints that is byte-identical to a prefix ending at a breakpoint of
an earlier request, written or read within the cache lifetime (5 minutes, refreshed on each
read). Those tokens cost 0.1×; the rest up to the last breakpoint is written to the cache at
1.25×; anything after the last breakpoint costs 1×. Without breakpoints every token costs
1×. ``cache_control`` markers are not part of what is compared. Requests are spaced
``SECONDS_PER_REQUEST`` apart. (The API also looks back up to 20 blocks before a breakpoint;
the renderer marks the previous request's tail exactly, so that changes nothing here.)"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.tokens import PER_EVENT_OVERHEAD, default_token_counter

CACHE_LIFETIME_S = 300
SECONDS_PER_REQUEST = 10
READ_PRICE, WRITE_PRICE, BASE_PRICE = 0.1, 1.25, 1.0
SYSTEM_PROMPT = (
    "You are an operations agent for a logistics company. Use the tools to look things up; "
    "answer briefly and cite what the tools returned. " * 4
).strip()

_WORDS = (
    "order shipment carrier invoice pallet route depot customer status delayed delivered "
    "warehouse manifest customs tracking label weight volume priority express freight driver "
    "region north south east west backlog refund ticket escalation review audit batch queue "
    "service latency error retry timeout region cluster node deploy rollback metric alert"
).split()
_TOOLS = ("search_orders", "read_manifest", "query_metrics", "fetch_ticket")
_PLACES = (
    "the staging cluster",
    "the billing database",
    "the nightly backup job",
    "the on-call pager",
    "the EU gateway",
)


@dataclass(frozen=True)
class Fact:
    key_term: str
    sentence: str
    turn: int


@dataclass(frozen=True)
class Step:
    """One model step: the tool call it made (None for the final answer) and its result."""

    call: Event | None = None
    result: Event | None = None


@dataclass(frozen=True)
class Turn:
    user: Event
    steps: tuple[Step, ...]
    answer: Event


def planted_facts(turns: int, facts: int) -> list[Fact]:
    """``facts`` facts under distinct key terms, spread evenly over ``turns``."""
    out = []
    spacing = max(1, turns // facts)
    for n in range(facts):
        key = f"codename-{chr(65 + n % 26)}{chr(81 + n % 7)}-{100 + 7 * n:03d}"
        out.append(
            Fact(
                key,
                f"{key} is {_PLACES[n % len(_PLACES)]} (fact {n})",
                turn=min(turns - 1, 2 + n * spacing),
            )
        )
    return out


def _filler(rng: random.Random, tokens: int) -> str:
    # one common word with its leading space is one cl100k token, so words ≈ tokens
    return " ".join(rng.choice(_WORDS) for _ in range(tokens))


def transcript(turns: int = 300, facts: int = 50, seed: int = 11) -> tuple[list[Turn], list[Fact]]:
    """The agent transcript: each turn a user message, 0–3 tool calls made one model step at
    a time (results of 200–3,000 tokens), and an answer. A fact is said by the user, returned
    inside a tool result, or stated by the assistant, in turn. Same seed, same transcript."""
    rng = random.Random(seed)
    planted = planted_facts(turns, facts)
    by_turn = {f.turn: (i, f) for i, f in enumerate(planted)}
    out = []
    for t in range(turns):
        calls = rng.randint(0, 3)
        where, fact = by_turn.get(t, (None, None))
        kind = None if where is None else where % 3
        if kind == 1 and calls == 0:
            calls = 1
        user = f"Turn {t}: {_filler(rng, rng.randint(10, 40))}?"
        if kind == 0:
            user = f"Please remember: {fact.sentence}. {user}"
        steps = []
        for j in range(calls):
            name = rng.choice(_TOOLS)
            call = Event.tool_call(
                name, {"query": _filler(rng, 4), "turn": t}, call_id=f"call_{t}_{j}", id=f"e{t}c{j}"
            )
            body = _filler(rng, rng.randint(200, 3000))
            if kind == 1 and j == 0:
                cut = len(body) // 2
                body = f"{body[:cut]} NOTE: {fact.sentence}. {body[cut:]}"
            steps.append(Step(call, Event.tool_result(call.tool_call_id, body, id=f"e{t}r{j}")))
        answer = f"Here is what I found for turn {t}: {_filler(rng, rng.randint(30, 120))}."
        if kind == 2:
            answer = f"Yes: {fact.sentence}. {answer}"
        out.append(
            Turn(Event.user(user, id=f"e{t}u"), tuple(steps), Event.assistant(answer, id=f"e{t}a"))
        )
    return out, planted


# -- the cache model --------------------------------------------------------------------------


@dataclass
class Tally:
    """What a subject's requests cost, in tokens and list-price units of the base input price."""

    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    cost_cached: float = 0.0
    per_request: list[tuple[int, int]] = field(
        default_factory=list
    )  # (input tokens, cached tokens)

    @property
    def hit_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def cost_uncached(self) -> float:
        return float(self.input_tokens)


class PrefixCache:
    """Prices requests as Anthropic's prefix cache would (see the module docstring)."""

    def __init__(self, counter: Callable[[str], int] | None = None) -> None:
        self.counter = counter or default_token_counter()
        self.entries: dict[bytes, float] = {}  # prefix hash -> expiry time
        self.clock = 0.0
        self.tally = Tally()
        self._tokens: dict[str, int] = {}

    def _count(self, text: str) -> int:
        n = self._tokens.get(text)
        if n is None:
            n = self._tokens[text] = self.counter(text) + PER_EVENT_OVERHEAD
        return n

    def blocks(self, system: Any, messages: Sequence[dict[str, Any]]) -> Iterator[tuple[str, bool]]:
        """Each block as (what it is, for comparing prefixes; whether it has a breakpoint)."""
        if isinstance(system, str):
            if system:
                yield "system\x00" + system, False
        else:
            for block in system:
                yield "system\x00" + block["text"], "cache_control" in block
        for message in messages:
            first = True
            for block in message["content"]:
                plain = {k: v for k, v in block.items() if k != "cache_control"}
                head = message["role"] if first else ""
                first = False
                yield head + "\x00" + json.dumps(plain, sort_keys=True), "cache_control" in block

    def _block_tokens(self, key: str) -> int:
        body = key.split("\x00", 1)[1]
        if key.startswith("system\x00"):
            return self._count(body)
        block = json.loads(body)
        if block["type"] == "text":
            return self._count(block["text"])
        if block["type"] == "tool_use":
            return self._count(block["name"] + " " + json.dumps(block["input"], sort_keys=True))
        content = block["content"]
        return self._count(content if isinstance(content, str) else json.dumps(content))

    def send(self, system: Any, messages: Sequence[dict[str, Any]]) -> tuple[int, int]:
        """Price one request; returns (input tokens, tokens served from the cache)."""
        digest = hashlib.blake2b(digest_size=16)
        total = 0
        marks: list[tuple[bytes, int]] = []  # (prefix hash, tokens up to and including the block)
        for key, marked in self.blocks(system, messages):
            digest.update(hashlib.blake2b(key.encode(), digest_size=16).digest())
            total += self._block_tokens(key)
            if marked:
                marks.append((digest.copy().digest(), total))
        now = self.clock
        self.clock += SECONDS_PER_REQUEST
        cached = 0
        for prefix, upto in reversed(marks):
            if self.entries.get(prefix, -1.0) >= now:
                cached = upto
                break
        written = marks[-1][1] - cached if marks and marks[-1][1] > cached else 0
        rest = total - cached - written
        for prefix, _ in marks:
            self.entries[prefix] = now + CACHE_LIFETIME_S
        t = self.tally
        t.requests += 1
        t.input_tokens += total
        t.cached_tokens += cached
        t.cost_cached += READ_PRICE * cached + WRITE_PRICE * written + BASE_PRICE * rest
        t.per_request.append((total, cached))
        return total, cached


# -- replay ---------------------------------------------------------------------------------


def replay(
    turns: Sequence[Turn],
    add: Callable[[Event], None],
    render: Callable[[], tuple[Any, list[dict[str, Any]]]],
    cache: PrefixCache,
) -> None:
    """Drive one subject as an agent does: store the user message, then one request per model
    step (each step's tool call and result stored before the next request), then the answer."""
    for turn in turns:
        add(turn.user)
        for step in turn.steps:
            cache.send(*render())
            assert step.call is not None and step.result is not None
            add(step.call)
            add(step.result)
        cache.send(*render())
        add(turn.answer)


def run_chat_memory(
    turns: Sequence[Turn], config: MemoryConfig, *, cache: bool = True, summarizer: Any = None
) -> tuple[Tally, ChatMemory, str]:
    """Replay ``turns`` through a ChatMemory on the memory store; returns the tally, the
    memory and the conversation id (for the recall check)."""
    memory = ChatMemory(InMemoryStore(), config, summarizer=summarizer)
    cid = f"cache-{uuid.uuid4().hex[:8]}"
    prefix_cache = PrefixCache()
    replay(
        turns,
        lambda event: memory.add(cid, event),
        lambda: memory.to_anthropic(cid, SYSTEM_PROMPT, cache=cache),
        prefix_cache,
    )
    return prefix_cache.tally, memory, cid


def keep_facts(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    """A deterministic local summarizer that keeps the key terms and sentences of facts."""
    import re

    kept = [
        m.group(0)
        for e in events
        for m in re.finditer(r"codename-[A-Z]{2}-\d{3} is [^.(]+\(fact \d+\)", e.text())
    ]
    return f"{previous or 'Summary of the earlier conversation.'} {' '.join(kept)}".strip()


def unreachable(memory: ChatMemory, cid: str, facts: Sequence[Fact]) -> list[str]:
    """Key terms of the facts neither in the window (summary included) nor on the first page
    of ``conversation_search`` for the key term (tests/engine/test_recall.py's check)."""
    window = "\n".join(e.text() for e in memory.window(cid))
    tool = memory.search_tool(cid)
    return [
        f.key_term
        for f in facts
        if f.sentence not in window and f.sentence not in tool({"keyword": f.key_term})
    ]
