"""The five-facts demo of the compacting-chat template: the user states five facts in five
turns, chats a little more so the turn window (3) archives the early turns, then asks for
the first fact; the agent has to find it with ``conversation_search``."""

from __future__ import annotations

import json
from collections.abc import Callable

from .. import EventType
from ..testing.scripted_model import API_KEY, LABEL
from .runtime import ChatWorkflow

FIRST_FACT_KEYWORD = "Bluefin"

DEMO_MESSAGES = (
    "First fact: our new service is code-named Bluefin.",
    "Second fact: the customer's order id is ORD-4512-KX.",
    "Third fact: the routing config lives at /etc/bluefin/routing.yaml.",
    "Fourth fact: the launch deadline is Friday 14 March.",
    "Fifth fact: my teammate on this is Priya Raman.",
    "Can you suggest a name for the release branch?",
    "Thanks. Anything I should double-check on launch day?",
    "What was the first fact I gave you?",
)


def _short(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def run_demo(
    runner: ChatWorkflow, store_url: str, conversation_id: str, out: Callable[[str], None] = print
) -> int:
    """Run the demo conversation, print it with the window and archive after each turn, and
    return 0 when the agent searched and found the first fact (1 otherwise)."""

    workflow = runner.workflow
    settings = runner.memory_settings(conversation_id)
    model_node = runner.agent_node.element("model")
    scripted = getattr(runner.client, "api_key", None) == API_KEY
    model_name = (model_node.parameters.get("model") if model_node else None) or "?"
    out(f'chat-memory demo: template "{workflow.title}" ({workflow.name})')
    out(f"model:        {LABEL if scripted else f'Claude {model_name} via the Anthropic API'}")
    out(f"store:        {store_url}")
    out(f"conversation: {conversation_id}")
    config = settings.config
    out(
        f"memory:       {config.compaction_strategy}, max turns {config.max_turns}, "
        f"conversation_search {'on' if config.enable_conversation_search_tool else 'off'}"
    )
    memory = runner.memory(conversation_id)
    searches: list[tuple[str, str]] = []
    for number, message in enumerate(DEMO_MESSAGES, 1):
        out("")
        out(f"[{number}] you:       {message}")
        run = runner.send(conversation_id, message)
        for call in run.turn.tool_calls:
            out(f"    tool call:   {call.name} {json.dumps(call.arguments, ensure_ascii=False)}")
            out(f"    tool result: {_short(call.result)}{' (error)' if call.is_error else ''}")
            if call.name == "conversation_search":
                searches.append((json.dumps(call.arguments, ensure_ascii=False), call.result))
        out(f"    assistant: {_short(run.reply, 400)}")
        stats = memory.stats(conversation_id)
        out(
            f"    (window: {stats.active_events} events in {stats.turns} turns; archived: {stats.archived_events})"
        )
    return _report(runner, conversation_id, searches, out)


def _report(
    runner: ChatWorkflow,
    conversation_id: str,
    searches: list[tuple[str, str]],
    out: Callable[[str], None],
) -> int:
    memory = runner.memory(conversation_id)
    stats = memory.stats(conversation_id)
    found = any(FIRST_FACT_KEYWORD.lower() in result.lower() for _, result in searches)
    out("")
    out("Result:")
    out(
        f"  window size:      {stats.active_events} events in {stats.turns} turns, {stats.window_tokens} tokens"
    )
    out(f"  archived events:  {stats.archived_events} (still stored and searchable)")
    in_window = any(
        FIRST_FACT_KEYWORD.lower() in e.text().lower()
        for e in memory.window(conversation_id)
        if e.type is EventType.USER
    )
    out(
        f"  first fact still in the window: {'yes' if in_window else 'no (archived by the turn window)'}"
    )
    if searches:
        out(
            f"  search happened:  yes, conversation_search {', '.join(args for args, _ in searches)}"
        )
    else:
        out("  search happened:  no")
    out(f"  found the first fact ({FIRST_FACT_KEYWORD}): {'yes' if found else 'no'}")
    out("")
    out(
        f"Look inside: chat-memory window -c {conversation_id}   (also: history, search {FIRST_FACT_KEYWORD}, stats)"
    )
    return 0 if found else 1
