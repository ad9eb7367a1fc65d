"""The ``chat-memory`` command line: the demo end to end in a subprocess (scripted stand-in,
embedded default store under a temporary HOME), inspection commands against its SQLite file,
``nodes --json``, the chat REPL, and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from chat_memory import ChatMemory, Event, open_store
from chat_memory.host.cli import build_parser, main

EXECUTABLE = Path(sys.executable).with_name("chat-memory")
DEMO_ID = "five facts ../*%"


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CHAT_MEMORY_URL")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"))
    return env


def cli(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    assert EXECUTABLE.exists(), f"{EXECUTABLE} is missing: pip install -e '.[dev]'"
    return subprocess.run(
        [str(EXECUTABLE), *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def seed(url: str, cid: str, turns: int) -> None:
    """Write ``turns`` user/assistant turns with no compaction."""
    with open_store(url) as store:
        memory = ChatMemory(store)
        for n in range(turns):
            memory.add(cid, [Event.user(f"question {n}"), Event.assistant(f"answer {n}")])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo, run once on the embedded default store of a fresh HOME."""
    home = tmp_path_factory.mktemp("home")
    env = clean_env(home)
    result = cli("demo", "-c", DEMO_ID, env=env)
    return result, env, home / "data" / "chat-memory" / "chat-memory.db"


def test_demo_runs_end_to_end_with_the_scripted_stand_in(demo):
    result, _, db = demo
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "scripted stand-in model (no ANTHROPIC_API_KEY set)" in out
    assert f"store:        sqlite:///{db}" in out and db.exists()
    assert "memory:       turn_window, max turns 3, conversation_search on" in out
    assert out.count(" you: ") + out.count("] you:") >= 8
    assert "window size:      9 events in 3 turns" in out
    assert "archived events:  10" in out
    assert 'search happened:  yes, conversation_search {"keyword": "first fact"}' in out
    assert "found the first fact (Bluefin): yes" in out
    assert "code-named Bluefin" in out.split("[8] you:")[1]


def test_window_history_search_stats_on_the_demo_store(demo):
    _, env, db = demo
    url = f"sqlite:///{db}"
    window = cli("--url", url, "window", "-c", DEMO_ID, env=env)
    assert window.returncode == 0, window.stderr
    assert f"Window of {DEMO_ID!r}: 9 events, 3 turns, 10 archived" in window.stdout
    rows = [line for line in window.stdout.splitlines() if line[:5].strip().isdigit()]
    assert (
        len(rows) == 9 and "tool_call" in window.stdout and "conversation_search" in window.stdout
    )
    total = sum(int(line.split()[2]) for line in rows)
    assert f"total tokens: {total}" in window.stdout and total > 0

    history = cli("history", "--url", url, "-c", DEMO_ID, env=env)
    assert history.returncode == 0, history.stderr
    assert "19 events, 10 archived" in history.stdout
    assert (
        "archived  user         First fact: our new service is code-named Bluefin."
        in history.stdout
    )

    search = cli("search", "BLUEFIN", "--url", url, "-c", DEMO_ID, env=env)
    assert search.returncode == 0, search.stderr
    first = search.stdout.splitlines()[1]
    assert first.startswith("- [#1 ") and "archived] First fact" in first
    any_mode = cli(
        "search", "teammate deadline", "--mode", "any", "--url", url, "-c", DEMO_ID, env=env
    )
    assert "Fourth fact" in any_mode.stdout and "Fifth fact" in any_mode.stdout
    past = cli("search", "bluefin", "--page", "5", "--url", url, "-c", DEMO_ID, env=env)
    assert "past the last page" in past.stdout

    stats = cli("stats", "-c", DEMO_ID, env=env)  # the embedded default store, no --url
    assert (
        "archived_events:       10" in stats.stdout and "turns:                 3" in stats.stdout
    )
    compact = cli("compact", "-c", DEMO_ID, "--template", "compacting-chat", env=env)
    assert compact.returncode == 0 and "turn_window: nothing to compact" in compact.stdout


