"""Hostile input to the memory tool: whatever the model sends, the tool answers with text
(never raises), nothing lands outside /memories, and unsafe paths are refused by name."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import open_store
from chat_memory.longterm import MemoryPathError, MemoryTool, check_path, long_term_memory
from chat_memory.longterm.paths import MAX_NAME_BYTES

UNSAFE = [
    "/memories/../secrets",
    "/memories/a/../../etc/passwd",
    "/memories/./a",
    "/etc/passwd",
    "memories/a",
    "/memoriesx/a",
    "/Memories/a",
    "/memories/%2e%2e/a",
    "/memories/%2E%2E%2Fetc",
    "/memories/a%00b",
    "/memories/a\x00b",
    "/memories/a\\..\\b",
    "/memories/a\nb",
    "/memories/\u202eevil",
    "/memories/\uff0e\uff0e/a",
    "/memories/~/a",
    "/memories/c:/a",
    "/memories/link -> /etc",
    "/memories/shortcut.lnk",
    "/memories/a//b",
    "/memories/ a",
    "/memories/" + "x" * (MAX_NAME_BYTES + 1),
    "/memories/" + "a/" * 300,
    "",
    None,
    42,
]

_pieces = st.sampled_from(
    [
        "/memories",
        "/",
        "..",
        ".",
        "%2e",
        "%2F",
        "\\",
        "\x00",
        "~",
        ":",
        "->",
        "a",
        "b.md",
        "é",
        "\uff0e",
        " ",
        "\n",
    ]
)
paths = st.one_of(
    st.lists(_pieces, max_size=8).map("".join), st.text(max_size=40), st.sampled_from(UNSAFE)
)
commands = st.sampled_from(
    ["view", "create", "str_replace", "insert", "delete", "rename", "chmod", "", None]
)
values = st.one_of(
    st.none(),
    st.integers(-3, 5),
    st.text(max_size=20),
    st.lists(st.integers(-2, 5), max_size=3),
    st.booleans(),
)
inputs = st.fixed_dictionaries(
    {"command": commands},
    optional={
        "path": paths,
        "old_path": paths,
        "new_path": paths,
        "file_text": st.one_of(st.text(max_size=30), values),
        "old_str": st.one_of(st.text(max_size=5), values),
        "new_str": st.one_of(st.text(max_size=5), values),
        "insert_line": values,
        "insert_text": st.one_of(st.text(max_size=10), values),
        "view_range": values,
        "extra": values,
    },
)


@pytest.mark.parametrize("path", UNSAFE)
def test_unsafe_paths_are_refused_with_a_clear_error(path):
    with pytest.raises(MemoryPathError) as refused:
        check_path(path)
    assert "path" in str(refused.value).lower() or "Path" in str(refused.value)


@pytest.mark.parametrize("url", ["memory://", "sqlite:///:memory:"])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls=st.lists(st.one_of(inputs, st.text(max_size=20)), min_size=1, max_size=12))
def test_any_command_sequence_stays_inside_memories(url, calls):
    store = open_store(url)
    files = long_term_memory(store, "hostile")
    tool = MemoryTool(files)
    try:
        tool({"command": "create", "path": "/memories/seed.md", "file_text": "a\nb\n"})
        for call in calls:
            out = tool.run(call)
            assert isinstance(out.text, str) and out.text
        for entry in files.files():
            assert check_path(entry.path) == entry.path and entry.path.startswith("/memories/")
            assert ".." not in entry.path.split("/") and "\x00" not in entry.path
            assert isinstance(files.read(entry.path), str)
        listing = tool({"command": "view", "path": "/memories"})
        assert listing.startswith("Here're the files and directories")
    finally:
        files.clear()
        store.close()
