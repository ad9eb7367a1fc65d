"""The command line as an operator's tool: credentials never shown, compaction only with the
strategy the operator names, one-line errors instead of tracebacks (a data folder that cannot
be made, a closed pipe), unknown conversations named, read commands that create nothing,
``list``, ``clear`` and ``--json``."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from chat_memory import ChatMemory, Event, StorageError, open_store
from chat_memory.host import cli_session
from chat_memory.host.cli import main
from tests.host.test_cli import EXECUTABLE, clean_env, cli, seed


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    assert err.startswith("chat-memory: error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def url(tmp_path) -> str:
    """A SQLite store holding conversation 'conv' (5 turns, nothing archived)."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    seed(url, "conv", turns=5)
    return url


# -- credentials -------------------------------------------------------------------------------


@pytest.mark.postgres
def test_headers_and_json_show_the_postgres_url_without_its_password(postgres_url, capsys):
    secret_url = postgres_url.replace("postgres@", "postgres:hunter2@", 1)
    assert secret_url != postgres_url  # trust auth: the server never asks for the password
    seed(secret_url, "pg", turns=1)
    shown = secret_url.replace(":hunter2@", ":***@")
    code, out, _ = run(["--url", secret_url, "stats", "-c", "pg"], capsys)
    assert code == 0 and f"store:                 {shown}" in out and "hunter2" not in out
    code, out, _ = run(["--url", secret_url, "stats", "-c", "pg", "--json"], capsys)
    assert json.loads(out)["store"] == shown
    sys.stdin = io.StringIO("/quit\n")
    code, out, err = run(["--url", secret_url, "chat", "-c", "pg"], capsys)
    assert code == 0 and f"store {shown};" in out and "hunter2" not in out + err


def test_demo_header_masks_the_password(tmp_path, monkeypatch, capsys):
    # open_store is the only part that would use the password: stand in for a password-protected server
    monkeypatch.setattr(cli_session, "open_store", lambda url: open_store("memory://"))
    code, out, _ = run(["--url", "redis://:secretpw@cache:6379/0", "demo", "-c", "d"], capsys)
    assert code == 0 and "store:        redis://:***@cache:6379/0" in out and "secretpw" not in out


def test_errors_and_logs_never_echo_a_password(monkeypatch, capsys):
    secret_url = "postgresql+psycopg://postgres:hunter2@db:5432/app?sslpassword=pem"

    def failing(url):
        logging.getLogger("chat_memory.engine").warning("retrying: %s said no", url)
        raise StorageError(f"could not reach {url} (timeout)")

    monkeypatch.setattr(cli_session, "open_store", failing)
    code, _, err = run(["--url", secret_url, "stats"], capsys)
    assert (
        code == 1
        and "could not reach postgresql+psycopg://postgres:***@db:5432/app?sslpassword=*** (timeout)"
        in err
    )
    assert (
        "retrying: postgresql+psycopg://postgres:***@db:5432/app?sslpassword=*** said no\n" in err
    )
    assert "hunter2" not in err and "pem" not in err


def test_a_missing_driver_names_the_extra_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(
        sys.modules, "psycopg", None
    )  # as if chat-memory[postgres] were not installed
    code, _, err = run(["--url", "postgresql+psycopg://u:pw@127.0.0.1:1/db", "stats"], capsys)
    assert (
        code == 2
        and "pip install 'chat-memory[postgres]'" in one_line_error(err)
        and ":pw@" not in err
    )


# -- compact only with a chosen strategy -----------------------------------------------------


def test_compact_without_a_chosen_strategy_is_refused_and_changes_nothing(url, capsys):
    code, _, err = run(["--url", url, "compact", "-c", "conv"], capsys)
    assert code == 2
    assert (
        "--strategy NAME" in one_line_error(err)
        and "--template NAME" in err
        and "turn_window" in err
    )
    with open_store(url) as store:
        assert ChatMemory(store).stats("conv").archived_events == 0


def test_compact_with_a_strategy_and_its_limits(url, capsys):
    code, out, _ = run(
        ["--url", url, "compact", "-c", "conv", "--strategy", "turn_window", "--max-turns", "2"],
        capsys,
    )
    assert code == 0 and out == "turn_window: archived 6 events (through seq 6)\n"
    code, out, _ = run(
        [
            "--url",
            url,
            "compact",
            "-c",
            "conv",
            "--strategy",
            "sliding_window",
            "--max-events",
            "2",
        ],
        capsys,
    )
    assert code == 0 and out.startswith("sliding_window: archived 2 events")
    with open_store(url) as store:
        assert ChatMemory(store).stats("conv").active_events == 2


