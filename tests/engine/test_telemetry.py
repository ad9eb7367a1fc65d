"""OpenTelemetry spans and metrics (chat_memory.telemetry, docs/telemetry.md), seen by the SDK's
in-memory span exporter and metric reader: a scripted 50-turn run with compactions and one
summarizer failure, sync and async; no content and no conversation id in any attribute
unless ``CHAT_MEMORY_OTEL_CAPTURE_CONTENT=true``; off (and never imported) until the
application configures OpenTelemetry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk", reason="the SDK is in the dev extra")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from chat_memory import AsyncChatMemory, ChatMemory, ConfigurationError, Event, telemetry
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.longterm import MemoryTool, long_term_memory
from tests.support.helpers import fixed_tokens

CID = "conv-quokka-7"
#: every piece of content the script writes holds one of these
CONTENT = ("zebra", "okapi", "ibex", "pangolin", "narwhal")
SETTINGS = {
    "compaction_strategy": "recursive_summarization",
    "max_events": 8,
    "max_events_to_keep": 2,
    "overlap_size": 0,
    "summarizer_failures_before_fallback": 1,
}
TURNS = 50
SPANS = {
    "chat_memory.add",
    "chat_memory.window",
    "chat_memory.compact",
    "chat_memory.summarize",
    "chat_memory.search",
    "chat_memory.memory_tool",
}


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self) -> dict[str, list[Any]]:
        """Every metric's data points, by name."""
        found: dict[str, list[Any]] = {}
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def total(self, name: str) -> float:
        """A counter's sum, or a histogram's sum of what it recorded, over every data point."""
        return sum(getattr(p, "value", None) or getattr(p, "sum", 0) for p in self.points()[name])


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    telemetry.instrument(tracer_provider, MeterProvider(metric_readers=[reader]))
    yield Telemetry(exporter, reader)
    telemetry.uninstrument()


class FailsOnce:
    """A summarizer that raises at its second call, and only then."""

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("summarizer down: ibex")
        return f"ibex summary of {len(events)} events"


def turn_events(i: int) -> tuple[list[Event], list[Event]]:
    call = f"call-{i}"
    return [Event.user(f"zebra {i}: where is my order?")], [
        Event.tool_call("get_order", {"q": f"okapi {i}"}, call_id=call),
        Event.tool_result(call, f"okapi {i}: shipped"),
        Event.assistant(f"okapi {i}: it shipped"),
    ]


def memory_tool() -> MemoryTool:
    return MemoryTool(long_term_memory(InMemoryStore(), "ns-narwhal"))


def tool_calls(tool: MemoryTool) -> None:
    tool({"command": "create", "path": "/memories/pangolin.md", "file_text": "pangolin facts"})
    tool({"command": "view", "path": "/memories/pangolin.md"})
    tool({"command": "delete", "path": "/memories/missing-narwhal.md"})  # an error answer


def scripted_run(memory: ChatMemory) -> None:
    tool = memory_tool()
    for i in range(TURNS):
        question, answer = turn_events(i)
        memory.add(CID, question)
        memory.window(CID)
        memory.add(CID, answer)
        if i % 10 == 9:
            memory.search_tool(CID)({"keyword": f"zebra {i - 5}"})
        if i == 25:
            tool_calls(tool)


async def ascripted_run(memory: AsyncChatMemory) -> None:
    tool = memory_tool()
    for i in range(TURNS):
        question, answer = turn_events(i)
        await memory.add(CID, question)
        await memory.window(CID)
        await memory.add(CID, answer)
        if i % 10 == 9:
            await memory.search_tool(CID)({"keyword": f"zebra {i - 5}"})
        if i == 25:
            tool_calls(tool)


def sync_run() -> list[dict[str, Any]]:
    memory = ChatMemory(InMemoryStore(), SETTINGS, FailsOnce(), fixed_tokens)
    scripted_run(memory)
    return [r.to_json() for r in memory.compactions(CID)]


def async_run() -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        memory = AsyncChatMemory(InMemoryStore(), SETTINGS, FailsOnce(), fixed_tokens)
        await ascripted_run(memory)
        records = [r.to_json() for r in await memory.compactions(CID)]
        await memory.aclose()
        return records

    return asyncio.run(main())


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def every_attribute(otel: Telemetry) -> list[tuple[str, str, Any]]:
    """(where, key, value) of every attribute of every span, span event and metric point."""
    found = []
    for span in otel.finished():
        found += [(span.name, k, v) for k, v in (span.attributes or {}).items()]
        for event in span.events:
            found += [
                (f"{span.name}/{event.name}", k, v) for k, v in (event.attributes or {}).items()
            ]
        if span.status.description:
            found.append((span.name, "status.description", span.status.description))
    for name, points in otel.points().items():
        for point in points:
            found += [(name, k, v) for k, v in point.attributes.items()]
    return found


