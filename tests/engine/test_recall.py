"""The recall check: compaction never makes a fact unreachable. A 500-turn transcript plants
50 facts, each under a distinct key term (in user messages, tool results and assistant
replies alike); after it, every fact is in the window (the summary included) or on the
first page of one ``conversation_search`` for its key term — for every strategy.

CI runs all six strategies on the memory store and the template's strategy (turn window)
on every other backend; the full-size run (``CHAT_MEMORY_FULL=1`` or ``--full-reliability``)
runs every strategy on every backend."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.events import turn_starts
from tests.fixtures.reliability import is_full

TURNS = 500
FACTS = 50
KEY_TERM = re.compile(r"codename-[A-Z]{2}-\d{3}")

CONFIGS = {
    "none": MemoryConfig(),
    "sliding_window": MemoryConfig(compaction_strategy="sliding_window", max_events=20),
    "turn_window": MemoryConfig(compaction_strategy="turn_window", max_turns=3),
    "token_count": MemoryConfig(compaction_strategy="token_count", max_tokens=400),
    "recursive_summarization": MemoryConfig(
        compaction_strategy="recursive_summarization",
        max_events=20,
        max_events_to_keep=8,
        overlap_size=2,
    ),
    "auto_compact": MemoryConfig(
        compaction_strategy="auto_compact", context_window_tokens=3000, compact_at_ratio=0.8
    ),
}
CI_STRATEGIES = ("turn_window",)
# The archive cap would (by design) drop the oldest turns of 500; recall is about
# compaction, so the archive here holds everything.
ARCHIVE_CAP = 10_000

PLACES = (
    "the staging cluster",
    "the billing database",
    "the nightly backup job",
    "the on-call pager",
    "the EU gateway",
)
DISTRACTIONS = (
    "Can you tidy up the release notes for the next sprint?",
    "What does the codename scheme look like again? Just the rule, no names.",
    "Please draft a short status update for the team channel.",
    "Remind me how our deploy pipeline handles rollbacks.",
    "Let's compare two logging libraries for the worker service.",
)


@dataclass(frozen=True)
class Fact:
    key_term: str
    sentence: str
    turn: int


def planted_facts() -> list[Fact]:
    facts = []
    for n in range(FACTS):
        key = f"codename-{chr(65 + n % 26)}{chr(81 + n % 7)}-{100 + 7 * n:03d}"
        facts.append(
            Fact(
                key, f"{key} is {PLACES[n % len(PLACES)]} (fact {n})", turn=5 + n * (TURNS // FACTS)
            )
        )
    assert len({f.key_term for f in facts}) == FACTS
    assert not any(a.key_term in b.key_term for a in facts for b in facts if a is not b)
    return facts


def transcript(facts: list[Fact]) -> list[list[Event]]:
    """One add() batch per turn. A fact is said by the user, returned by a tool, or stated
    by the assistant, in turn; other turns are ordinary chatter, some with tool calls."""
    by_turn = {f.turn: f for f in facts}
    turns = []
    for i in range(TURNS):
        fact = by_turn.get(i)
        chatter = DISTRACTIONS[i % len(DISTRACTIONS)]
        if fact is None:
            batch = [Event.user(f"{chatter} (turn {i})")]
            if i % 4 == 0:
                call = Event.tool_call("lookup", {"topic": chatter[:20], "turn": i})
                batch += [
                    call,
                    Event.tool_result(call.tool_call_id, f"nothing notable for turn {i}"),
                ]
            batch.append(Event.assistant(f"Sure, here is what I have on that (turn {i})."))
        elif fact.turn // (TURNS // FACTS) % 3 == 0:
            batch = [Event.user(f"Please remember: {fact.sentence}."), Event.assistant("Noted.")]
        elif fact.turn // (TURNS // FACTS) % 3 == 1:
            call = Event.tool_call("inventory", {"turn": i})
            batch = [
                Event.user("What does the inventory say today?"),
                call,
                Event.tool_result(call.tool_call_id, f'{{"note": "{fact.sentence}"}}'),
                Event.assistant("The inventory has one new note."),
            ]
        else:
            batch = [
                Event.user("Anything I should know?"),
                Event.assistant(f"Yes: {fact.sentence}."),
            ]
        turns.append(batch)
    return turns


def keep_facts(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    """A deterministic local summarizer that keeps what the prompt says to keep verbatim (ids)
    and compresses the rest to a count."""
    kept = [m.group(0) for e in events for m in KEY_TERM.finditer(e.text())]
    return f"{previous or 'Summary.'} Ids seen: {', '.join(kept) or 'none'}; {len(events)} events."


def unreachable(memory: ChatMemory, cid: str, facts: list[Fact]) -> list[str]:
    window = "\n".join(e.text() for e in memory.window(cid))
    tool = memory.search_tool(cid)
    missing = []
    for fact in facts:
        if fact.sentence in window:
            continue
        if fact.sentence not in tool({"keyword": fact.key_term}):
            missing.append(fact.key_term)
    return missing


def check_recall(store, strategy: str) -> None:
    facts = planted_facts()
    config = CONFIGS[strategy].model_copy(update={"max_archived_events": ARCHIVE_CAP})
    memory = ChatMemory(store, config, summarizer=keep_facts)
    cid = f"recall-{strategy}-{uuid.uuid4().hex[:8]}"
    for batch in transcript(facts):
        memory.add(cid, batch)
    stats = memory.stats(cid)
    if strategy == "auto_compact":
        assert stats.archived_events > 0, "the transcript must have been compacted"
        threshold = config.compact_at_ratio * config.context_window_tokens
        active = [e for e in memory.window(cid) if e.is_real]
        newest_turn = active[turn_starts(active)[-1] :]
        assert stats.window_tokens <= threshold + sum(e.tokens or 0 for e in newest_turn)
        assert all(r.strategy == "auto_compact" and not r.fallback for r in memory.compactions(cid))
    elif strategy != "none":
        assert stats.archived_events > 0, "the transcript must have been compacted"
        assert stats.turns <= 25
    assert unreachable(memory, cid, facts) == []
    assert sum(1 for e in memory.history(cid) if e.is_real) == sum(
        len(b) for b in transcript(facts)
    )


def test_every_strategy_keeps_every_fact_reachable_on_the_memory_store():
    for strategy in CONFIGS:
        check_recall(InMemoryStore(), strategy)


def test_compacting_strategies_keep_every_fact_reachable_on_every_store(store, pytestconfig):
    for strategy in CONFIGS if is_full(pytestconfig) else CI_STRATEGIES:
        check_recall(store, strategy)


def test_the_check_notices_facts_that_the_archive_cap_dropped():
    # the default cap (1000 archived events) drops the oldest turns of this transcript, by design
    facts = planted_facts()
    memory = ChatMemory(InMemoryStore(), CONFIGS["turn_window"])
    for batch in transcript(facts):
        memory.add("capped", batch)
    lost = unreachable(memory, "capped", facts)
    assert lost == [f.key_term for f in facts[: len(lost)]] and 0 < len(lost) < FACTS