def test_compact_with_an_explicit_template(url, capsys):
    code, out, _ = run(
        ["--url", url, "--template", "compacting-chat", "compact", "-c", "conv"], capsys
    )
    assert code == 0 and out.startswith(
        "turn_window: archived 4 events"
    )  # the template keeps 3 turns


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy", "turn_window"], "compact --strategy turn_window needs --max-turns N"),
        (
            ["--strategy", "recursive_summarization"],
            "needs --max-events N and --max-events-to-keep N",
        ),
        (
            [
                "--strategy",
                "recursive_summarization",
                "--max-events",
                "5",
                "--max-events-to-keep",
                "2",
            ],
            "needs --summarizer-model NAME",
        ),
        (
            ["--strategy", "turn_window", "--max-turns", "2", "--max-events", "3"],
            "--max-events does not apply to turn_window",
        ),
        (
            ["--strategy", "none", "--max-turns", "2"],
            "--max-turns does not apply to none (it uses: no limits)",
        ),
        (
            ["--strategy", "bogus"],
            "Compaction strategy ('bogus') must be one of 'none', 'sliding_window'",
        ),
        (["--strategy", "turn_window", "--max-turns", "0"], "Max turns (0) must be greater than 0"),
        (
            [
                "--strategy",
                "recursive_summarization",
                "--max-events",
                "5",
                "--max-events-to-keep",
                "10",
                "--summarizer-model",
                "m",
            ],
            "Max events (5) must be greater than max events to keep (10)",
        ),
        (["--max-turns", "2"], "--max-turns needs --strategy NAME"),
        (
            ["--strategy", "turn_window", "--max-turns", "2", "--template", "compacting-chat"],
            "not both",
        ),
    ],
)
def test_compact_flags_are_checked_before_anything_runs(url, flags, message, capsys):
    code, _, err = run(["--url", url, "compact", "-c", "conv", *flags], capsys)
    assert code == 2 and message in one_line_error(err)


# -- data folder and closed pipes ------------------------------------------------------------


@pytest.mark.parametrize("data_home", ["a-file", "/proc/chat-memory-test"])
def test_a_data_folder_that_cannot_be_made_is_one_line(tmp_path, data_home):
    (tmp_path / "a-file").write_text("not a folder")
    env = {
        **clean_env(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / data_home),
    }  # absolute paths stay as given
    result = cli("demo", env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "the data folder" in one_line_error(result.stderr) and "cannot be created" in result.stderr
    )
    assert "XDG_DATA_HOME or CHAT_MEMORY_URL" in result.stderr


@pytest.mark.parametrize("argv", [["nodes", "--json"], ["history", "-c", "conv"]])
def test_output_closed_early_exits_quietly(tmp_path, url, argv):
    read_end, write_end = os.pipe()
    os.close(
        read_end
    )  # closed before the command writes anything: every write fails, deterministically
    try:
        result = subprocess.run(
            [str(EXECUTABLE), "--url", url, *argv],
            env=clean_env(tmp_path),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141 and result.stderr == ""


# -- unknown conversations, read commands create nothing ----------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["window"],
        ["history"],
        ["search", "x"],
        ["stats"],
        ["clear", "--yes"],
        ["compact", "--strategy", "turn_window", "--max-turns", "1"],
    ],
)
def test_an_unknown_conversation_is_named(url, argv, capsys):
    code, out, err = run(["--url", url, *argv, "-c", "convv"], capsys)
    assert code == 1 and out == ""
    assert "unknown conversation 'convv'" in one_line_error(err) and "see: chat-memory list" in err