def test_nodes_json_parses_and_holds_every_definition(tmp_path):
    result = cli("nodes", "--json", env=clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    definitions = json.loads(result.stdout)
    types = {d["type"] for d in definitions}
    for name in (
        "chatMemory",
        "jdbcChatMemory",
        "redisChatMemory",
        "awsS3ChatMemory",
        "inMemoryChatMemory",
    ):
        assert {f"{name}/v1", f"{name}/v2"} <= types
    for definition in definitions:
        Draft202012Validator.check_schema(definition["parameters"])


def test_chat_repl_uses_the_same_runtime(tmp_path):
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    messages = "\n".join(
        [
            "First fact: the code name is Bluefin.",
            "hello",
            "two",
            "three",
            "What was the first fact?",
            "/quit",
            "ignored",
        ]
    )
    result = cli("chat", "--url", url, "-c", "repl", env=clean_env(tmp_path), stdin=messages + "\n")
    assert result.returncode == 0, result.stderr
    assert "model: scripted stand-in model" in result.stdout
    replies = [line for line in result.stdout.splitlines() if line.startswith("assistant: ")]
    assert len(replies) == 5 and "the code name is Bluefin" in replies[-1]
    history = cli("history", "--url", url, "-c", "repl", env=clean_env(tmp_path))
    assert "ignored" not in history.stdout and "archived" in history.stdout


def test_templates_list_and_show(capsys):
    assert main(["templates"]) == 0
    assert "compacting-chat" in capsys.readouterr().out
    assert main(["templates", "show", "compacting-chat"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "Chat that compacts its history"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--url", "bogus://x", "window"], "store URL scheme ('bogus') is not supported"),
        (["--url", "memory://", "search", "   "], "keyword ('   ') must be a non-blank string"),
        (["--url", "memory://", "search", "x", "--page", "0"], "page (0) must be a whole number"),
        (["templates", "show", "nope"], "unknown template 'nope'"),
        (["templates", "show"], "templates show needs a template name"),
        (["--url", "memory://", "--template", "nope", "window"], "unknown template 'nope'"),
        (["--url", "memory://", "window", "-c", ""], "Conversation ID ('') must not be blank"),
        (["--url", "memory://", "demo", "-c", ""], "Conversation ID ('') must not be blank"),
    ],
)
def test_usage_and_configuration_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("chat-memory: error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv", [["frobnicate"], ["search"], ["search", "x", "--mode", "regex"], [], ["nodes", "--xml"]]
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage: chat-memory" in capsys.readouterr().err


def test_a_failing_store_exits_1(tmp_path, capsys):
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database file " * 200)
    assert main(["--url", f"sqlite:///{broken}", "history", "-c", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("chat-memory: error: ") and err.count("\n") == 1


def test_help_everywhere(capsys):
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(commands) == {
        *(
            "demo",
            "chat",
            "list",
            "window",
            "history",
            "search",
            "compact",
            "stats",
            "clear",
            "nodes",
            "templates",
            "memory",
            "fork",
            "export",
            "import",
            "copy",
            "forget",
            "sweep",
            "ui",
        )
    }
    for argv in [["--help"], *([name, "--help"] for name in commands)]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
        assert "usage: chat-memory" in capsys.readouterr().out


def test_options_before_or_after_the_command(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    seed(url, "a", turns=1)
    assert main(["--url", url, "-c", "a", "stats"]) == 0
    before = capsys.readouterr().out
    assert main(["stats", "--url", url, "-c", "a"]) == 0
    assert capsys.readouterr().out == before and f"store:                 {url}" in before


def test_memory_options_and_path_go_in_any_order(tmp_path, capsys):
    from chat_memory.longterm import long_term_memory

    url = f"sqlite:///{tmp_path}/m.db"
    long_term_memory(url, "ada").create("/memories/notes/preferences.md", "- tea\n")
    path = "/memories/notes/preferences.md"
    for argv, shown in (
        (["memory", "show", "--namespace", "ada", path], "- tea\n"),  # the documented form
        (["memory", "show", path, "--namespace", "ada"], "- tea\n"),
        (["memory", "--namespace", "ada", "show", path], "- tea\n"),
        (["memory", "-n", "ada", "versions", path], "rev 1 "),
        (["memory", "list", "-n", "ada", "/memories/notes"], path),
    ):
        assert main(["--url", url, *argv]) == 0, argv
        assert shown in capsys.readouterr().out, argv
    with pytest.raises(SystemExit) as usage_error:  # argparse's own exit for bad usage
        main(["--url", url, "memory", "show", "--namespace", "ada", path, "extra"])
    assert usage_error.value.code == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err


def test_chat_with_a_per_user_template_needs_user_and_names_it(tmp_path, capsys, monkeypatch):
    import io

    from chat_memory.longterm import long_term_memory

    url = f"sqlite:///{tmp_path}/chat.db"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("Remember: I prefer tea.\n"))
    assert main(["--url", url, "--template", "remembering-chat", "chat", "-c", "c1"]) == 2
    err = capsys.readouterr().err
    assert "pass --user ID" in err and "memory_tool_1.namespace" in err and "userId" in err
    assert not (tmp_path / "chat.db").exists()  # refused before anything was made
    assert (
        main(["--url", url, "--template", "remembering-chat", "chat", "--user", " ", "-c", "c1"])
        == 2
    )
    assert "--user (' ') must not be blank" in capsys.readouterr().err

    assert (
        main(
            ["--url", url, "--template", "remembering-chat", "chat", "--user", "alice", "-c", "c1"]
        )
        == 0
    )
    assert "user 'alice'" in capsys.readouterr().out
    assert "tea" in long_term_memory(url, "alice").read("/memories/preferences.md")
    assert long_term_memory(url, "bob").files() == []
    # a template without per-user fields runs without --user, as before
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert main(["--url", url, "chat", "-c", "c2", "--scripted"]) == 0


def test_search_pages_count_from_1_in_the_cli_and_from_0_in_the_api(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/s.db"
    seed(url, "c", 25)  # "question 0" … "question 24": 25 hits for "question"
    assert (
        main(
            [
                "--url",
                url,
                "search",
                "question",
                "-c",
                "c",
                "--page",
                "2",
                "--page-size",
                "10",
                "--json",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    with open_store(url) as store:
        page = ChatMemory(store).search("c", "question", page=1, page_size=10)
    assert (shown["page"], page.page, page.number, page.pages) == (2, 1, 2, 3)
    assert [h["seq"] for h in shown["hits"]] == [h.seq for h in page.hits]
