"""The adapters' README examples run as written: each is an example file under examples/,
copied verbatim into the README, and run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "langchain_memory.py": ("langchain.agents", ["6", "archived] Our new service is code-named Bluefin.", "12"]),
    "openai_agents_session.py": ("agents", ["[{'role': 'assistant', 'content': 'It has shipped.'}]", "conversation_search"]),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_shows_the_example_verbatim(name):
    assert (ROOT / "examples" / name).read_text().rstrip() in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_runs_as_written(name):
    package, expected = EXAMPLES[name]
    pytest.importorskip(package)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    for text in expected:
        assert text in out.stdout, out.stdout


@pytest.mark.parametrize(
    "blocked, module, extra, needs",
    [
        ("langchain_core", "chat_memory.integrations.langchain", "langchain", None),
        # the middleware's own extra is named only when langchain-core, which it also needs, is there
        ("langchain", "chat_memory.integrations.langchain.middleware", "langchain-agents", "langchain_core"),
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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert f"pip install 'chat-memory[{extra}]'" in out.stdout, out.stdout + out.stderr
