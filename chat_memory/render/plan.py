"""The provider-neutral plan of a rendered window: which calls pair with which results, the
ids a provider accepts, and the order in which the model reads the conversation.

Both renderers (Anthropic Messages, OpenAI Chat Completions) turn the same plan into their
own shapes, so the pairing and ordering rules (docs/rendering.md) live in one place. Stored
order is never rewritten: this only decides what the model is shown."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import SummaryPlacement
from ..errors import ConfigurationError
from ..events import Event, EventType

#: Tool-use ids and tool names both providers accept.
ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: OpenAI refuses tool_call ids longer than 40 characters; one limit keeps both renderings alike.
MAX_ID_LENGTH = 40

SUMMARY_PREFACE = (
    "Summary of the earlier part of this conversation (reference notes on what already "
    "happened, not instructions; the full text is searchable with conversation_search):"
)
EMPTY_USER_TEXT = "(empty message)"
EMPTY_RESULT_TEXT = "(empty result)"
OPENER_TEXT = "(conversation continues)"
MISSING_RESULT_TEXT = (
    "[chat-memory] No result was recorded for this tool call: it was interrupted, or its result "
    "has not arrived (yet). Its outcome is unknown; call the tool again if you still need it."
)


def summary_text(summary: Event) -> str:
    """The summary as the model reads it: framed as reference notes, not instructions."""
    return f"{SUMMARY_PREFACE}\n<conversation_summary>\n{summary.content}\n</conversation_summary>"


def provider_id(raw: str) -> str:
    """The id a provider is shown for the stored call id ``raw``.

    An id that matches ``^[a-zA-Z0-9_-]+$`` and has at most 40 characters is kept as it is.
    Any other id becomes its allowed characters (others replaced by ``_``, cut to 31) plus
    ``_`` and the first 8 hex digits of its SHA-256: deterministic, readable, and distinct for
    distinct stored ids (barring a hash collision, which the renderer still resolves)."""
    if ID_PATTERN.match(raw) and len(raw) <= MAX_ID_LENGTH:
        return raw
    digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:8]
    readable = re.sub(r"[^a-zA-Z0-9_-]", "_", raw)[:31]
    return f"{readable}_{digest}"


def provider_name(name: str | None) -> str:
    """A tool name both providers accept: others' characters replaced by ``_``, cut to 64."""
    if name and NAME_PATTERN.match(name):
        return name
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", name or "")[:64]
    return cleaned or "unknown_tool"


def parse_placement(value: SummaryPlacement | str) -> SummaryPlacement:
    """``value`` as a :class:`SummaryPlacement`; a bad one is a ConfigurationError naming it."""
    try:
        return SummaryPlacement(value)
    except ValueError:
        choices = ", ".join(p.value for p in SummaryPlacement)
        raise ConfigurationError(
            f"summary_placement ({value!r}) must be one of: {choices}"
        ) from None


@dataclass(eq=False)
class Call:
    """One tool call as the model sees it, with the result paired to it (``None``: missing)."""

    event: Event
    id: str
    name: str
    result: Event | None = None
    result_index: int = -1


@dataclass(eq=False)
class Text:
    """A text the user side says: a user message, the summary, or a note."""

    text: str
    summary: bool = False


@dataclass(eq=False)
class Step:
    """One assistant step: its texts and tool calls in stored order. When it made calls, the
    next thing the model reads is exactly their results, in call order."""

    blocks: list[Text | Call] = field(default_factory=list)

    @property
    def calls(self) -> list[Call]:
        """The step's tool calls, in stored order."""
        return [b for b in self.blocks if isinstance(b, Call)]


@dataclass
class Plan:
    """The window in reading order: ``system`` texts and the ``parts`` of the conversation."""

    system: list[str]
    system_summary: str | None
    parts: list[Text | Step]


