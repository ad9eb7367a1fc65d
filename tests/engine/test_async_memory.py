"""AsyncChatMemory and ThreadedStore: async summarizers and tools, bad input, what
open_async_store picks, and many conversations on one event loop that never stalls it. The
engine's behaviour on the async API is tests/test_engine*.py's (its threaded and native memory
kinds); the async store protocol is tests/stores/test_async_conformance.py's."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chat_memory import (
    AsyncChatMemory,
    ConfigurationError,
    Event,
    InvalidEventError,
    ThreadedStore,
    open_async_store,
)
from chat_memory.backends.aio import AsyncStore
from chat_memory.backends.in_memory import InMemoryStore
from tests.support.helpers import fixed_tokens, turn

# -- the async API itself -------------------------------------------------------------------


def test_async_summarizer_is_awaited_and_sync_one_runs_off_the_loop(store):
    loop_threads: list[bool] = []

    class AsyncSummary:
        async def summarize(self, previous, events, upcoming):
            await asyncio.sleep(0)
            return f"async summary of {len(events)}"

    def sync_summary(previous, events, upcoming):
        loop_threads.append(_on_a_loop())
        return "sync summary"

    config = {
        "compaction_strategy": "recursive_summarization",
        "max_events": 4,
        "max_events_to_keep": 2,
        "overlap_size": 0,
    }

    async def main():
        for cid, summarizer in (("a", AsyncSummary()), ("s", sync_summary)):
            memory = AsyncChatMemory(
                ThreadedStore(store), config, summarizer=summarizer, token_counter=fixed_tokens
            )
            for i in range(4):
                await memory.add(cid, turn(f"q{i}"))
            yield_summary = (await memory.window(cid))[0]
            assert yield_summary.type.value == "summary"
            yield cid, yield_summary.content

    async def collect():
        return [item async for item in main()]

    found = dict(asyncio.run(collect()))
    assert found["a"].startswith("async summary of") and found["s"] == "sync summary"
    assert loop_threads and not any(loop_threads)


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_async_tools_search_and_fetch(store):
    async def main():
        memory = AsyncChatMemory(store, token_counter=fixed_tokens)  # a sync Store: ThreadedStore
        assert isinstance(memory.store, ThreadedStore)
        call = Event.tool_call("lookup", {"q": "x"}, call_id="c-1")
        await memory.add(
            "t",
            [
                Event.user("the invoice number is INV-77"),
                call,
                Event.tool_result("c-1", "full output"),
            ],
        )
        found = await memory.search_tool("t")({"keyword": "inv-77"})
        fetched = await memory.fetch_tool("t")({"tool_call_id": "c-1"})
        bad = await memory.search_tool("t").run({"keyword": ""})
        system, messages = await memory.to_anthropic("t", "be brief")
        openai = await memory.to_openai("t")
        stats = await memory.stats("t")
        return found, fetched, bad, messages, openai, stats

    found, fetched, bad, messages, openai, stats = asyncio.run(main())
    assert "INV-77" in found and "full output" in fetched and bad.is_error
    assert messages[0]["role"] == "user" and openai[0]["role"] == "user"
    assert stats.active_events == 3


def test_bad_input_is_refused_alike():
    async def main():
        memory = AsyncChatMemory(InMemoryStore())
        with pytest.raises(InvalidEventError, match=r"events\[0\]"):
            await memory.add("c", ["not an event"])
        with pytest.raises(InvalidEventError, match="tool_call_id"):
            await memory.add("c", Event.tool_result("nope", "x"))

    asyncio.run(main())
    with pytest.raises(ConfigurationError, match="store"):
        AsyncChatMemory("memory://")
    with pytest.raises(ConfigurationError, match="max_workers"):
        ThreadedStore(InMemoryStore(), max_workers=0)


def test_open_async_store_threads_the_sync_store(sqlite_url):
    store = open_async_store(sqlite_url, max_workers=3, threads=True)
    assert isinstance(store, ThreadedStore) and not store.native and store.max_workers == 3
    asyncio.run(store.aclose())


class _NativeForTests(ThreadedStore):
    """A stand-in native store for a scheme of its own (the real ones: tests/test_async_*.py)."""

    schemes = ("nativetest",)
    native = True  # type: ignore[misc]
    driver_modules = ("json",)
    extra = "nativetest-extra"

    @classmethod
    def from_url(cls, url, **options):
        if options:
            raise ValueError(f"unknown options {sorted(options)}")
        return cls(InMemoryStore(), max_workers=2)


class _MissingDriver(_NativeForTests):
    schemes = ("nativemissing",)
    driver_modules = ("json", "no_such_driver_module_for_chat_memory")


def test_open_async_store_prefers_an_installed_native_driver(monkeypatch):
    import chat_memory.backends

    # the sync store behind any threads: in-memory, whatever the scheme
    monkeypatch.setattr(chat_memory.backends, "store_class_for", lambda scheme: InMemoryStore)
    store = open_async_store("nativetest://x")
    assert isinstance(store, _NativeForTests) and store.native
    threaded = open_async_store("nativetest://x", threads=True, max_workers=2)
    assert type(threaded) is ThreadedStore and not threaded.native
    # the native driver is missing: threads by default, a clear error when insisted upon
    assert type(open_async_store("nativemissing://x", max_workers=2)) is ThreadedStore
    with pytest.raises(
        ConfigurationError,
        match=r"no_such_driver_module_for_chat_memory.*chat-memory\[nativetest-extra\]",
    ):
        open_async_store("nativemissing://x", threads=False)
    with pytest.raises(ConfigurationError, match="memory:// has no native async store"):
        open_async_store("memory://", threads=False)
    with pytest.raises(ConfigurationError, match=r"threads \('yes'\)"):
        open_async_store("memory://", threads="yes")
    # what the native store's from_url raises is a ConfigurationError naming the scheme
    with pytest.raises(
        ConfigurationError, match="nativetest:// store cannot be opened.*unknown options"
    ):
        open_async_store("nativetest://x", bogus=1)


# -- nothing blocks the loop ----------------------------------------------------------------

#: The store calls the handshake wraps (every Store method the engine calls during ``add``
#: and ``window``).
_STORE_CALLS = (
    "load",
    "append",
    "append_compacting",
    "apply",
    "history",
    "find_tool_events",
    "search",
    "record_compaction_error",
)


class LoopHandshake:
    """Wraps a sync store so that each call, in whatever thread runs it, waits until the event
    loop has run a step of :meth:`ticker` since the call began. A call can therefore only
    finish if the loop was free while it was in flight; one made on the loop thread waits in
    vain and fails after ``timeout`` seconds. Nothing here depends on how fast anything is."""

    def __init__(self, store, timeout: float) -> None:
        self.timeout = timeout
        self.calls = 0
        self._lock = threading.Lock()
        self._waiting: list[threading.Event] = []
        for name in _STORE_CALLS:
            if hasattr(store, name):
                setattr(store, name, self._wrap(getattr(store, name)))
        self.store = store

    def _wrap(self, method):
        def call(*args, **kwargs):
            loop_ran = threading.Event()
            with self._lock:
                self._waiting.append(loop_ran)
            if not loop_ran.wait(self.timeout):
                raise AssertionError(
                    f"the event loop did not run while {method.__name__} was in flight"
                )
            with self._lock:
                self.calls += 1
            return method(*args, **kwargs)

        return call

    async def ticker(self, done: asyncio.Event) -> None:
        while not done.is_set():
            with self._lock:
                waiting, self._waiting = self._waiting, []
            for loop_ran in waiting:
                loop_ran.set()
            await asyncio.sleep(0.001)


class OnTheLoop(AsyncStore):
    """A wrong async store that calls its sync store on the loop thread (the control)."""

    def __init__(self, store):
        self.store = store

    def __getattribute__(self, name):
        if name in ("store", "compacts_while_appending", "native") or name.startswith("__"):
            return object.__getattribute__(self, name)
        method = getattr(object.__getattribute__(self, "store"), name)

        async def call(*args):
            return method(*args)

        return call

    load = append = apply = history = find_tool_events = search = None  # type: ignore[assignment]
    record_compaction_error = compactions = clear = conversations = None  # type: ignore[assignment]


async def _adds_with_handshake(
    wrap, sync_store, conversations: int, turns: int, timeout: float
) -> int:
    """Runs ``conversations`` concurrent conversations of ``turns`` adds each over
    ``wrap(sync_store)`` while the handshake's ticker runs; returns the store calls made."""
    handshake = LoopHandshake(sync_store, timeout)
    memory = AsyncChatMemory(
        wrap(sync_store),
        {"compaction_strategy": "turn_window", "max_turns": 3, "compact_to_ratio": 1.0},
        token_counter=fixed_tokens,
    )
    done = asyncio.Event()
    tick = asyncio.create_task(handshake.ticker(done))

    async def conversation(i):
        for t in range(turns):
            await memory.add(f"conv-{i}", turn(f"c{i} t{t}"))

    try:
        await asyncio.gather(*(conversation(i) for i in range(conversations)))
        for i in range(conversations):
            assert len(await memory.window(f"conv-{i}")) == 2 * min(turns, 3)
    finally:
        done.set()
        await tick
    return handshake.calls


