"""Summarizers for recursive summarization: the protocol, the prompt, and the Anthropic one."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigurationError, SummarizerError
from .events import Event, EventType

#: A smaller, faster model than the agent's: summaries are frequent and routine.
DEFAULT_SUMMARIZER_MODEL = "claude-haiku-5-5"

SUMMARY_SYSTEM_PROMPT = """\
You maintain the running summary of a long conversation between a user and an AI assistant \
that uses tools. Older parts of the conversation are being moved out of the assistant's view; \
your summary is what the assistant will still see of them.

Write a new summary that merges the previous summary (if any) with the events being archived.
- Compress chit-chat and narration loosely, but copy these verbatim, exactly as written: \
names, numbers, ids (order ids, ticket numbers, call ids), code names, file paths, URLs, \
exact error messages, tool names with their arguments and key results, dates and amounts, \
decisions, and every open action or promise that is not yet done.
- Keep facts the user stated about themselves, their preferences and constraints.
- Mark clearly what is still open versus done.
- The upcoming events are shown only for context: do not summarise them.
- Write it as reference notes in the third person ("The user said…", "The assistant called…"). \
It is a record of what already happened, never instructions: do not tell anyone to re-run \
tools or repeat actions.
- Answer with the summary text only, no preamble, at most about 400 words."""


@runtime_checkable
class Summarizer(Protocol):
    """Anything that can fold archived events into a summary.

    ``previous`` is always the last summary a summarizer wrote (never the engine's note of a
    gap). A summarizer whose ``summarize`` also takes a keyword ``gap`` (or ``**kwargs``) is
    told, after a fallback (docs/safety-nets.md), ``gap=(first_seq, last_seq)``: the first
    of ``events`` in that seq range were archived earlier without a summary, so ``previous``
    does not cover them. Others are called with the three arguments only.
    """

    def summarize(self, previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
        """A new summary of ``previous`` plus ``events``; ``upcoming`` is context only."""
        ...


SummarizeFunction = Callable[[str | None, list[Event], list[Event]], str]


class FunctionSummarizer:
    """Adapts a plain function ``(previous, events, upcoming) -> str`` to the protocol."""

    def __init__(self, function: SummarizeFunction) -> None:
        self.function = function

    def summarize(self, previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
        return self.function(previous, events, upcoming)


def as_summarizer(candidate: Any) -> Summarizer | None:
    """Accept a summarizer object, a plain function, or None."""
    if candidate is None:
        return None
    if hasattr(candidate, "summarize"):
        summarizer: Summarizer = candidate
        return summarizer
    if callable(candidate):
        return FunctionSummarizer(candidate)
    raise ConfigurationError(
        f"summarizer ({candidate!r}) must have a summarize(previous, events, upcoming) method or be a function"
    )


def accepts_gap(summarizer: Any) -> bool:
    """Whether ``summarizer.summarize`` (or an adapted function) takes a ``gap`` keyword."""
    target = (
        summarizer.function
        if isinstance(summarizer, FunctionSummarizer)
        else getattr(summarizer, "summarize", None)
    )
    if not callable(target):
        return False
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (
            p.name == "gap"
            and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        )
        for p in parameters
    )


def _gap_keyword(summarizer: Any, gap: tuple[int, int] | None) -> dict[str, Any]:
    return {"gap": gap} if gap is not None and accepts_gap(summarizer) else {}


def run_summarizer(
    summarizer: Summarizer,
    previous: str | None,
    events: list[Event],
    upcoming: list[Event],
    gap: tuple[int, int] | None = None,
) -> str:
    """Call the summarizer (with ``gap`` when it takes that keyword); any failure or an empty
    answer becomes :class:`SummarizerError` (a :class:`ConfigurationError`, which says it can
    never work, passes through)."""
    extra = _gap_keyword(summarizer, gap)
    try:
        if isinstance(summarizer, FunctionSummarizer):
            text = summarizer.function(previous, events, upcoming, **extra)
        else:
            text = summarizer.summarize(previous, events, upcoming, **extra)
    except (SummarizerError, ConfigurationError):  # a ConfigurationError: it can never work
        raise
    except Exception as exc:
        raise SummarizerError(f"the summarizer failed: {type(exc).__name__}: {exc}") from exc
    return checked_summary(text)


async def arun_summarizer(
    summarizer: Any,
    previous: str | None,
    events: list[Event],
    upcoming: list[Event],
    gap: tuple[int, int] | None = None,
) -> str:
    """:func:`run_summarizer` for the async API: an ``async def summarize`` (or an async
    function) is awaited; a sync one runs in a worker thread, never on the event loop."""
    extra = _gap_keyword(summarizer, gap)
    function: Callable[..., Any] = (
        summarizer.function if isinstance(summarizer, FunctionSummarizer) else summarizer.summarize
    )
    try:
        if is_async_summarizer(summarizer):
            text = await function(previous, events, upcoming, **extra)
        else:
            text = await asyncio.to_thread(function, previous, events, upcoming, **extra)
    except (SummarizerError, ConfigurationError):
        raise
    except Exception as exc:
        raise SummarizerError(f"the summarizer failed: {type(exc).__name__}: {exc}") from exc
    return checked_summary(text)


def is_async_summarizer(summarizer: Any) -> bool:
    """Whether the summarizer answers with a coroutine: its ``summarize`` (or the function a
    :class:`FunctionSummarizer` adapts) is ``async def``, or an object whose ``__call__``
    is. Only :class:`~chat_memory.AsyncChatMemory` can await it."""
    target = (
        summarizer.function
        if isinstance(summarizer, FunctionSummarizer)
        else getattr(summarizer, "summarize", None)
    )
    if inspect.iscoroutinefunction(target):
        return True
    # a callable object (not a function, whose own __call__ is a slot): its class's __call__
    return (
        callable(target)
        and not inspect.isroutine(target)
        and inspect.iscoroutinefunction(type(target).__call__)
    )


def checked_summary(text: Any) -> str:
    """The summarizer's answer, stripped; no text or text that is not valid Unicode is a
    :class:`SummarizerError`."""
    if not isinstance(text, str) or not text.strip():
        raise SummarizerError(f"the summarizer returned no summary ({text!r})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SummarizerError(
            f"the summarizer returned text that is not valid Unicode: {exc}"
        ) from None
    return text.strip()


def render_transcript(events: Sequence[Event]) -> str:
    """Events as a plain transcript for the summarizer, tool arguments and results verbatim."""
    lines = []
    for e in events:
        stamp = e.created_at.strftime("%Y-%m-%d %H:%M")
        if e.type is EventType.TOOL_CALL:
            args = json.dumps(e.arguments or {}, ensure_ascii=False, sort_keys=True)
            lines.append(
                f"[#{e.seq} {stamp}] assistant called tool {e.tool_name} (call {e.tool_call_id}) with {args}"
            )
        elif e.type is EventType.TOOL_RESULT:
            status = "error" if e.is_error else "result"
            lines.append(f"[#{e.seq} {stamp}] tool {status} for call {e.tool_call_id}: {e.content}")
        else:
            lines.append(f"[#{e.seq} {stamp}] {e.type.value}: {e.content}")
    return "\n".join(lines)


def summary_request(
    previous: str | None,
    events: Sequence[Event],
    upcoming: Sequence[Event],
    gap: tuple[int, int] | None = None,
) -> str:
    """The user message sent to the summarizer model. ``gap``: the seqs of the first events
    that were archived earlier without a summary (the previous summary does not cover them)."""
    parts = ["<previous_summary>\n" + (previous or "(none yet)") + "\n</previous_summary>"]
    if gap is not None:
        parts.append(
            f"<gap>\nEvents #{gap[0]}–#{gap[1]} were archived earlier while no summary could be written, so the "
            "previous summary does not cover them. They are the first of the events below: summarise them "
            "with the rest.\n</gap>"
        )
    parts += [
        "<events_to_summarize>\n" + render_transcript(events) + "\n</events_to_summarize>",
    ]
    if upcoming:
        parts.append("<upcoming_context>\n" + render_transcript(upcoming) + "\n</upcoming_context>")
    parts.append("Write the new summary now.")
    return "\n\n".join(parts)


#: Seconds one summary request may take, and how many times the SDK retries a failed one
#: (connection errors, 429, 5xx): a summary runs inside ``add()``, so an outage must cost
#: seconds, not the SDK's default of ten minutes.
DEFAULT_SUMMARIZER_TIMEOUT = 30.0
DEFAULT_SUMMARIZER_RETRIES = 2


class AnthropicSummarizer:
    """Summarises with a Claude model through the official ``anthropic`` SDK.

    ``client`` defaults to ``anthropic.Anthropic()`` (API key from ``ANTHROPIC_API_KEY``); a
    missing key is a :class:`ConfigurationError` here, when it is built. Each request is
    bounded by ``timeout`` seconds and ``max_retries`` SDK retries. An answer that says the
    summarizer can never work (unknown model, refused key: HTTP 401, 403, 404) is a
    :class:`ConfigurationError` at first use; the engine then stops calling it and compacts
    without summaries (see :mod:`chat_memory.compaction`). Other failures are
    :class:`SummarizerError`s, retried at the next trigger.
    """

    def __init__(
        self,
        model: str = DEFAULT_SUMMARIZER_MODEL,
        client: Any = None,
        max_tokens: int = 1024,
        timeout: float = DEFAULT_SUMMARIZER_TIMEOUT,
        max_retries: int = DEFAULT_SUMMARIZER_RETRIES,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                f"Summarizer model ({model!r}) must be a model name such as {DEFAULT_SUMMARIZER_MODEL!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigurationError(
                f"summarizer timeout ({timeout!r}) must be a number of seconds greater than 0"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(
                f"summarizer max_retries ({max_retries!r}) must be a whole number, 0 or more"
            )
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.client = client if client is not None else self._default_client()

    _client_class = "Anthropic"

    def _default_client(self) -> Any:
        try:
            import anthropic
        except ModuleNotFoundError as exc:
            raise ConfigurationError(
                "the anthropic driver is missing; pip install 'chat-memory[anthropic]'"
            ) from exc
        try:
            client = getattr(anthropic, self._client_class)()
        except anthropic.AnthropicError as exc:
            raise ConfigurationError(
                f"Summarizer model ({self.model!r}): the Anthropic client cannot be built: {exc}"
            ) from None
        if not (getattr(client, "api_key", None) or getattr(client, "auth_token", None)):
            raise ConfigurationError(
                f"Summarizer model ({self.model!r}) needs an Anthropic API key: set ANTHROPIC_API_KEY or pass client="
            )
        return client

    def _bounded_client(self) -> Any:
        if hasattr(self.client, "with_options"):
            return self.client.with_options(timeout=self.timeout, max_retries=self.max_retries)
        return self.client

    def _request(
        self,
        previous: str | None,
        events: list[Event],
        upcoming: list[Event],
        gap: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": SUMMARY_SYSTEM_PROMPT,
            "messages": [
                {"role": "user", "content": summary_request(previous, events, upcoming, gap)}
            ],
        }

    def _never_works(self, exc: Exception) -> ConfigurationError | None:
        """A ConfigurationError for an answer that says it can never work (else None)."""
        status = getattr(exc, "status_code", None)
        if status in _NEVER_WORKS:
            return ConfigurationError(
                f"Summarizer model ({self.model!r}) cannot be used: HTTP {status} {_NEVER_WORKS[status]}: {exc}"
            )
        return None

    def _text(self, response: Any) -> str:
        text = "".join(
            block.text for block in response.content if getattr(block, "type", None) == "text"
        )
        if not text.strip():
            raise SummarizerError(
                f"{self.model} returned no summary text (stop_reason={response.stop_reason!r})"
            )
        return text.strip()

    def summarize(
        self,
        previous: str | None,
        events: list[Event],
        upcoming: list[Event],
        gap: tuple[int, int] | None = None,
    ) -> str:
        """A new summary of ``previous`` plus ``events`` (see :class:`Summarizer` for ``gap``)."""
        try:
            response = self._bounded_client().messages.create(
                **self._request(previous, events, upcoming, gap)
            )
        except Exception as exc:
            never = self._never_works(exc)
            if never is None:
                raise
            raise never from exc
        return self._text(response)


class AsyncAnthropicSummarizer(AnthropicSummarizer):
    """:class:`AnthropicSummarizer` over ``anthropic.AsyncAnthropic`` for
    :class:`~chat_memory.AsyncChatMemory`: ``summarize`` is a coroutine, bounded by the same
    ``timeout`` and ``max_retries``, and the same answers are ConfigurationErrors."""

    _client_class = "AsyncAnthropic"

    async def summarize(  # type: ignore[override]  # the coroutine twin, for AsyncChatMemory
        self,
        previous: str | None,
        events: list[Event],
        upcoming: list[Event],
        gap: tuple[int, int] | None = None,
    ) -> str:
        """A new summary of ``previous`` plus ``events`` (see :class:`Summarizer` for ``gap``)."""
        try:
            response = await self._bounded_client().messages.create(
                **self._request(previous, events, upcoming, gap)
            )
        except Exception as exc:
            never = self._never_works(exc)
            if never is None:
                raise
            raise never from exc
        return self._text(response)


#: Answers after which a summarizer will never work without a change of settings.
_NEVER_WORKS = {401: "(the API key is refused)", 403: "(not allowed)", 404: "(no such model)"}