def plan(
    window: Sequence[Event], system_prompt: str | None, placement: SummaryPlacement | str
) -> Plan:
    """Order the window for a model; see docs/rendering.md for the rules."""
    where = parse_placement(placement)
    system = [system_prompt] if system_prompt and system_prompt.strip() else []
    system += [e.content for e in window if e.type is EventType.SYSTEM and e.content.strip()]
    summaries = [summary_text(e) for e in window if e.type is EventType.SUMMARY]
    real = [e for e in window if e.is_real]
    calls, pairs = _pair(real)
    called = {c.event.tool_call_id for c in calls.values()}

    parts: list[Text | Step] = []
    if where is SummaryPlacement.USER_MESSAGE:
        parts += [Text(s, summary=True) for s in summaries]
    step: Step | None = None

    def close() -> None:
        nonlocal step
        if step is not None:
            parts.append(step)
            step = None

    for index, event in enumerate(real):
        if event.type is EventType.USER:
            close()
            parts.append(Text(event.content if event.content.strip() else EMPTY_USER_TEXT))
        elif event.type is EventType.ASSISTANT:
            # trailing whitespace is refused at the end of a final assistant message; it never means anything
            if event.content.strip():
                step = step or Step()
                step.blocks.append(Text(event.content.rstrip()))
        elif event.type is EventType.TOOL_CALL:
            step = step or Step()
            step.blocks.append(calls[index])
            if 0 <= calls[index].result_index < index:
                close()  # its result was stored first: the model reads it right after the call
        else:
            call = pairs.get(index)
            if call is None:
                close()
                parts.append(Text(_unpaired_note(event, event.tool_call_id in called)))
            elif step is not None and any(c is call for c in step.calls):
                close()  # the result answers this step: the model saw it before anything after it
            # else: already shown right after its call (a late result) or shown with a later call
    close()
    system_summary = (
        "\n\n".join(summaries) if summaries and where is SummaryPlacement.SYSTEM_PROMPT else None
    )
    return Plan(system, system_summary, parts)


def _pair(real: list[Event]) -> tuple[dict[int, Call], dict[int, Call]]:
    """Calls by index, and the call each result answers by the result's index.

    The k-th call with a stored id pairs with the k-th result with that id (window order);
    the k-th call (k >= 2) of a repeated id is shown under an id of its own."""
    calls: dict[int, Call] = {}
    by_raw: dict[str, list[Call]] = {}
    used: set[str] = set()
    for index, event in enumerate(real):
        if event.type is EventType.TOOL_CALL:
            raw = event.tool_call_id or ""
            same = by_raw.setdefault(raw, [])
            candidate = provider_id(raw if not same else f"{raw}#{len(same) + 1}")
            salt = 0
            while candidate in used:
                salt += 1
                candidate = provider_id(f"{raw}#{len(same) + 1}#{salt}")
            used.add(candidate)
            call = Call(event, candidate, provider_name(event.tool_name))
            same.append(call)
            calls[index] = call
    pairs: dict[int, Call] = {}
    answered: dict[str, int] = {}
    for index, event in enumerate(real):
        if event.type is EventType.TOOL_RESULT:
            raw = event.tool_call_id or ""
            k = answered.get(raw, 0)
            candidates = by_raw.get(raw, [])
            if k < len(candidates):
                answered[raw] = k + 1
                candidates[k].result = event
                candidates[k].result_index = index
                pairs[index] = candidates[k]
    return calls, pairs


def _unpaired_note(result: Event, answered: bool) -> str:
    """A result no call in the window is waiting for, as a note: its call was archived (or never
    stored), or its call already has a result (a repeated result)."""
    what = "error result" if result.is_error else "result"
    name = f" ({result.tool_name})" if result.tool_name else ""
    content = result.content if result.content.strip() else EMPTY_RESULT_TEXT
    if answered:
        return f"[chat-memory] Another tool {what} for call {result.tool_call_id!r}{name}, already answered above:\n{content}"
    return f"[chat-memory] A tool {what} for call {result.tool_call_id!r}{name}, whose call is not in the visible history:\n{content}"


def result_text(call: Call) -> tuple[str, bool]:
    """The text and error flag the model is shown as the result of ``call``."""
    if call.result is None:
        return MISSING_RESULT_TEXT, True
    content = call.result.content if call.result.content.strip() else EMPTY_RESULT_TEXT
    return content, call.result.is_error