@pytest.mark.parametrize("backend", ["sqlite_store", "redis_store"])
def test_200_conversations_on_one_loop_never_block_it(backend, request):
    store = request.getfixturevalue(backend)
    calls = asyncio.run(
        _adds_with_handshake(
            lambda s: ThreadedStore(s, max_workers=8), store, conversations=200, turns=4, timeout=60
        )
    )
    # every add (800) and window (200) made at least one store call, and each one finished
    # only because the loop ran the ticker while it was in flight
    assert calls >= 1000


def test_the_handshake_catches_a_store_that_blocks_the_loop(sqlite_store):
    with pytest.raises(AssertionError, match="event loop did not run while"):
        asyncio.run(
            _adds_with_handshake(OnTheLoop, sqlite_store, conversations=2, turns=1, timeout=0.2)
        )


class _AsyncMessages:
    def __init__(self, outcome):
        self.outcome = outcome
        self.requests = []

    async def create(self, **request):
        self.requests.append(request)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class _AsyncClient:
    def __init__(self, outcome):
        self.messages = _AsyncMessages(outcome)
        self.options = None

    def with_options(self, **options):
        self.options = options
        return self


def test_async_anthropic_summarizer_is_bounded_and_maps_never_works():
    from types import SimpleNamespace

    from chat_memory import AsyncAnthropicSummarizer

    reply = SimpleNamespace(
        content=[SimpleNamespace(type="text", text=" the summary ")], stop_reason="end_turn"
    )
    client = _AsyncClient(reply)
    summarizer = AsyncAnthropicSummarizer(
        model="claude-test", client=client, timeout=7, max_retries=1
    )
    assert asyncio.run(summarizer.summarize(None, [Event.user("hi")], [])) == "the summary"
    assert client.options == {"timeout": 7.0, "max_retries": 1}
    assert client.messages.requests[0]["model"] == "claude-test"
    refused = Exception("no such model")
    refused.status_code = 404  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="claude-test"):
        asyncio.run(
            AsyncAnthropicSummarizer(model="claude-test", client=_AsyncClient(refused)).summarize(
                None, [], []
            )
        )


def test_append_compacting_falls_back_to_append_then_compare_and_swap(fakeredis_store):
    """A store without the one-write ability still takes append_compacting: two writes."""
    from chat_memory import ThreadedStore
    from chat_memory.backends.base import CompactionPlan

    store = ThreadedStore(fakeredis_store)
    store.compacts_while_appending = False  # as a store without it (every built-in one has it)

    async def run():
        await store.append("c", turn("q0"))
        snapshot, applied = await store.append_compacting(
            "c", turn("q1"), lambda s: CompactionPlan(s.version, archive_through_seq=2)
        )
        assert applied and snapshot.last_seq == 4
        assert [e.seq for e in (await store.load("c")).window.active] == [3, 4]
        _, applied = await store.append_compacting("c", turn("q2"), lambda s: None)
        assert not applied

    asyncio.run(run())
