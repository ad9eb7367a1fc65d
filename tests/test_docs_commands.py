"""Every ``chat-memory …`` command shown in a code block of README.md and docs/*.md runs as
written: the console script in a shell, a fresh HOME, a temp SQLite store as
``CHAT_MEMORY_URL``, no API key (the scripted stand-in model answers), and seeded data where
a command needs it (the conversations ``support-42`` and ``default``, user ``alice``'s
memory file). Placeholders of a synopsis (``URL``, ``NS``, ``PATH``, ``DIR``) are filled in
and its optional ``[…]`` parts included; a server URL (``redis://…``) is replaced by the
test server's. A command exits 0, or the code a ``# exit N`` comment on its line gives."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from chat_memory import ChatMemory, Event, open_store
from chat_memory.longterm import long_term_memory

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SEEDED_CONVERSATIONS = ("support-42", "default")
USER, MEMORY_FILE, MEMORY_DIR = "alice", "/memories/preferences.md", "/memories"
CHAT_INPUT = "Our new service is code-named Bluefin.\n/quit\n"

#: Commands not run, by (file, the command's start), each with its reason. Keep it short.
SKIPPED = {
    # the general synopsis: COMMAND and [options] stand for every command, each of which
    # has its own runnable example
    ("docs/cli.md", "chat-memory [--url URL]"): "the synopsis of every command",
}
#: Commands run only when an optional package is there: (file, start) -> (module, reason).
NEEDS = {
    # lfx pins sqlalchemy<2.1, so it has its own venv (scripts/test-langflow), where
    # tests/langflow runs this export
    ("docs/langflow.md", "chat-memory templates export"): ("lfx", "needs the langflow extra (lfx)"),
}
#: A server URL in a command -> the fixture giving the test server's URL.
SERVER_URLS = [
    (re.compile(r"redis\+cluster://\S+"), "redis_cluster_url"),
    (re.compile(r"rediss?://\S+"), "redis_url"),
    (re.compile(r"postgresql(\+\w+)?://\S+"), "postgres_url"),
    (re.compile(r"s3://\S+"), "s3_url"),
]
_EXIT = re.compile(r"#.*\bexit (\d+)\b")


@dataclass(frozen=True)
class DocCommand:
    """One command as a doc shows it."""

    file: str
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def expected_exit(self) -> int:
        found = _EXIT.search(self.text)
        return int(found.group(1)) if found else 0


def doc_commands() -> list[DocCommand]:
    """The ``chat-memory`` commands in fenced code blocks. In a block that is a terminal
    transcript (lines starting ``$ ``) only those lines are commands; the rest is output."""
    found = []
    for path in DOCS:
        block: list[tuple[int, str]] | None = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                if block is not None:
                    found += _block_commands(path.relative_to(ROOT).as_posix(), block)
                block = None if block is not None else []
            elif block is not None:
                block.append((number, line.strip()))
    return found


def _block_commands(file: str, lines: list[tuple[int, str]]) -> list[DocCommand]:
    transcript = any(text.startswith("$ ") for _, text in lines)
    out = []
    for number, text in lines:
        if transcript:
            if not text.startswith("$ "):
                continue
            text = text[2:]
        if text.startswith("chat-memory ") or text == "chat-memory":
            out.append(DocCommand(file, number, text))
    return out


COMMANDS = doc_commands()


def test_the_docs_show_the_commands_this_test_relies_on():
    # the README's tour and the memory commands: an extraction that loses them fails here
    words = {word for c in COMMANDS for word in c.text.split("#")[0].split()}
    assert {
        "demo",
        "chat",
        "window",
        "search",
        "list",
        "compact",
        "clear",
        "memory",
        "show",
        "--user",
    } <= words
    assert len(COMMANDS) >= 20
    assert any(c.expected_exit == 2 for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.id)
def test_the_documented_command_runs_as_written(command, tmp_path, request):
    reason = _skip_reason(command)
    if reason:
        pytest.skip(reason)
    home = tmp_path / "home"
    home.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    text = _fill_placeholders(command.text, store_url)
    urls = [store_url]
    for pattern, fixture in SERVER_URLS:
        if pattern.search(text):
            server_url = request.getfixturevalue(fixture)
            text = pattern.sub(lambda _: shlex.quote(server_url), text)
            urls.append(server_url)
    for url in urls:
        _seed(url)
    out = subprocess.run(
        ["bash", "-c", _console_script_prelude() + text],
        input=CHAT_INPUT,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_environment(home, store_url),
        timeout=180,
    )
    assert out.returncode == command.expected_exit, (
        f"{command.id}: {command.text}\nran: {text}\nexit {out.returncode}\n"
        f"stdout: {out.stdout[-2000:]}\nstderr: {out.stderr[-2000:]}"
    )
    assert "Traceback" not in out.stderr, out.stderr
    if command.expected_exit:
        assert out.stderr.startswith("chat-memory: error: "), out.stderr


def _skip_reason(command: DocCommand) -> str | None:
    for (file, start), reason in SKIPPED.items():
        if command.file == file and command.text.startswith(start):
            return reason
    for (file, start), (module, reason) in NEEDS.items():
        if (
            command.file == file
            and command.text.startswith(start)
            and importlib.util.find_spec(module) is None
        ):
            return reason
    return None


def _fill_placeholders(text: str, store_url: str) -> str:
    """A synopsis' metavariables become values; its optional parts are included."""
    command, hash_, comment = text.partition(" #")
    command = re.sub(r"\[([^\]]*)\]", r"\1", command)
    values = {"URL": shlex.quote(store_url), "NS": USER, "PATH": MEMORY_FILE, "DIR": MEMORY_DIR}
    command = re.sub(r"\b(URL|NS|PATH|DIR)\b", lambda m: values[m.group(1)], command)
    return command + hash_ + comment


def _seed(url: str) -> None:
    """The data the documented commands read, added where it is missing."""
    store = open_store(url)
    try:
        memory = ChatMemory(store)
        for cid in SEEDED_CONVERSATIONS:
            if store.load(cid).version == 0:
                memory.add(
                    cid,
                    [
                        Event.user("Our new service is code-named Bluefin."),
                        Event.assistant("Noted."),
                    ],
                )
        files = long_term_memory(store, USER)
        if not any(entry.path == MEMORY_FILE for entry in files.files()):
            files.create(MEMORY_FILE, "# User preferences\n- tea\n")
    finally:
        store.close()


def _environment(home: Path, store_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "XDG_", "CHAT_MEMORY_"))
    }
    return {**env, "HOME": str(home), "CHAT_MEMORY_URL": store_url, "PYTHONPATH": str(ROOT)}


def _console_script_prelude() -> str:
    """Put this interpreter's ``chat-memory`` first on PATH; where it is not installed as a
    console script, a shell function runs the same entry point."""
    bin_dir = Path(sys.executable).parent
    if (bin_dir / "chat-memory").exists():
        return f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n'
    return f'chat-memory() {{ {shlex.quote(sys.executable)} -m chat_memory.host.cli "$@"; }}\n'
