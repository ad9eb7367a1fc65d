"""The lifecycle conformance suite: scopes, metadata and listing, the retention sweep and
erasure (docs/lifecycle.md), for any store with the
:class:`~chat_memory.backends.base.KeepsLifecycle` ability, through both memories.

Subclass :class:`LifecycleConformance` in a test module and give it a ``store`` fixture that
returns an empty sync store (a fresh one for every test), and, to run the erasure cases, a
:meth:`~LifecycleConformance.raw_strings` that reads the store's raw storage (every row, key or
object, whatever the layout) and returns every string in it::

    class TestMyStore(LifecycleConformance):
        @pytest.fixture
        def store(self):
            return MyStore.from_url(...)

        def raw_strings(self, store):
            return [row_text for table in ... for row_text in ...]

Each case runs twice, through :class:`~chat_memory.ChatMemory` and through
:class:`~chat_memory.AsyncChatMemory` (over :meth:`async_store`: a
:class:`~chat_memory.ThreadedStore` unless overridden with the store's native twin).

This module imports pytest; only test code imports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from ..aio import AsyncChatMemory
from ..backends.aio import AsyncStore, ThreadedStore
from ..backends.base import Forks, KeepsLifecycle, Store
from ..engine import ChatMemory
from ..errors import ConcurrencyError, InvalidInputError
from ..events import Event
from ..lifecycle import decisions
from ..longterm import long_term_memory
from .blocking import run_blocking

Memory = Any  # a ChatMemory, or the blocking facade of an AsyncChatMemory


class _Blocking:
    """An :class:`AsyncChatMemory` with ChatMemory's signature (``for_user`` included)."""

    def __init__(self, memory: AsyncChatMemory) -> None:
        self.memory = memory

    def for_user(self, user: str, app: str | None = None) -> _Blocking:
        return _Blocking(self.memory.for_user(user, app))

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.memory, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            result = found(*args, **kwargs)
            return run_blocking(result) if hasattr(result, "__await__") else result

        return call


def _summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return "summary of " + " | ".join(str(e.content) for e in events)


def strings_in(value: Any, seen: dict[int, Any] | None = None) -> Iterator[str]:
    """Every string reachable from ``value``: dict keys and values, sequences, sets, iterables,
    dataclasses and objects' attributes (``__dict__`` and ``__slots__``) — a raw scan of
    memory:// (what a store's :meth:`LifecycleConformance.raw_strings` does for its storage)."""
    # what was visited, kept alive: a temporary (an event unpacked from the archive) freed
    # during the walk could otherwise lend its id to the next one, which would be skipped
    seen = {} if seen is None else seen
    if isinstance(value, str):
        yield value
        return
    if value is None or isinstance(value, (int, float, bool, bytes, datetime)) or id(value) in seen:
        return
    seen[id(value)] = value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key, seen)
            yield from strings_in(item, seen)
        return
    if (
        isinstance(value, (threading.Thread, type))
        or callable(value)
        and not hasattr(value, "__dict__")
    ):
        return
    if isinstance(value, (list, tuple, set, frozenset)) or (
        isinstance(value, Iterable) and not hasattr(value, "read")
    ):
        try:
            items = list(value)
        except TypeError:
            items = []
        for item in items:
            yield from strings_in(item, seen)
    attributes = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and hasattr(value, slot):
                attributes[slot] = getattr(value, slot)
    for item in attributes.values():
        if not callable(item) or hasattr(item, "__dict__"):
            yield from strings_in(item, seen)


