"""Moving a store end to end with the real command line: a store holding bare and scoped
conversations (tool pairs, summaries, compactions by several strategies, retractions, a fork,
metadata) and long-term files with versions is copied SQLite -> PostgreSQL -> Redis -> Redis
Cluster -> S3 (moto's server) -> SQLite by ``chat-memory copy --from URL --to URL`` at each
hop, and the last store equals the first in everything a user can read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chat_memory import ChatMemory, Event, open_store
from chat_memory.backends.base import Dumps, Store
from chat_memory.host.cli import main
from chat_memory.lifecycle.keys import stored_key
from chat_memory.longterm import long_term_memory

#: (strategy settings, conversation) of the bare memory; each compacts in its own way
STRATEGIES: list[dict[str, Any]] = [
    {
        "compaction_strategy": "recursive_summarization",
        "max_events": 5,
        "max_events_to_keep": 2,
        "overlap_size": 1,
    },
    {"compaction_strategy": "turn_window", "max_turns": 2},
    {"compaction_strategy": "sliding_window", "max_events": 4},
    {"compaction_strategy": "token_count", "max_tokens": 40},
]
SCOPES = [("alice", "support"), ("bob", None)]


def _summarize(previous: str | None, events: list[Event], upcoming: list[Event]) -> str:
    return f"{previous or ''}|{','.join(str(e.seq) for e in events)}"


def _memory(store: Store, settings: dict[str, Any]) -> ChatMemory:
    return ChatMemory(store, settings, _summarize, token_counter=lambda t: len(t.split()) + 1)


def _turn(i: int, call: bool) -> list[Event]:
    events = [Event.user(f"question {i} about bluefin")]
    if call:
        events += [
            Event.tool_call("lookup", {"q": i}, call_id=f"call-{i}"),
            Event.tool_result(f"call-{i}", f"result {i}"),
        ]
    return [*events, Event.assistant(f"answer {i}")]


def _converse(memory: ChatMemory, cid: str, turns: int) -> None:
    memory.add(cid, [Event.system("Be brief."), *_turn(0, call=False)])
    for i in range(1, turns):
        memory.add(cid, _turn(i, call=i % 2 == 1))
        if i == 3:
            memory.retract(cid, [memory.window(cid)[-1].id])


def seed(store: Store, conversations: int = 1, turns: int = 6) -> list[ChatMemory]:
    """Plant every kind of data a copy must carry; returns the memories that wrote it (one per
    strategy, then one bound memory per scope)."""
    memories = [_memory(store, s) for s in STRATEGIES]
    for n, memory in enumerate(memories):
        for c in range(conversations):
            _converse(memory, f"conv-{n}-{c}", turns)
    memories[0].set_metadata("conv-0-0", title="Bare chat", tags=["ops"], owner="team")
    memories[1].fork("conv-1-0", "conv-1-0-retry", at=4)
    for user, app in SCOPES:
        scoped = memories[0].for_user(user, app)
        _converse(scoped, "chat", turns)
        scoped.set_metadata("chat", title=f"{user}'s chat", tags=["vip", user], priority=user)
        files = long_term_memory(store, "prefs", user=user, app=app)
        files.create("/memories/prefs.md", f"{user} likes tea\n")
        files.str_replace("/memories/prefs.md", "tea", "coffee")
        memories.append(scoped)
    bare = long_term_memory(store, "team")
    bare.create("/memories/notes.md", "one\n")
    bare.str_replace("/memories/notes.md", "one", "two")
    bare.create("/memories/todo.md", "ship it\n")
    return memories


def contents(store: Store) -> dict[str, Any]:
    """Everything a user can read of ``store``, in comparable form."""
    assert isinstance(store, Dumps)
    bare = _memory(store, STRATEGIES[1])
    found: dict[str, Any] = {"keys": sorted(store.conversations())}
    for key in found["keys"]:
        dump = store.dump(key)
        assert dump is not None, key
        found[f"checksum {key}"] = dump.checksum()
    for cid in sorted(k for k in found["keys"] if not k.startswith("~scope/")):
        found[cid] = _conversation(bare, cid)
    found["listing"] = bare.conversations()
    for user, app in SCOPES:
        scoped = bare.for_user(user, app)
        found[f"{user} listing"] = scoped.conversations()
        found[f"{user} vip"] = scoped.conversations(tag="vip")
        found[f"{user} chat"] = _conversation(scoped, "chat")
    namespaces = sorted(long_term_memory(store, "default").namespaces())
    found["namespaces"] = namespaces
    for namespace in namespaces:
        files = long_term_memory(store, stored_key(namespace))
        found[f"files {namespace}"] = [
            (e.path, files.read(e.path), [v.content for v in files.versions(e.path)])
            for e in sorted(files.files(), key=lambda e: e.path)
        ]
    return found


def _conversation(memory: ChatMemory, cid: str) -> tuple[Any, ...]:
    return (
        memory.history(cid, include_retracted=True),
        memory.window(cid),
        memory.model_window(cid),
        memory.compactions(cid),
        memory.search(cid, "bluefin").total,
    )


def copy(source: str, target: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``chat-memory copy --from SOURCE --to TARGET``; its report line."""
    assert main(["copy", "--from", source, "--to", target]) == 0
    return capsys.readouterr().err


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.redis_cluster
@pytest.mark.s3
def test_a_copy_through_every_store_and_back_keeps_everything(
    sqlite_url: str,
    postgres_url: str,
    redis_url: str,
    redis_cluster_url: str,
    s3_server_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    final_url = f"sqlite:///{tmp_path / 'final.db'}"
    chain = [sqlite_url, postgres_url, redis_url, redis_cluster_url, s3_server_url, final_url]
    with open_store(sqlite_url) as original:
        memories = seed(original)
        expected = contents(original)
        sample = expected["conv-0-0"]
        # every kind of stored data is there to be lost
        assert any(e.type == "summary" and e.archived for e in sample[0])
        assert any(e.type == "tool_call" for e in sample[0])
        assert all(expected[f"conv-{n}-0"][3] for n in range(len(STRATEGIES)))  # records
        assert any(e.retracted for e in sample[0]) and memories[1].history("conv-1-0-retry")
        assert len(expected["namespaces"]) == 3
    conversations = len(expected["keys"])
    for source, target in zip(chain, chain[1:]):
        report = copy(source, target, capsys)
        assert f"Copied {conversations} conversations" in report, (target, report)
        assert "3 long-term namespaces (7 file versions)" in report, (target, report)
        with open_store(target) as store:
            assert contents(store) == expected, target
    # a fork at a past seq of the moved conversation is the same fork of the original (its
    # created and last active times, and so its checksum, are its own: they start now)
    forks = []
    for url in (sqlite_url, final_url):
        with open_store(url) as store:
            found = []
            for n, settings in enumerate(STRATEGIES):
                memory = _memory(store, settings)
                memory.fork(f"conv-{n}-0", f"fork-{n}", at=6)
                found.append(_conversation(memory, f"fork-{n}"))
            alice = _memory(store, STRATEGIES[0]).for_user("alice", "support")
            alice.fork("chat", "chat-fork", at=5)
            found.append(_conversation(alice, "chat-fork"))
            forks.append(found)
    assert forks[0] == forks[1]
    assert [len(f[0]) for f in forks[0]] == [6, 6, 6, 6, 5]  # the history up to `at`
