"""The command line's fork, export, import, copy, list --user/--tag, forget and sweep: on
memory:// stores shared across the commands of one test (each URL names one real in-memory
store for the test's duration), and fork, export and copy on a SQLite store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends.base import Store
from chat_memory.host import cli_session, cli_transfer
from chat_memory.host.cli import main
from chat_memory.longterm import long_term_memory


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> dict[str, Store]:
    """``memory://a``, ``memory://b``…: one store per URL for the whole test (a memory://
    URL opens a fresh store each time, which would leave every command an empty one)."""
    opened: dict[str, Store] = {}

    def shared(url: str, **options: Any) -> Store:
        if not url.startswith("memory://"):
            return open_store(url, **options)
        if url not in opened:
            opened[url] = open_store("memory://", **options)
        return opened[url]

    monkeypatch.setattr(cli_session, "open_store", shared)
    monkeypatch.setattr(cli_transfer, "open_store", shared)
    return opened


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


def _seed(store: Store) -> ChatMemory:
    memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=2))
    for i in range(4):
        memory.add("conv", [Event.user(f"question {i}"), Event.assistant(f"answer {i}")])
    alice = memory.for_user("alice")
    alice.add("chat", [Event.user("hello from alice")])
    alice.set_metadata("chat", title="Alice's chat", tags=["vip"])
    long_term_memory(store, "prefs", user="alice").create("/memories/p.md", "tea\n")
    return memory


def test_fork_at_a_seq_through_the_command_line(stores: dict[str, Store], run: Run) -> None:
    memory = _seed(stores.setdefault("memory://a", open_store("memory://")))
    code, out, _ = run("fork", "--url", "memory://a", "-c", "conv", "branch", "--at", "4")
    assert code == 0 and "into 'branch': 4 events" in out
    assert [e.content for e in memory.window("branch")][-1] == "answer 1"
    code, _, err = run("fork", "--url", "memory://a", "-c", "conv", "branch")
    assert code == 2 and "'branch'" in err and "stored already" in err
    code, _, _ = run("fork", "--url", "memory://a", "-c", "chat", "chat-2", "--user", "alice")
    assert code == 0 and memory.for_user("alice").window("chat-2")[0].content == "hello from alice"


def test_export_then_import_moves_everything(
    stores: dict[str, Store], run: Run, tmp_path: Path
) -> None:
    source = _seed(stores.setdefault("memory://a", open_store("memory://")))
    dump = tmp_path / "dump.jsonl"
    code, out, err = run("export", "--url", "memory://a", "--out", str(dump))
    assert code == 0 and out == "" and "Exported 2 conversations" in err
    assert "1 long-term namespaces" in err
    assert json.loads(dump.read_text().splitlines()[0]) == {"format": "chat-memory", "version": 1}
    code, _, err = run("import", "--url", "memory://b", str(dump))
    assert code == 0 and "Imported 2 conversations" in err
    target = ChatMemory(stores["memory://b"], MemoryConfig())
    assert target.history("conv") == source.history("conv")
    assert target.compactions("conv") == source.compactions("conv")
    assert target.for_user("alice").conversations()[0].title == "Alice's chat"
    code, _, err = run("import", "--url", "memory://b", str(dump))
    assert code == 0 and "2 already there (verified)" in err


def test_copy_resumes_and_lists_by_user_and_tag(stores: dict[str, Store], run: Run) -> None:
    _seed(stores.setdefault("memory://a", open_store("memory://")))
    code, _, err = run("copy", "--from", "memory://a", "--to", "memory://b")
    assert code == 0 and "Copied 2 conversations" in err
    code, _, err = run("copy", "--from", "memory://a", "--to", "memory://b")
    assert code == 0 and "Copied 0 conversations" in err and "2 already there" in err
    code, out, _ = run("list", "--url", "memory://b", "--user", "alice", "--tag", "vip", "--json")
    assert code == 0 and [c["title"] for c in json.loads(out)] == ["Alice's chat"]
    code, out, _ = run("list", "--url", "memory://b", "--user", "bob")
    assert code == 0 and "No conversations." in out


def test_forget_and_sweep_through_the_command_line(stores: dict[str, Store], run: Run) -> None:
    memory = _seed(stores.setdefault("memory://a", open_store("memory://")))
    code, _, err = run("forget", "--url", "memory://a", "--user", "alice")
    assert code == 2 and "--yes" in err
    code, out, _ = run("forget", "--url", "memory://a", "--user", "alice", "--yes", "--json")
    receipt = json.loads(out)
    assert code == 0 and receipt["conversations"] == 1 and receipt["long_term_files"] == 1
    assert memory.for_user("alice").window("chat") == []
    code, out, _ = run("sweep", "--url", "memory://a", "--retention-seconds", "3600", "--json")
    assert code == 0 and json.loads(out)["conversations"] == 0
    assert memory.window("conv")


def test_the_sqlite_store_forks_exports_and_copies_through_the_command_line(
    stores: dict[str, Store], run: Run, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    store = open_store(url)
    try:
        memory = _seed(store)
        code, out, _ = run("fork", "--url", url, "-c", "conv", "branch", "--at", "4")
        assert code == 0 and "branch" in out
        assert [e.seq for e in memory.window("branch")] == [1, 2, 3, 4]
        code, out, _ = run("export", "--url", url)
        assert code == 0 and out.startswith('{"format":"chat-memory","version":1')
        code, _, _ = run("copy", "--from", url, "--to", "memory://b")
        assert code == 0
        copied = ChatMemory(stores["memory://b"], MemoryConfig())
        assert copied.history("branch") == memory.history("branch")
        assert copied.for_user("alice").window("chat") == memory.for_user("alice").window("chat")
    finally:
        store.close()


def test_copy_never_shows_a_password_of_its_urls(run: Run) -> None:
    code, _, err = run(
        "copy", "--from", "redis://:hunter2secret@127.0.0.1:1/0", "--to", "memory://"
    )
    assert code != 0 and err.startswith("chat-memory: error:")
    assert "hunter2secret" not in err
