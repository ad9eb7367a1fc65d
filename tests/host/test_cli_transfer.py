"""The command line's fork, export, import, copy, list --user/--tag, forget and sweep, each
command on real SQLite files named by URL (the store every user starts on)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chat_memory import ChatMemory, Event, MemoryConfig, open_store
from chat_memory.backends.base import Store
from chat_memory.host.cli import main
from chat_memory.longterm import long_term_memory

Url = Callable[[str], str]


@pytest.fixture
def url(tmp_path: Path) -> Url:
    """A SQLite file URL per name: each command opens the file again, as a user's would."""
    return lambda name: f"sqlite:///{tmp_path / name}.db"


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


def test_fork_at_a_seq_through_the_command_line(url: Url, run: Run) -> None:
    with open_store(url("a")) as store:
        _seed(store)
    code, out, _ = run("fork", "--url", url("a"), "-c", "conv", "branch", "--at", "4")
    assert code == 0 and "into 'branch': 4 events" in out
    code, _, err = run("fork", "--url", url("a"), "-c", "conv", "branch")
    assert code == 2 and "'branch'" in err and "stored already" in err
    code, _, _ = run("fork", "--url", url("a"), "-c", "chat", "chat-2", "--user", "alice")
    assert code == 0
    with open_store(url("a")) as store:
        memory = ChatMemory(store, MemoryConfig())
        assert [e.seq for e in memory.window("branch")] == [1, 2, 3, 4]
        assert [e.content for e in memory.window("branch")][-1] == "answer 1"
        assert memory.for_user("alice").window("chat-2")[0].content == "hello from alice"
        assert memory.window("chat-2") == []  # the fork stayed in alice's scope


def test_export_then_import_moves_everything(url: Url, run: Run, tmp_path: Path) -> None:
    with open_store(url("a")) as store:
        _seed(store)
    dump = tmp_path / "dump.jsonl"
    code, out, err = run("export", "--url", url("a"), "--out", str(dump))
    assert code == 0 and out == "" and "Exported 2 conversations" in err
    assert "1 long-term namespaces" in err
    assert json.loads(dump.read_text().splitlines()[0]) == {"format": "chat-memory", "version": 1}
    code, _, err = run("import", "--url", url("b"), str(dump))
    assert code == 0 and "Imported 2 conversations" in err
    with open_store(url("a")) as a, open_store(url("b")) as b:
        source, target = ChatMemory(a, MemoryConfig()), ChatMemory(b, MemoryConfig())
        assert target.history("conv") == source.history("conv")
        assert target.compactions("conv") == source.compactions("conv")
        assert target.for_user("alice").conversations() == source.for_user("alice").conversations()
        files = long_term_memory(b, "prefs", user="alice")
        assert files.read("/memories/p.md") == "tea\n"
    code, _, err = run("import", "--url", url("b"), str(dump))
    assert code == 0 and "2 already there (verified)" in err


def test_export_to_standard_output_imports_from_standard_input(
    url: Url, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(url("a")) as store:
        _seed(store)
    code, out, _ = run("export", "--url", url("a"))
    assert code == 0 and out.startswith('{"format":"chat-memory","version":1')
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    code, _, err = run("import", "--url", url("b"), "-")
    assert code == 0 and "Imported 2 conversations" in err
    code, _, err = run("import", "--url", url("c"), "missing.jsonl")
    assert code == 2 and "cannot read missing.jsonl" in err


def test_copy_resumes_and_lists_by_user_and_tag(url: Url, run: Run) -> None:
    with open_store(url("a")) as store:
        _seed(store)
    code, _, err = run("copy", "--from", url("a"), "--to", url("b"))
    assert code == 0 and "Copied 2 conversations" in err
    code, _, err = run("copy", "--from", url("a"), "--to", url("b"))
    assert code == 0 and "Copied 0 conversations" in err and "2 already there" in err
    code, out, _ = run("list", "--url", url("b"), "--user", "alice", "--tag", "vip", "--json")
    assert code == 0 and [c["title"] for c in json.loads(out)] == ["Alice's chat"]
    code, out, _ = run("list", "--url", url("b"), "--user", "alice", "--tag", "other")
    assert code == 0 and "No conversations." in out
    code, out, _ = run("list", "--url", url("b"), "--user", "bob")
    assert code == 0 and "No conversations." in out
    with open_store(url("b")) as b:
        ChatMemory(b, MemoryConfig()).add("conv", Event.user("only on the target"))
    code, _, err = run("copy", "--from", url("a"), "--to", url("b"))
    assert code == 2 and "'conv'" in err and "--replace" in err
    code, _, err = run("copy", "--from", url("a"), "--to", url("b"), "--replace")
    assert code == 0 and "Copied 1 conversations" in err


def test_forget_and_sweep_through_the_command_line(url: Url, run: Run) -> None:
    with open_store(url("a")) as store:
        _seed(store)
    code, _, err = run("forget", "--url", url("a"), "--user", "alice")
    assert code == 2 and "--yes" in err
    code, out, _ = run("forget", "--url", url("a"), "--user", "alice", "--yes", "--json")
    receipt = json.loads(out)
    assert code == 0 and receipt["conversations"] == 1 and receipt["long_term_files"] == 1
    code, out, _ = run("sweep", "--url", url("a"), "--retention-seconds", "3600", "--json")
    assert code == 0 and json.loads(out)["conversations"] == 0
    code, out, _ = run("forget", "--url", url("a"), "-c", "conv", "--yes")
    assert code == 0 and "Erased conversation 'conv'" in out
    with open_store(url("a")) as store:
        memory = ChatMemory(store, MemoryConfig())
        assert memory.for_user("alice").window("chat") == []
        assert memory.window("conv") == [] and store.conversations() == []
    code, out, _ = run("sweep", "--url", url("never"), "--retention-seconds", "60")
    assert code == 0 and "does not exist yet" in out


def test_copy_from_a_missing_sqlite_file_creates_nothing(
    url: Url, run: Run, tmp_path: Path
) -> None:
    code, _, err = run("copy", "--from", url("typo"), "--to", url("b"))
    assert code == 1 and "typo.db does not exist" in err
    assert not (tmp_path / "typo.db").exists() and not (tmp_path / "b.db").exists()


def test_copy_never_shows_a_password_of_its_urls(run: Run) -> None:
    code, _, err = run(
        "copy", "--from", "redis://:hunter2secret@127.0.0.1:1/0", "--to", "memory://"
    )
    assert code != 0 and err.startswith("chat-memory: error:")
    assert "hunter2secret" not in err