def leaks(otel: Telemetry, secrets: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    return [
        (where, key, value)
        for where, key, value in every_attribute(otel)
        if any(secret in str(value) for secret in secrets)
    ]


@pytest.mark.parametrize("run", [sync_run, async_run], ids=["sync", "async"])
def test_a_scripted_run_reports_its_spans_and_metrics(otel, run):
    records = run()
    spans = otel.finished()
    assert {s.name for s in spans} == SPANS
    assert len(by_name(spans, "chat_memory.add")) == 2 * TURNS
    assert len(by_name(spans, "chat_memory.window")) == TURNS
    assert len(by_name(spans, "chat_memory.search")) == TURNS // 10
    assert len(by_name(spans, "chat_memory.memory_tool")) == 3

    # each compaction runs inside the add that triggered it, each summary inside its compaction
    ids = {name: {s.context.span_id for s in by_name(spans, name)} for name in SPANS}
    compacts = by_name(spans, "chat_memory.compact")
    summaries = by_name(spans, "chat_memory.summarize")
    assert compacts and all(s.parent.span_id in ids["chat_memory.add"] for s in compacts)
    assert all(s.parent.span_id in ids["chat_memory.compact"] for s in summaries)
    assert len(compacts) == len(summaries) == len(records)

    failed = [s for s in summaries if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1
    assert failed[0].attributes["error.type"] == "chat_memory.errors.SummarizerError"
    assert [c.attributes["chat_memory.compaction.fallback"] for c in compacts].count(True) == 1
    assert {s.attributes["gen_ai.operation.name"] for s in summaries} == {"chat"}
    tool_spans = by_name(spans, "chat_memory.memory_tool")
    assert [s.attributes["chat_memory.memory.command"] for s in tool_spans] == [
        "create",
        "view",
        "delete",
    ]
    assert [s.attributes["chat_memory.tool.is_error"] for s in tool_spans] == [False, False, True]
    assert {s.attributes["gen_ai.tool.name"] for s in tool_spans} == {"memory"}

    # the metrics say what the store's own compaction records say
    assert otel.total("chat_memory.compactions") == len(records)
    assert otel.total("chat_memory.archived_events") == sum(r["archived_events"] for r in records)
    assert otel.total("chat_memory.compaction.tokens_before") == sum(
        r["tokens_before"] for r in records
    )
    assert otel.total("chat_memory.compaction.tokens_after") == sum(
        r["tokens_after"] for r in records
    )
    assert otel.total("chat_memory.fallbacks") == 1
    assert otel.total("chat_memory.summarizer.failures") == 1
    durations = otel.points()["chat_memory.summarizer.duration"]
    assert sum(p.count for p in durations) == len(summaries)
    windows = by_name(spans, "chat_memory.window")
    (tokens,) = otel.points()["chat_memory.window.tokens"]
    assert tokens.count == TURNS
    assert tokens.sum == sum(s.attributes["chat_memory.window.tokens"] for s in windows)


@pytest.mark.parametrize("run", [sync_run, async_run], ids=["sync", "async"])
def test_without_the_switch_no_attribute_holds_content_or_a_conversation_id(otel, run, monkeypatch):
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    run()
    # the check below looks at attributes of every kind of span and at the metrics' labels
    assert SPANS | {"chat_memory.compactions"} <= {where for where, _, _ in every_attribute(otel)}
    assert leaks(otel, (CID, "quokka", *CONTENT)) == []


def test_with_the_switch_spans_carry_the_conversation_id_and_content(otel, monkeypatch):
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    sync_run()
    spans = otel.finished()
    for name in (
        "chat_memory.add",
        "chat_memory.window",
        "chat_memory.compact",
        "chat_memory.search",
    ):
        assert {s.attributes["gen_ai.conversation.id"] for s in by_name(spans, name)} == {CID}
    adds = by_name(spans, "chat_memory.add")
    assert adds[0].attributes["chat_memory.events.content"] == ("zebra 0: where is my order?",)
    (search, *_) = by_name(spans, "chat_memory.search")
    assert search.attributes["gen_ai.retrieval.query.text"] == "zebra 4"
    summaries = by_name(spans, "chat_memory.summarize")
    assert "ibex summary" in summaries[0].attributes["chat_memory.summary.text"]
    failed = next(s for s in summaries if s.status.status_code is StatusCode.ERROR)
    assert "ibex" in (failed.status.description or "")
    assert [e.name for e in failed.events] == ["exception"]
    create = by_name(spans, "chat_memory.memory_tool")[0]
    assert "pangolin facts" in create.attributes["gen_ai.tool.call.arguments"]
    assert "pangolin.md" in create.attributes["gen_ai.tool.call.result"]
    # metrics never carry them, switch or not
    labels = [v for points in otel.points().values() for p in points for v in p.attributes.values()]
    assert labels and not [v for v in labels if any(s in str(v) for s in (CID, *CONTENT))]


def test_a_compaction_the_store_applies_inside_its_append_is_reported(otel):
    memory = ChatMemory(
        InMemoryStore(),
        {"compaction_strategy": "turn_window", "max_turns": 2},
        token_counter=fixed_tokens,
    )
    for i in range(6):
        memory.add(CID, [Event.user(f"zebra {i}"), Event.assistant(f"okapi {i}")])
    records = memory.compactions(CID)
    compacts = by_name(otel.finished(), "chat_memory.compact")
    assert records and len(compacts) == len(records)
    assert [c.attributes["chat_memory.compaction.archived_events"] for c in compacts] == [
        r.archived_events for r in records
    ]
    assert otel.total("chat_memory.compactions") == len(records)
    assert otel.total("chat_memory.compaction.tokens_after") == sum(r.tokens_after for r in records)


def test_a_failing_operation_marks_its_span_with_the_error_type_only(otel, monkeypatch):
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    memory = ChatMemory(InMemoryStore(), {"compaction_strategy": "none"})
    with pytest.raises(Exception) as raised:
        memory.add(CID, [Event.tool_result("call-quokka", "zebra")])  # answers no call
    (span,) = otel.finished()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"].endswith(type(raised.value).__qualname__)
    assert span.status.description == type(raised.value).__name__
    assert not span.events and leaks(otel, (CID, "quokka", "zebra")) == []


text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=12)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cid=text, contents=st.lists(text, min_size=1, max_size=4))
def test_no_conversation_id_or_content_leaks_whatever_they_are(otel, cid, contents):
    otel.spans.clear()
    conversation, contents = f"Ω{cid}", [f"Ω{c}" for c in contents]
    memory = ChatMemory(
        InMemoryStore(),
        {"compaction_strategy": "turn_window", "max_turns": 1},
        token_counter=fixed_tokens,
    )
    for content in contents:
        memory.add(conversation, [Event.user(content), Event.assistant(content)])
        memory.window(conversation)
    memory.search(conversation, contents[0])
    assert leaks(otel, (conversation, *contents)) == []


