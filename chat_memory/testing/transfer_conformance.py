"""The conformance cases of the :class:`~chat_memory.backends.base.Forks` and
:class:`~chat_memory.backends.base.Dumps` abilities: a fork shows exactly the window of its
seq and stays independent; a dump restores exactly (history with retracted events, window,
compaction records, stats, search, metadata, checksum); export/import and copy round-trip
conversations and long-term memory, resume and refuse what they must.

A store's test module subclasses :class:`TransferConformance` and provides two fixtures:
``store`` and ``second_store``, each an empty store of the kind under test (the copy target).
Cases are skipped, with the reason, for a store without the ability."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from ..aio import AsyncChatMemory
from ..backends.base import Dumps, Forks, Store
from ..engine import ChatMemory
from ..errors import InvalidInputError
from ..events import Event
from ..transfer import copy_store, export_store, import_store


def _summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return f"{previous or ''}|{','.join(str(e.seq) for e in events)}"


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _memory(store: Store, strategy: str = "recursive_summarization") -> ChatMemory:
    settings: dict[str, Any] = {"compaction_strategy": strategy}
    if strategy == "recursive_summarization":
        settings.update(max_events=5, max_events_to_keep=2, overlap_size=1)
    else:
        settings.update(max_turns=2)
    return ChatMemory(store, settings, _summarize, token_counter=_tokens)


def _turn(i: int, call: bool = False) -> list[Event]:
    events = [Event.user(f"question {i} about bluefin")]
    if call:
        c = Event.tool_call("lookup", {"q": i}, call_id=f"call-{i}")
        events += [c, Event.tool_result(f"call-{i}", f"result {i}")]
    return [*events, Event.assistant(f"answer {i}")]


def _traffic(memory: ChatMemory, cid: str, turns: int = 7) -> dict[int, list[Event]]:
    """Turns with a pin, tool pairs, compactions and a retraction; the window at each last seq."""
    seen: dict[int, list[Event]] = {}
    memory.add(cid, [Event.system("Be brief."), *_turn(0)])
    for i in range(1, turns):
        memory.add(cid, _turn(i, call=i % 3 == 1))
        if i == 4:
            memory.retract(cid, [memory.window(cid)[-1].id])
        if i == 5:
            memory.add(cid, [Event.system("Be very brief.")])
        seen[memory.store.load(cid).last_seq] = memory.window(cid)
    return seen


def _same(a: ChatMemory, a_cid: str, b: ChatMemory, b_cid: str) -> None:
    assert b.history(b_cid, include_retracted=True) == a.history(a_cid, include_retracted=True)
    assert b.window(b_cid) == a.window(a_cid)
    assert b.compactions(b_cid) == a.compactions(a_cid)
    assert b.search(b_cid, "bluefin").total == a.search(a_cid, "bluefin").total
    sa, sb = a.stats(a_cid), b.stats(b_cid)
    assert (sa.active_events, sa.archived_events, sa.turns, sa.window_tokens) == (
        sb.active_events,
        sb.archived_events,
        sb.turns,
        sb.window_tokens,
    )


def _need(store: Store, ability: type) -> None:
    if not isinstance(store, ability):
        pytest.skip(f"{type(store).__name__} lacks the {ability.__name__} ability")


class TransferConformance:
    """Mix into a store's test class; needs ``store`` and ``second_store`` fixtures."""

    def test_a_fork_at_each_seq_shows_that_window_and_stays_independent(self, store: Store) -> None:
        _need(store, Forks)
        memory = _memory(store)
        seen = _traffic(memory, "conv")
        for seq, window in seen.items():
            assert memory.fork("conv", f"fork-{seq}", at=seq) == window, seq
        last = max(seen)
        memory.add(f"fork-{last}", [Event.user("only in the fork")])
        assert memory.window("conv") == seen[last]
        memory.add("conv", [Event.user("only in the original")])
        assert memory.search(f"fork-{last}", "only in the original").total == 0
        assert memory.window(f"fork-{last}")[-1].seq == last + 1

    def test_the_async_memory_forks_as_the_sync_one(self, store: Store) -> None:
        _need(store, Forks)
        memory = _memory(store)
        seen = _traffic(memory, "conv")

        async def forks() -> dict[int, list[Event]]:
            async_memory = AsyncChatMemory(store, memory.config, _summarize, _tokens)
            return {seq: await async_memory.fork("conv", f"async-{seq}", at=seq) for seq in seen}

        assert asyncio.run(forks()) == seen

    def test_a_fork_of_a_fork_at_an_earlier_seq_matches_the_original(self, store: Store) -> None:
        _need(store, Forks)
        memory = _memory(store, "turn_window")
        seen = _traffic(memory, "conv")
        memory.fork("conv", "child")
        first = min(seen)
        memory.fork("child", "grandchild", at=first)
        assert memory.window("grandchild") == seen[first]

    def test_a_bound_memory_forks_inside_its_scope_only(self, store: Store) -> None:
        _need(store, Forks)
        memory = _memory(store)
        alice, bob = memory.for_user("alice"), memory.for_user("bob")
        _traffic(alice, "conv", turns=3)
        bob.add("conv", _turn(1))
        alice.fork("conv", "copy")
        assert alice.window("copy") == alice.window("conv")
        assert bob.window("copy") == [] and memory.window("copy") == []
        with pytest.raises(InvalidInputError, match="'conv'"):
            bob.fork("conv", "conv-2", at=99)  # bob's own conv: 3 events, not alice's
        with pytest.raises(InvalidInputError, match="'nothing'"):
            bob.fork("nothing", "x")

    def test_fork_refuses_naming_the_value(self, store: Store) -> None:
        _need(store, Forks)
        memory = _memory(store)
        memory.add("conv", _turn(1))
        memory.add("other", _turn(2))
        with pytest.raises(InvalidInputError, match="'missing'"):
            memory.fork("missing", "new")
        with pytest.raises(InvalidInputError, match="'other'"):
            memory.fork("conv", "other")
        with pytest.raises(InvalidInputError, match=r"at \(9\)"):
            memory.fork("conv", "new", at=9)
        assert sorted(store.conversations()) == ["conv", "other"]

    def test_a_dump_restores_exactly(self, store: Store, second_store: Store) -> None:
        _need(store, Dumps)
        assert isinstance(store, Dumps) and isinstance(second_store, Dumps)
        source, target = _memory(store), _memory(second_store)
        _traffic(source, "conv")
        dump = store.dump("conv")
        assert dump is not None
        second_store.restore(dump)
        _same(source, "conv", target, "conv")
        restored = second_store.dump("conv")
        assert restored is not None and restored.checksum() == dump.checksum()
        assert store.dump("missing") is None
        with pytest.raises(InvalidInputError, match="'conv'"):
            second_store.restore(dump)
        # the restored conversation goes on where the original was
        target.add("conv", _turn(99))
        assert target.window("conv")[-1].seq == dump.last_seq + 2

    def test_export_then_import_round_trips_conversations_and_long_term_memory(
        self, store: Store, second_store: Store
    ) -> None:
        _need(store, Dumps)
        source = _memory(store)
        _traffic(source, "conv")
        _traffic(source, "conv \u00e9\n/2", turns=3)
        alice = _scoped(source)
        files = _long_term(store)
        out = io.StringIO()
        exported = export_store(store, out)
        assert exported.conversations == 3
        lines = out.getvalue().splitlines(keepends=True)
        assert lines[0].startswith('{"format":"chat-memory","version":1')
        imported = import_store(second_store, lines)
        assert imported.checksums == exported.checksums
        target = _memory(second_store)
        for cid in ("conv", "conv \u00e9\n/2"):
            _same(source, cid, target, cid)
        _same_scoped(alice, target)
        if files is not None:
            again = _long_term(second_store, write=False)
            assert again == files and imported.namespaces == 2
        assert import_store(second_store, lines).skipped == 3  # run again: nothing to do
        with pytest.raises(InvalidInputError, match="truncated"):
            import_store(second_store, lines[:-1])
        with pytest.raises(InvalidInputError, match=r"version \(7\)"):
            import_store(second_store, ['{"format":"chat-memory","version":7}\n'])

    def test_copy_is_verified_resumable_and_refuses_to_overwrite(
        self, store: Store, second_store: Store
    ) -> None:
        _need(store, Dumps)
        source = _memory(store)
        for cid in ("a", "b", "c"):
            _traffic(source, cid, turns=3)
        alice = _scoped(source)
        # an interrupted copy: "a" made it across before the interruption
        first = copy_store(store, second_store, conversations=["a"])
        assert first.conversations == 1
        resumed = copy_store(store, second_store)
        assert (resumed.skipped, resumed.conversations) == (1, 3)
        assert {"b", "c"} < resumed.checksums.keys()
        target = _memory(second_store)
        for cid in ("a", "b", "c"):
            _same(source, cid, target, cid)
        _same_scoped(alice, target)
        target.add("b", [Event.user("written on the target")])
        with pytest.raises(InvalidInputError, match="'b'.*replace"):
            copy_store(store, second_store)
        assert copy_store(store, second_store, replace=True).conversations == 1
        _same(source, "b", target, "b")


