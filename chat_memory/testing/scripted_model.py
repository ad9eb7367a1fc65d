"""A scripted stand-in for Claude, for the demo and the tests when no API key is set.

It sits *behind* the real ``anthropic`` SDK as an HTTP transport
(``httpx2.MockTransport``), so the agent, the tool loop and the SDK's request and response
handling run exactly as with Claude; only the answers are canned. It acknowledges facts,
calls ``conversation_search`` when asked about something said earlier, answers from the
tool result, uses the ``memory`` tool (see :mod:`.scripted_memory`), and writes plain summaries when used as the summarizer."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from ..errors import ConfigurationError
from ..summarizer import SUMMARY_SYSTEM_PROMPT
from .scripted_memory import memory_step, turn_pairs, turn_question

LABEL = "scripted stand-in model (no ANTHROPIC_API_KEY set): canned replies, not Claude"
API_KEY = "scripted-stand-in"

_ASKS_ABOUT_EARLIER = re.compile(
    r"\b(first|earlier|previously|at the start|remind me|did i (say|tell|mention))\b", re.I
)
_STATES_FACT = re.compile(r"^\s*\w+ fact:\s*(?P<fact>.+)$", re.I | re.S)
_STOPWORDS = frozenset(
    "a an and are at did do does first for gave give i is it me my of on said say tell the this to told was we "
    "what when which who you your earlier before previously remind mention mentioned".split()
)
_HIT = re.compile(r"^- \[#\d+ · [^\]]*· user · [^\]]*\] (?P<text>.*)$", re.M)


def search_keyword(question: str) -> str:
    """The keyword the stand-in searches for: 'first fact' when asked for it, otherwise the
    longest word of the question that is not a stopword."""
    if re.search(r"\bfirst fact\b", question, re.I):
        return "first fact"
    words = [
        w for w in re.findall(r"[\w/.-]+", question) if w.lower() not in _STOPWORDS and len(w) > 2
    ]
    return max(words, key=len) if words else question.strip()


class ScriptedModel:
    """The handler of an ``httpx2.MockTransport``: it reads a Messages API request and
    returns a response of the full Messages shape. ``requests`` keeps every request body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        import httpx2

        body = json.loads(request.content)
        self.requests.append(body)
        content, stop_reason = self.answer(body)
        return httpx2.Response(
            200, json=_message(body.get("model", "scripted"), content, stop_reason)
        )

    def answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """The content blocks and stop reason for one request."""
        if body.get("system") == SUMMARY_SYSTEM_PROMPT:
            return [_text(_summary(body))], "end_turn"
        move = memory_step(body, turn_question(body), turn_pairs(body))
        if isinstance(move, list):
            return [_text("Let me check my memory."), *move], "tool_use"
        if isinstance(move, str):
            return [_text(move)], "end_turn"
        last = body["messages"][-1]
        blocks = (
            last["content"]
            if isinstance(last["content"], list)
            else [{"type": "text", "text": last["content"]}]
        )
        memory_turn = turn_pairs(body)
        if (
            memory_turn and memory_turn[-1][1] in blocks
        ):  # memory consulted, nothing more to do with it
            return [_text(_acknowledge(turn_question(body)))], "end_turn"
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            return [_text(_answer_from(results[-1], body))], "end_turn"
        question = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
        if _STATES_FACT.match(question):
            return [_text(_acknowledge(question))], "end_turn"
        tool_names = {t.get("name") for t in body.get("tools", [])}
        may_use_tools = body.get("tool_choice", {}).get("type") != "none"
        if (
            "conversation_search" in tool_names
            and may_use_tools
            and _ASKS_ABOUT_EARLIER.search(question)
        ):
            call = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": "conversation_search",
                "input": {"keyword": search_keyword(question)},
            }
            return [
                _text("That was before what I can see now; let me search our conversation."),
                call,
            ], "tool_use"
        return [_text(_acknowledge(question))], "end_turn"


def _acknowledge(question: str) -> str:
    fact = _STATES_FACT.match(question)
    if fact:
        return f"Noted: {fact['fact']}"
    return f"(scripted reply) Got it: “{question[:80]}”."


def _answer_from(result: dict[str, Any], body: dict[str, Any]) -> str:
    content = result.get("content", "")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    keyword = _last_keyword(body)
    if result.get("is_error"):
        return f"I tried to search the conversation history but the search failed: {content}"
    hit = _HIT.search(content)
    if not hit:
        return f"I searched the conversation history for “{keyword}” and found nothing I said or you said about it."
    return f"I searched the conversation history (conversation_search, “{keyword}”) and found it: you said “{hit['text']}”"


def _last_keyword(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        if message["role"] == "assistant" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_use":
                    return str(block.get("input", {}).get("keyword", ""))
    return ""


def _summary(body: dict[str, Any]) -> str:
    request = body["messages"][-1]["content"]
    text = request if isinstance(request, str) else " ".join(b.get("text", "") for b in request)
    found = re.search(r"<events_to_summarize>\n(.*?)\n</events_to_summarize>", text, re.S)
    lines = found.group(1).splitlines() if found else []
    previous = re.search(r"<previous_summary>\n(.*?)\n</previous_summary>", text, re.S)
    kept = [] if not previous or previous.group(1) == "(none yet)" else [previous.group(1)]
    return (
        "\n".join(kept + [re.sub(r"^\[#\d+ [^\]]*\] ", "- ", line) for line in lines])
        or "- (nothing)"
    )


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _message(model: str, content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    words = sum(len(json.dumps(block).split()) for block in content)
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": words},
    }


def scripted_client(model: ScriptedModel | None = None) -> Any:
    """A real ``anthropic.Anthropic`` client whose HTTP traffic the scripted model answers.
    Without the ``anthropic`` extra this is a :class:`ConfigurationError` naming it: the
    stand-in drives the real SDK, it does not replace it."""
    try:
        import anthropic
        import httpx2
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"the scripted stand-in model runs through the anthropic SDK ({exc.name} is missing); "
            "pip install 'chat-memory[anthropic]'"
        ) from None

    handler = model or ScriptedModel()
    return anthropic.Anthropic(
        api_key=API_KEY,
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