def test_off_until_the_application_sets_a_tracer_provider_and_never_imported_by_us():
    code = """
import sys
from chat_memory import ChatMemory, Event, open_store, telemetry
memory = ChatMemory(open_store("memory://"), {"compaction_strategy": "turn_window", "max_turns": 1})
memory.add("c", [Event.user("a"), Event.assistant("b")]); memory.window("c")
print("opentelemetry" in {m.split(".")[0] for m in sys.modules})
from opentelemetry import trace
print(telemetry.current() is None)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
memory.add("c", [Event.user("c"), Event.assistant("d")]); memory.window("c")
print(sorted({s.name for s in exporter.get_finished_spans()}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.splitlines() == [
        "False",
        "True",
        "['chat_memory.add', 'chat_memory.compact', 'chat_memory.window']",
    ], result.stderr


def test_a_span_attribute_that_cannot_be_read_never_fails_the_memory_tool(otel, monkeypatch):
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    arguments: dict[str, Any] = {"command": "view", "path": "/memories"}
    arguments["itself"] = arguments  # no JSON for the span: the tool still answers
    answer = memory_tool().run(arguments)
    assert answer.is_error and answer.text.startswith("Error")
    (span,) = otel.finished()
    assert (
        span.name == "chat_memory.memory_tool"
        and "gen_ai.tool.call.arguments" not in span.attributes
    )
    assert span.attributes["chat_memory.tool.is_error"] is True


def test_instrument_without_the_api_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'chat-memory\[otel\]'"):
        telemetry.instrument()
    assert telemetry.current() is None