def _scoped(memory: ChatMemory) -> ChatMemory:
    """A user's conversation with title, tags and values, and a long-term file of the user."""
    alice = memory.for_user("alice", app="support")
    _traffic(alice, "conv", turns=3)
    alice.set_metadata("conv", title="First chat", tags=["billing", "vip"], priority="high")
    if getattr(type(memory.store), "long_term", None) is not None:
        from ..longterm import long_term_memory

        long_term_memory(memory.store, "prefs", user="alice", app="support").create(
            "/memories/prefs.md", "tea\n"
        )
    return alice


def _same_scoped(alice: ChatMemory, target: ChatMemory) -> None:
    """The user's conversation and its metadata, as listed in the target under the same scope."""
    moved = target.for_user("alice", app="support")
    _same(alice, "conv", moved, "conv")
    assert moved.conversations() == alice.conversations()
    assert moved.conversations()[0].title == "First chat"
    if getattr(type(target.store), "long_term", None) is not None:
        from ..longterm import long_term_memory

        files = long_term_memory(target.store, "prefs", user="alice", app="support")
        assert files.read("/memories/prefs.md") == "tea\n"


def _long_term(store: Store, write: bool = True) -> Any:
    """Plant two files with versions (when ``write``) and return the namespace as listed."""
    if getattr(type(store), "long_term", None) is None:
        return None
    from ..longterm import long_term_memory

    files = long_term_memory(store, "user-42")
    if write:
        files.create("/memories/notes.md", "one\n")
        files.str_replace("/memories/notes.md", "one", "two")
        files.create("/memories/todo.md", "ship it\n")
    return [
        (e.path, files.read(e.path), [v.content for v in files.versions(e.path)])
        for e in sorted(files.files(), key=lambda e: e.path)
    ]
