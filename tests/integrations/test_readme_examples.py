"""The README's examples run as written: each is an example file under examples/, copied
verbatim into the README, and run here twice in a row in one folder (a reader runs them
again; the library example keeps its conversation in a SQLite file there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "langchain_memory.py": (
        "langchain.agents",
        ["4\n", "archived] Our new service is code-named Bluefin.", "\n8\n"],
    ),
    "openai_agents_session.py": (
        "agents",
        [
            "[{'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'It has shipped.'}]}]",
            "conversation_search",
        ],
    ),
    "library_quickstart.py": ("chat_memory", []),
    "lifecycle.py": ("chat_memory", ["['Refund']\n['I was charged twice.']\n[]\n0\n2\n"]),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_shows_the_example_verbatim(name):
    assert (ROOT / "examples" / name).read_text().rstrip() in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_runs_as_written_twice_in_a_row(name, tmp_path):
    package, expected = EXAMPLES[name]
    pytest.importorskip(package)
    for run in (1, 2):
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / name)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert out.returncode == 0, f"run {run}: {out.stderr}"
        assert "Warning" not in out.stderr, f"run {run}: {out.stderr}"
        for text in expected:
            assert text in out.stdout, out.stdout


def test_the_library_example_run_twice_continues_its_conversation(tmp_path):
    from chat_memory import ChatMemory, open_store

    for _ in range(2):
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "library_quickstart.py")],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
    store = open_store(f"sqlite:///{tmp_path / 'chat.db'}")
    try:
        history = ChatMemory(store).history("conv-1")
    finally:
        store.close()
    # each run adds its exchange: user, assistant, a call with an id of its own, its result
    assert [e.type.value for e in history] == ["user", "assistant", "tool_call", "tool_result"] * 2
    first_call, second_call = history[2].tool_call_id, history[6].tool_call_id
    assert first_call != second_call
    assert (history[3].tool_call_id, history[7].tool_call_id) == (first_call, second_call)


@pytest.mark.parametrize(
    "blocked, module, extra, needs",
    [
        ("langchain_core", "chat_memory.integrations.langchain", "langchain", None),
        # the middleware's own extra is named only when langchain-core, which it also needs, is there
        (
            "langchain",
            "chat_memory.integrations.langchain.middleware",
            "langchain-agents",
            "langchain_core",
        ),
        ("agents", "chat_memory.integrations.openai_agents", "openai-agents", None),
    ],
)
def test_a_missing_framework_names_its_extra(blocked, module, extra, needs):
    if needs:
        pytest.importorskip(needs)
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from chat_memory import ConfigurationError\n"
        "try:\n"
        f"    __import__({module!r})\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert f"pip install 'chat-memory[{extra}]'" in out.stdout, out.stdout + out.stderr