@pytest.mark.parametrize(
    "argv", [["window"], ["stats", "--json"], ["search", "x"], ["list"], ["clear", "--yes"]]
)
def test_read_commands_create_no_files_or_folders(tmp_path, argv, capsys, monkeypatch):
    monkeypatch.delenv("CHAT_MEMORY_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    explicit = f"sqlite:///{tmp_path / 'sub' / 'chat.db'}"
    for url_args in ([], ["--url", explicit]):
        code, out, err = run([*url_args, *argv, "-c", "c"], capsys)
        if argv == ["list"]:
            assert code == 0 and "(the file does not exist yet): 0 in all" in out
        else:
            assert code == 1 and "does not exist yet" in one_line_error(err)
            assert ("chat-memory demo or chat creates it" in err) == (not url_args)
    assert list(tmp_path.iterdir()) == []


# -- list, clear, --json ---------------------------------------------------------------------------


def test_list_is_sorted_and_paged(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    for cid in ["b", "a", "c 3", "d"]:
        seed(url, cid, turns=1)
    code, out, _ = run(["--url", url, "list", "--page-size", "3"], capsys)
    assert code == 0 and out.splitlines()[1:] == [
        "a",
        "b",
        "c 3",
        "(page 1: 1-3 of 4)",
        "more: chat-memory list --page 2",
    ]
    assert out.splitlines()[0] == f"Conversations in {url}: 4 in all"
    code, out, _ = run(["--url", url, "list", "--page-size", "3", "--page", "2", "--json"], capsys)
    assert json.loads(out) == {
        "store": url,
        "total": 4,
        "page": 2,
        "page_size": 3,
        "has_more": False,
        "conversations": ["d"],
    }
    code, out, _ = run(["--url", url, "list", "--page", "9"], capsys)
    assert code == 0 and "page 9 is past the last page, page 1" in out
    code, _, err = run(["--url", url, "list", "--page-size", "0"], capsys)
    assert code == 2 and "page size (0) must be a whole number, 1 or more" in one_line_error(err)


def test_clear_asks_or_needs_yes(url, capsys, monkeypatch):
    code, _, err = run(["--url", url, "clear"], capsys)
    assert code == 2 and "clear -c ID" in one_line_error(err)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal
    code, _, err = run(["--url", url, "clear", "-c", "conv"], capsys)
    assert (
        code == 2
        and "pass --yes" in one_line_error(err)
        and "10 active and 0 archived events" in err
    )

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, out, _ = run(["--url", url, "clear", "-c", "conv"], capsys)
    assert code == 1 and "Nothing deleted." in out
    with open_store(url) as store:
        assert store.conversations() == ["conv"]
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    code, out, _ = run(["--url", url, "clear", "-c", "conv"], capsys)
    assert code == 0 and "Deleted conversation 'conv'" in out
    seed(url, "other", turns=1)
    code, out, _ = run(["--url", url, "clear", "-c", "other", "--yes"], capsys)
    assert code == 0
    with open_store(url) as store:
        assert store.conversations() == []


def test_json_output_of_the_read_commands(url, capsys):
    with open_store(url) as store:
        ChatMemory(store).add("conv", Event.tool_call("get_order", {"id": 4512}, call_id="c1"))
    run(
        ["--url", url, "compact", "-c", "conv", "--strategy", "turn_window", "--max-turns", "2"],
        capsys,
    )

    window = json.loads(run(["--url", url, "window", "-c", "conv", "--json"], capsys)[1])
    assert set(window) == {"conversation", "turns", "archived_events", "total_tokens", "events"}
    assert (
        window["conversation"] == "conv" and window["turns"] == 2 and window["archived_events"] == 6
    )
    assert [e["seq"] for e in window["events"]] == [7, 8, 9, 10, 11]
    assert window["total_tokens"] == sum(e["tokens"] for e in window["events"]) > 0
    call = window["events"][-1]
    assert (
        call["type"] == "tool_call"
        and call["tool_name"] == "get_order"
        and call["arguments"] == {"id": 4512}
    )
    assert call["tool_call_id"] == "c1" and call["state"] == "active"

    history = json.loads(run(["--url", url, "history", "-c", "conv", "--json"], capsys)[1])
    assert history["archived_events"] == 6 and len(history["events"]) == 11
    assert history["events"][0] | {"id": None, "created_at": None, "tokens": None} == {
        "seq": 1,
        "id": None,
        "type": "user",
        "state": "archived",
        "content": "question 0",
        "text": "question 0",
        "tool_call_id": None,
        "tool_name": None,
        "arguments": None,
        "is_error": False,
        "created_at": None,
        "tokens": None,
        "metadata": {},
    }

    found = json.loads(
        run(
            [
                "--url",
                url,
                "search",
                "ANSWER",
                "-c",
                "conv",
                "--json",
                "--page-size",
                "2",
                "--page",
                "2",
            ],
            capsys,
        )[1]
    )
    assert {k: v for k, v in found.items() if k != "hits"} == {
        "conversation": "conv",
        "keyword": "ANSWER",
        "match_mode": "phrase",
        "page": 2,
        "page_size": 2,
        "total": 5,
        "has_more": True,
    }
    assert [(h["seq"], h["archived"], h["content"]) for h in found["hits"]] == [
        (6, True, "answer 2"),
        (8, False, "answer 3"),
    ]

    stats = json.loads(run(["--url", url, "stats", "-c", "conv", "--json"], capsys)[1])
    assert stats["store"] == url and stats["active_events"] == 5 and stats["archived_events"] == 6
    assert set(stats) == {
        "conversation",
        "store",
        "active_events",
        "archived_events",
        "archived_summaries",
        "turns",
        "window_tokens",
        "version",
        "last_compaction_error",
        "compaction_failures",
    }