class LifecycleConformance:
    """What every store with the KeepsLifecycle ability does alike, through both memories."""

    @pytest.fixture(params=["sync", "async"])
    def memory_of(
        self, request: pytest.FixtureRequest, store: Store
    ) -> Iterator[Callable[..., Memory]]:
        """``memory_of(**config)``: a memory over the test's store (sync, or async blocking)."""
        if not isinstance(store, KeepsLifecycle):
            pytest.skip(f"{type(store).__name__} does not declare KeepsLifecycle")
        asynchronous = request.param == "async"
        opened: list[AsyncStore] = []

        def make(summarizer: Any = None, **config: Any) -> Memory:
            if not asynchronous:
                return ChatMemory(store, config, summarizer)
            async_store = self.async_store(store)
            opened.append(async_store)
            return _Blocking(AsyncChatMemory(async_store, config, summarizer))

        yield make
        for async_store in opened:
            run_blocking(async_store.aclose())

    def async_store(self, store: Store) -> AsyncStore:
        """The async store the async runs use over ``store`` (override: its native twin)."""
        return ThreadedStore(store, max_workers=4)

    def raw_strings(self, store: Store) -> list[str]:
        """Every string in the store's raw storage (override for a store of your own)."""
        from ..backends.in_memory import InMemoryStore
        from ..longterm.in_memory import namespaces_of

        if not isinstance(store, InMemoryStore):
            pytest.skip(f"no raw-storage scanner for {type(store).__name__}: override raw_strings")
        return [*strings_in(vars(store)), *strings_in(namespaces_of(store))]

    # -- scope -------------------------------------------------------------------------------

    def test_scopes_never_see_each_other(
        self, memory_of: Callable[..., Memory], store: Store
    ) -> None:
        memory = memory_of(compaction_strategy="turn_window", max_turns=1)
        alice, bob = memory.for_user("alice", app="support"), memory.for_user("bob", app="support")
        alice.add("conv-1", [Event.user("alice secret"), Event.assistant("ok")])
        alice.add("conv-1", Event.user("alice again"))
        bob.add("conv-1", Event.user("bob words"))
        memory.add("conv-1", Event.user("unscoped words"))
        assert [e.content for e in bob.history("conv-1")] == ["bob words"]
        assert [e.content for e in memory.history("conv-1")] == ["unscoped words"]
        assert [e.content for e in alice.history("conv-1")][:2] == ["alice secret", "ok"]
        assert (
            bob.search("conv-1", "alice").total == 0 and alice.search("conv-1", "alice").total == 2
        )
        assert [c.id for c in bob.conversations()] == ["conv-1"]
        assert {(c.user, c.app) for c in alice.conversations()} == {("alice", "support")}
        # guessing the other scope's key: refused, from the bound and from the unbound memory
        for guess in ("~scope/support/alice/conv-1", "~scope//alice/conv-1"):
            for who in (bob, memory):
                with pytest.raises(InvalidInputError, match="reserved"):
                    who.history(guess)
        with pytest.raises(InvalidInputError, match="forgets only that user"):
            bob.forget(user="alice", app="support")
        if isinstance(store, Forks):  # a fork stays in its scope too
            with pytest.raises(InvalidInputError, match="reserved"):
                bob.fork("~scope/support/alice/conv-1", "stolen")
            bob.fork("conv-1", "copy")
            assert [e.content for e in bob.history("copy")] == ["bob words"]
            assert alice.history("copy") == [] and memory.history("copy") == []
        bob.clear("conv-1")
        assert alice.stats("conv-1").active_events == 1  # compacted, not cleared
        assert len(alice.history("conv-1")) == 3 and bob.history("conv-1") == []

    def test_a_different_app_is_a_different_scope(self, memory_of: Callable[..., Memory]) -> None:
        memory = memory_of()
        memory.for_user("u", app="a").add("c", Event.user("in a"))
        memory.for_user("u", app="b/x").add("c", Event.user("in b/x"))
        memory.for_user("u").add("c", Event.user("no app"))
        memory.for_user("a/u").add("c", Event.user("user a/u"))
        seen = {
            str(m.history("c")[0].content)
            for m in (
                memory.for_user("u", app="a"),
                memory.for_user("u", app="b/x"),
                memory.for_user("u"),
                memory.for_user("a/u"),
            )
        }
        assert seen == {"in a", "in b/x", "no app", "user a/u"}
        assert memory.for_user("u", app="b").history("c") == []

    # -- metadata and listing ----------------------------------------------------------------

    def test_metadata_is_set_merged_and_listed(self, memory_of: Callable[..., Memory]) -> None:
        alice = memory_of().for_user("alice")
        alice.add("c", [Event.user("hello"), Event.assistant("hi")])
        info = alice.set_metadata("c", title="Greeting", tags=["b", "a", "b"], lang="en", n=1)
        assert (info.id, info.user, info.app, info.title) == ("c", "alice", None, "Greeting")
        assert info.tags == ("a", "b") and info.metadata == {"lang": "en", "n": 1}
        assert info.events == 2 and info.created_at <= info.last_active_at
        info = alice.set_metadata("c", n=None, extra={"deep": [1, 2]})
        assert info.title == "Greeting" and info.tags == ("a", "b")
        assert info.metadata == {"lang": "en", "extra": {"deep": [1, 2]}}
        assert alice.set_metadata("c", tags=[]).tags == ()
        with pytest.raises(InvalidInputError, match="title"):
            alice.set_metadata("c", title=7)
        with pytest.raises(InvalidInputError, match="tags"):
            alice.set_metadata("c", tags="one")
        with pytest.raises(InvalidInputError, match="JSON"):
            alice.set_metadata("c", when=object())
        new = alice.set_metadata("titled-first", title="Empty yet")
        assert new.events == 0 and alice.history("titled-first") == []

    def test_listing_is_newest_activity_first_paged_and_by_tag(
        self, memory_of: Callable[..., Memory]
    ) -> None:
        memory = memory_of()
        alice = memory.for_user("alice")
        for i in range(5):
            alice.add(f"c{i}", Event.user(f"message {i}"))
            time.sleep(0.002)  # distinct activity times, so the order is defined
        alice.set_metadata("c1", tags=["work"])
        time.sleep(0.002)
        alice.add("c3", Event.assistant("newest"))
        memory.for_user("bob").add("c9", Event.user("bob's"))
        assert [c.id for c in alice.conversations()] == ["c3", "c1", "c4", "c2", "c0"]
        assert [c.id for c in alice.conversations(page=2, page_size=2)] == ["c4", "c2"]
        assert [c.id for c in alice.conversations(page=3, page_size=2)] == ["c0"]
        assert alice.conversations(page=4, page_size=2) == []
        assert [c.id for c in alice.conversations(tag="work")] == ["c1"]
        first = alice.conversations()[0]
        assert first.events == 2 and first.last_active_at > first.created_at
        for bad in ({"page": 0}, {"page_size": 0}, {"page_size": 501}, {"tag": ""}):
            with pytest.raises(InvalidInputError):
                alice.conversations(**bad)

    # -- retention ---------------------------------------------------------------------------

    def test_sweep_deletes_idle_conversations_and_keeps_active_ones(
        self, memory_of: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        memory = memory_of(compaction_strategy="turn_window", max_turns=1, retention_seconds=3600)
        alice, bob = memory.for_user("alice"), memory.for_user("bob")
        alice.add("old", [Event.user("one"), Event.assistant("two")])
        alice.add("old", Event.user("three"))
        memory.add("old-unscoped", Event.user("bare"))
        time.sleep(0.005)
        middle = decisions.now()
        time.sleep(0.005)
        alice.add("new", Event.user("recent"))
        bob.add("new", Event.user("recent too"))
        assert alice.sweep().conversations == 0  # nothing is an hour old
        monkeypatch.setattr(decisions, "now", lambda: middle + timedelta(seconds=3600))
        bob_report = bob.sweep()  # a bound memory sweeps its own scope only
        assert (bob_report.conversations, bob_report.skipped) == (0, 0)
        report = alice.sweep()
        assert report.conversations == 1 and report.retention_seconds == 3600
        assert report.erased.archived_events == 2 and report.erased.events == 1
        assert report.erased.compaction_records == 1
        assert alice.history("old") == [] and len(alice.history("new")) == 1
        assert memory.history("old-unscoped") != []  # alice's sweep did not reach it
        assert memory.sweep().conversations == 1  # the unbound memory sweeps every scope
        assert memory.history("old-unscoped") == [] and len(bob.history("new")) == 1
        assert memory.sweep().conversations == 0  # idempotent
        assert memory_of().sweep().retention_seconds is None

    def test_the_conditional_delete_keeps_what_was_written_since(self, store: Store) -> None:
        if not isinstance(store, KeepsLifecycle):
            pytest.skip(f"{type(store).__name__} does not declare KeepsLifecycle")
        store.append("c", [Event.user("x", tokens=1)])
        before = decisions.now() - timedelta(seconds=60)
        assert store.delete_idle("c", before) is None and store.load("c").last_seq == 1
        counts = store.delete_idle("c", decisions.now() + timedelta(seconds=1))
        assert counts is not None and (counts.conversations, counts.events) == (1, 1)
        assert store.load("c").last_seq == 0 and store.delete_idle("c", decisions.now()) is None

    def test_long_term_namespaces_have_their_own_retention(
        self, memory_of: Callable[..., Memory], store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        memory = memory_of()
        kept = long_term_memory(store, "notes", user="alice")
        fading = long_term_memory(store, "scratch", user="alice", retention_seconds=60)
        kept.create("/memories/a.md", "keep me")
        fading.create("/memories/b.md", "let me go")
        assert memory.sweep().long_term_namespaces == 0
        later = decisions.now() + timedelta(seconds=61)
        monkeypatch.setattr(decisions, "now", lambda: later)
        report = memory.sweep()
        assert report.long_term_namespaces == 1 and report.erased.long_term_files == 1
        assert [f.path for f in fading.files()] == [] and len(kept.files()) == 1

    # -- erasure -----------------------------------------------------------------------------

    def _plant(self, memory: Memory, store: Store, user: str, word: str) -> Memory:
        """One user's data in every kind of storage: window, archive, summaries, compaction
        records, retractions, metadata, long-term files and their versions."""
        scoped = memory.for_user(user, app="app")
        for i in range(4):
            scoped.add(
                f"{word}-chat",
                [Event.user(f"{word} question {i}"), Event.assistant(f"{word} answer {i}")],
            )
        scoped.add(
            f"{word}-chat", Event.tool_call("lookup", {"q": f"{word} arg"}, call_id=f"{word}-call")
        )
        scoped.add(f"{word}-chat", Event.tool_result(f"{word}-call", f"{word} result"))
        scoped.retract(f"{word}-chat", [scoped.history(f"{word}-chat")[-1].id])
        scoped.add(f"{word}-other", Event.user(f"{word} second conversation"))
        scoped.set_metadata(
            f"{word}-chat", title=f"{word} title", tags=[f"{word}-tag"], note=f"{word} note"
        )
        files = long_term_memory(store, f"{word}-notes", user=user, app="app")
        files.create("/memories/profile.md", f"{word} profile v1")
        files.str_replace("/memories/profile.md", "v1", "v2")
        return scoped

    def test_forget_erases_every_kind_and_says_how_much(
        self, memory_of: Callable[..., Memory], store: Store
    ) -> None:
        memory = memory_of(
            _summarize,
            compaction_strategy="recursive_summarization",
            max_events=4,
            max_events_to_keep=2,
            overlap_size=0,
        )
        alice = self._plant(memory, store, "alice", "aardvark")
        bob = self._plant(memory, store, "bob", "bluebird")
        bob_before = (bob.history("bluebird-chat", include_retracted=True), bob.conversations())
        receipt = memory.forget(user="alice", app="app")
        assert (receipt.user, receipt.app, receipt.conversation) == ("alice", "app", None)
        assert receipt.conversations == 2 and receipt.retracted_events == 2
        assert receipt.summaries >= 2 and receipt.compaction_records >= 1
        assert receipt.archived_events >= 1 and receipt.events >= 1
        assert (receipt.long_term_files, receipt.long_term_versions) == (1, 2)
        assert alice.conversations() == [] and alice.history("aardvark-chat") == []
        assert (
            bob.history("bluebird-chat", include_retracted=True),
            bob.conversations(),
        ) == bob_before
        again = memory.forget(user="alice", app="app")
        assert again.total == 0
        one = bob.forget(conversation="bluebird-other")
        assert (one.conversation, one.conversations, one.events) == ("bluebird-other", 1, 1)
        assert [c.id for c in bob.conversations()] == ["bluebird-chat"]

    def test_forget_leaves_nothing_of_the_user_in_raw_storage(
        self, memory_of: Callable[..., Memory], store: Store
    ) -> None:
        memory = memory_of(compaction_strategy="turn_window", max_turns=1)
        self._plant(memory, store, "alice", "aardvark")
        self._plant(memory, store, "bob", "bluebird")
        raw = self.raw_strings(store)
        assert any("aardvark" in s for s in raw) and any("alice" in s for s in raw)
        bob_strings = sorted(s for s in raw if "bluebird" in s)
        memory.forget(user="alice", app="app")
        raw = self.raw_strings(store)
        left = [s for s in raw if "aardvark" in s or "alice" in s]
        assert left == [], f"the forgotten user's data is still stored: {left[:5]}"
        assert sorted(s for s in raw if "bluebird" in s) == bob_strings, "bob's data changed"

    def test_a_writer_racing_the_erasure_is_erased_or_refused(
        self, memory_of: Callable[..., Memory], store: Store
    ) -> None:
        memory = memory_of()
        alice = memory.for_user("alice")
        written, refused = threading.Event(), []
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                try:
                    alice.add("chat", Event.user(f"aardvark {i}"))
                    written.set()
                except ConcurrencyError:
                    refused.append(i)
                i += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            assert written.wait(10)
            receipt = memory.forget(user="alice")
            deadline = time.monotonic() + 10  # against a hang only: refused within writes
            while not refused and time.monotonic() < deadline:
                time.sleep(0.001)
        finally:
            stop.set()
            writer.join()
        assert refused and receipt.conversations == 1 and receipt.events >= 1
        left = [s for s in self.raw_strings(store) if "aardvark" in s]
        assert left == [], f"a racing write was left behind: {left[:5]}"


__all__ = ["LifecycleConformance", "strings_in"]
