"""The tracer and the metric instruments chat-memory reports through, and what may go into
them: content and conversation ids only with ``CHAT_MEMORY_OTEL_CAPTURE_CONTENT=true``
(see :mod:`chat_memory.telemetry`). opentelemetry itself is imported only by the methods, which
run once telemetry is on."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, TypeVar

from ..steps import Step, Steps, Summarize
from ..summarizer import AnthropicSummarizer

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

#: The switch that lets content and conversation ids into span attributes.
CAPTURE_CONTENT_ENV = "CHAT_MEMORY_OTEL_CAPTURE_CONTENT"
#: The instrumentation scope name of the tracer and the meter.
SCOPE = "chat_memory"

T = TypeVar("T")

#: Token counts: windows run from a few hundred tokens to a few hundred thousand.
_TOKEN_BUCKETS = (0, 250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000)
#: Summarizer calls: a model round trip, from a fraction of a second to its timeout.
_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def capture_content() -> bool:
    """Whether ``CHAT_MEMORY_OTEL_CAPTURE_CONTENT`` says content and conversation ids may go
    into span attributes (read at every span, so it can be switched at run time)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes", "on")


class Instruments:
    """The tracer and the metric instruments chat-memory reports through."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ):
        from opentelemetry import metrics, trace

        version = _version()
        self.tracer: Tracer = trace.get_tracer(SCOPE, version, tracer_provider)
        meter = metrics.get_meter(SCOPE, version, meter_provider)
        self.compactions: Counter = meter.create_counter(
            "chat_memory.compactions", "{compaction}", "Compactions applied"
        )
        self.archived_events: Counter = meter.create_counter(
            "chat_memory.archived_events", "{event}", "Events moved from the window to the archive"
        )
        self.tokens_before: Histogram = meter.create_histogram(
            "chat_memory.compaction.tokens_before",
            "{token}",
            "Window tokens before a compaction",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.tokens_after: Histogram = meter.create_histogram(
            "chat_memory.compaction.tokens_after",
            "{token}",
            "Window tokens after a compaction",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.summarizer_duration: Histogram = meter.create_histogram(
            "chat_memory.summarizer.duration",
            "s",
            "Time the summarizer took, failed calls included",
            explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
        )
        self.summarizer_failures: Counter = meter.create_counter(
            "chat_memory.summarizer.failures", "{call}", "Summarizer calls that failed"
        )
        self.fallbacks: Counter = meter.create_counter(
            "chat_memory.fallbacks",
            "{compaction}",
            "Compactions that archived without a new summary",
        )
        self.window_tokens: Histogram = meter.create_histogram(
            "chat_memory.window.tokens",
            "{token}",
            "Tokens of the window a read returned",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )

    def span(self, name: str, conversation_id: Any, **attributes: Any) -> Span:
        """A started span (current only if the caller makes it so), with the conversation id
        when content may be captured."""
        span = self.tracer.start_span(name, attributes=attributes)
        if isinstance(conversation_id, str) and capture_content():
            span.set_attribute("gen_ai.conversation.id", conversation_id)
        return span

    def compaction(
        self, steps: Steps[T], conversation_id: str, strategy: str, forced: bool
    ) -> Steps[T]:
        """``steps`` (a compaction) under a ``chat_memory.compact`` span: each summarizer
        call it asks for gets its own ``chat_memory.summarize`` span, latency and failure
        count; the applied compaction its metrics. The span is a parent by reference only
        (never the current span across a ``yield``, which another task may resume)."""
        span = self.span(
            "chat_memory.compact",
            conversation_id,
            **{"chat_memory.strategy": strategy, "chat_memory.compaction.forced": forced},
        )
        call: _SummarizerCall | None = None
        try:
            request: Step = next(steps)
            while True:
                call = (
                    _SummarizerCall(self, span, request) if isinstance(request, Summarize) else None
                )
                try:
                    answer = yield request
                except Exception as exc:
                    if call is not None:
                        call.failed(exc)
                    request = steps.throw(exc)
                else:
                    if call is not None:
                        call.done(answer)
                    request = steps.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            record = getattr(result, "record", None)
            if record is not None:
                self.compacted(span, record.to_json())
                span.set_attribute(
                    "chat_memory.compaction.attempts", getattr(result, "attempts", 1)
                )
            return result
        except GeneratorExit:  # abandoned by its driver: not a failure of the compaction
            raise
        except BaseException as exc:
            failed(span, exc)
            raise
        finally:
            if call is not None and call.open:
                call.span.end()
            steps.close()
            span.end()

    def compacted(self, span: Span, record: dict[str, Any]) -> None:
        """The metrics (and ``span``'s attributes) of one applied compaction, from the record
        the store keeps of it (:class:`~chat_memory.compaction.CompactionRecord`)."""
        labels = {
            "chat_memory.strategy": record["strategy"],
            "chat_memory.compaction.fallback": bool(record.get("fallback")),
            "chat_memory.compaction.forced": bool(record.get("forced")),
        }
        self.compactions.add(1, labels)
        self.archived_events.add(record["archived_events"], labels)
        self.tokens_before.record(record["tokens_before"], labels)
        self.tokens_after.record(record["tokens_after"], labels)
        if record.get("fallback"):
            self.fallbacks.add(1, labels)
        span.set_attributes(
            {
                **labels,
                "chat_memory.compaction.archived_events": record["archived_events"],
                "chat_memory.compaction.tokens_before": record["tokens_before"],
                "chat_memory.compaction.tokens_after": record["tokens_after"],
            }
        )


class _SummarizerCall:
    """One summarizer call in flight: its span and its start."""

    def __init__(self, instruments: Instruments, parent: Span, request: Summarize) -> None:
        from opentelemetry import trace

        model = _model_name(request.summarizer)
        self.instruments = instruments
        self.labels: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
        }
        attributes = {**self.labels, "chat_memory.summarize.events": len(request.events)}
        if isinstance(request.summarizer, AnthropicSummarizer):
            attributes["gen_ai.provider.name"] = "anthropic"
        self.span = instruments.tracer.start_span(
            "chat_memory.summarize",
            trace.set_span_in_context(parent),
            attributes=attributes,
        )
        self.started = time.perf_counter()
        self.open = True

    def done(self, summary: Any) -> None:
        self.instruments.summarizer_duration.record(time.perf_counter() - self.started, self.labels)
        if capture_content() and isinstance(summary, str):
            self.span.set_attribute("chat_memory.summary.text", summary)
        self.open = False
        self.span.end()

    def failed(self, exc: BaseException) -> None:
        labels = {**self.labels, "error.type": _error_type(exc)}
        self.instruments.summarizer_duration.record(time.perf_counter() - self.started, labels)
        self.instruments.summarizer_failures.add(1, labels)
        failed(self.span, exc)
        self.open = False
        self.span.end()


def failed(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed: the error's type always; its message (which may name a
    conversation or quote content) only when content may be captured."""
    from opentelemetry.trace import Status, StatusCode

    capture = capture_content()
    span.set_attribute("error.type", _error_type(exc))
    span.set_status(Status(StatusCode.ERROR, str(exc) if capture else type(exc).__name__))
    if capture:
        span.record_exception(exc)


def _error_type(exc: BaseException) -> str:
    kind = type(exc)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _model_name(summarizer: Any) -> str:
    model = getattr(summarizer, "model", None)
    if isinstance(model, str):
        return model
    function = getattr(summarizer, "function", None)  # a FunctionSummarizer: the function's name
    return getattr(function, "__qualname__", None) or type(summarizer).__name__


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("chat-memory")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return ""


__all__ = ["CAPTURE_CONTENT_ENV", "SCOPE", "Instruments", "capture_content", "failed"]
