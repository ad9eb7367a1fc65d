"""docs/extending.md, run as written: the third-party store of its "A store" section (one module
with a store, its async twin and its long-term memory, plus an entry point) is installed into a
temporary folder and used with nothing edited inside chat-memory and nothing imported first.

The code is taken from the document's fenced blocks (```` ```python toy_store.py ````: the
block's file name follows its language), so the document cannot drift from what is tested."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat_memory.backends import registry
from tests.support.extending_doc import DOC, commented_block, doc_section, install, named_blocks

pytest_plugins = ["pytester"]

STORE_BLOCKS = named_blocks(doc_section("A store"))


@pytest.fixture
def toy_store_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install(
        tmp_path,
        "toy-store",
        "toy_store",
        STORE_BLOCKS["toy_store.py"],
        STORE_BLOCKS["pyproject.toml"],
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # as in a new process: the registry has not read the installed entry points yet
    monkeypatch.setattr(registry, "_loaded", False)
    yield
    module = sys.modules.pop("toy_store", None)
    for name in ("ToyStore", "AsyncToyStore"):
        if module is not None and hasattr(module, name):
            registry.unregister(getattr(module, name))


def test_the_document_shows_a_store_module_its_entry_point_and_a_session() -> None:
    assert {"toy_store.py", "pyproject.toml", "session.py"} <= set(STORE_BLOCKS)
    module = STORE_BLOCKS["toy_store.py"]
    # nothing but declarations ties the twin and the long-term memory to the store
    assert 'async_twin = "toy_store:AsyncToyStore"' in module
    assert 'long_term = "toy_store:ToyFiles"' in module


def test_a_third_party_store_with_its_twin_and_long_term_memory_works_as_documented(
    toy_store_installed: None,
) -> None:
    assert "toy_store" not in sys.modules  # the session below imports it through the registry
    exec(compile(STORE_BLOCKS["session.py"], f"{DOC}:session.py", "exec"), {})
    assert "toy_store" in sys.modules


def test_the_async_twin_is_found_without_its_module_imported_first(
    toy_store_installed: None,
) -> None:
    from chat_memory import open_async_store

    assert "toy_store" not in sys.modules
    store = open_async_store("toy://?shelf=right")  # the first look-up of any store here
    toy_store = sys.modules["toy_store"]
    assert type(store) is toy_store.AsyncToyStore and store.shelf.shelf == "right"
    threaded = open_async_store("toy://", threads=True)
    assert not threaded.native and type(threaded.store) is toy_store.ToyStore


def test_the_documented_conformance_tests_pass_on_the_documented_store(
    toy_store_installed: None, pytester: pytest.Pytester
) -> None:
    """The "plus tests" of the diff: the section "Testing a store and its async twin" runs both
    conformance suites on the toy store and its twin."""
    tests = commented_block(
        doc_section("Testing a store and its async twin"), "# tests/test_toy_store.py"
    )
    pytester.makepyfile(test_toy_store=tests)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert "failed" not in outcomes and "errors" not in outcomes, result.stdout.str()
    assert outcomes["passed"] > 50  # both suites ran, not just collected


def test_the_store_table_of_stores_md_is_what_the_classes_declare() -> None:
    from chat_memory.backends import store_classes

    text = (DOC.parent / "stores.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$", text, re.MULTILINE)
    documented = {
        name: (
            tuple(re.findall(r"`([^`]+)`", schemes)),
            (re.findall(r"`([^`]+)`", twin) or [None])[0],
            (re.findall(r"`([^`]+)`", long_term) or [None])[0],
        )
        for name, schemes, twin, long_term in rows
    }
    declared = {
        cls.__name__: (cls.schemes, cls.async_twin, cls.long_term)
        for cls in store_classes()
        if cls.__module__.startswith("chat_memory.")
    }
    assert documented == declared
