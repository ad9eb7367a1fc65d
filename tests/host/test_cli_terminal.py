"""The command line and the operator's terminal: stored control sequences (screen clear,
colours, window title, hyperlinks, bidi overrides, C1 controls) are printed as visible
escapes by every command, ``--json`` stays valid JSON of the stored text, and the embedded
default SQLite file and folder are created owner-only."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, open_store
from chat_memory.backends import default_path
from chat_memory.host.cli import main
from chat_memory.host.cli_text import json_text, terminal_text
from chat_memory.longterm import long_term_memory

# what a hostile user, model or tool may have written
CLEAR, TITLE, LINK = (
    "\x1b[2J\x1b[H",
    "\x1b]0;pwned\x07",
    "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\",
)
HOSTILE = f"look{CLEAR}{TITLE}{LINK}\x1b[31mred\x9b31m c1 \u202eexe.txt\u2066iso\u2069 del\x7f cr\rover bell\x07"
# what must never reach a terminal: C0 but tab and newline, DEL, C1, bidi overrides and isolates
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CID = "term"
NAMESPACE = "ops"


@pytest.fixture
def url(tmp_path) -> Iterator[str]:
    """A SQLite store with the hostile text in every kind of event, a compaction error, and
    a long-term memory file."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    with open_store(url) as store:
        memory = ChatMemory(store)
        memory.add(CID, [Event.user(f"question {HOSTILE}"), Event.assistant(f"answer {HOSTILE}")])
        memory.add(
            CID,
            [
                Event.tool_call(f"tool{TITLE}", {"q": HOSTILE}, call_id="c1"),
                Event.tool_result("c1", HOSTILE),
            ],
        )
        memory.add(CID, [Event.user("next"), Event.assistant(HOSTILE)])
        store.record_compaction_error(CID, f"summarizer said {HOSTILE}")
        long_term_memory(store, NAMESPACE).create(
            "/memories/notes.md", f"line one\n{HOSTILE}\nline three\n"
        )
    yield url


def run(argv: list[str], capsys, stdin: str = "") -> tuple[int, str, str]:
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(argv)
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, out, err


COMMANDS = [
    ["window", "-c", CID],
    ["history", "-c", CID],
    ["search", "look", "-c", CID],
    ["search", "look", "-c", CID, "--mode", "any"],
    ["stats", "-c", CID],
    ["list"],
    ["compact", "-c", CID, "--strategy", "turn_window", "--max-turns", "1"],
    ["memory", "list", "--namespace", NAMESPACE],
    ["memory", "show", "/memories/notes.md", "--namespace", NAMESPACE],
    ["memory", "versions", "/memories/notes.md", "--namespace", NAMESPACE],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_prints_stored_control_sequences_as_escapes(url, capsys, command):
    code, out, err = run(["--url", url, *command], capsys)
    assert code == 0, err
    assert not UNSAFE.search(out + err), repr(out + err)


@pytest.mark.parametrize("command", ["window", "history", "search"])
def test_the_escapes_are_visible(url, capsys, command):
    argv = ["--url", url, command, "-c", CID] + (["look"] if command == "search" else [])
    _, out, _ = run(argv, capsys)
    assert "\\x1b[2J" in out and "\\x07" in out and "\\u202eexe.txt" in out and "\\x9b31m" in out


def test_memory_show_keeps_the_file_lines(url, capsys):
    _, out, _ = run(
        ["--url", url, "memory", "show", "/memories/notes.md", "--namespace", NAMESPACE], capsys
    )
    assert out.startswith("line one\nlook\\x1b[2J") and out.endswith("bell\\x07\nline three\n")


def test_chat_prints_the_model_reply_escaped(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    code, out, err = run(
        ["--url", url, "chat", "-c", "talk", "--scripted"], capsys, stdin=f"hi {HOSTILE}\n/quit\n"
    )
    assert code == 0 and not UNSAFE.search(out + err), repr(out)


def test_errors_print_escaped(url, capsys):
    code, out, err = run(["--url", url, "history", "-c", f"nobody{CLEAR}"], capsys)
    assert code == 1 and "nobody" in err and not UNSAFE.search(out + err)


@pytest.mark.parametrize(
    "command", [["window", "-c", CID], ["history", "-c", CID], ["search", "look", "-c", CID]]
)
def test_json_output_is_valid_json_of_the_stored_text_with_no_raw_controls(url, capsys, command):
    code, out, _ = run(["--url", url, *command, "--json"], capsys)
    assert code == 0 and not UNSAFE.search(out)
    data = json.loads(out)
    texts = [e["content"] for e in data.get("events", [])] + [
        h["content"] for h in data.get("hits", [])
    ]
    assert any(HOSTILE in str(text) for text in texts)


@given(st.text())
def test_json_escaping_keeps_json_valid_and_values_equal(text):
    dumped = json_text(json.dumps({"k": text, text: [text]}, ensure_ascii=False))
    assert json.loads(dumped) == {"k": text, text: [text]} and not UNSAFE.search(dumped)


@given(st.text())
def test_terminal_text_leaves_nothing_unsafe_and_changes_nothing_safe(text):
    shown = terminal_text(text)
    assert not UNSAFE.search(shown)
    if not UNSAFE.search(text):
        assert shown == text


# -- the embedded default SQLite file ------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_the_default_sqlite_file_and_folder_are_owner_only(
    tmp_path, monkeypatch, capsys, umask_022
):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("CHAT_MEMORY_URL", raising=False)
    code, _, err = run(["chat", "-c", "c", "--scripted"], capsys, stdin="hello\n/quit\n")
    assert code == 0, err
    database = default_path()
    assert database.is_relative_to(tmp_path)
    assert mode(database.parent) == 0o700 and mode(database) == 0o600
    with open_store() as store:  # the WAL files exist while a connection is open
        ChatMemory(store).add("c", Event.user("more"))
        companions = [Path(f"{database}{suffix}") for suffix in ("-wal", "-shm")]
        assert all(p.exists() for p in companions)
        assert [mode(p) for p in companions] == [0o600, 0o600]


def test_the_default_file_is_owner_only_when_the_library_creates_it(
    tmp_path, monkeypatch, umask_022
):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("CHAT_MEMORY_URL", raising=False)
    with open_store() as store:
        ChatMemory(store).add("c", Event.user("hi"))
    assert mode(default_path().parent) == 0o700 and mode(default_path()) == 0o600


def test_a_file_the_caller_names_keeps_the_umask(tmp_path, monkeypatch, umask_022):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    named = tmp_path / "shared" / "team.db"
    with open_store(f"sqlite:///{named}") as store:
        ChatMemory(store).add("c", Event.user("hi"))
    assert mode(named) == 0o644 and mode(named.parent) == 0o755
