"""No memory path is ever both a file and a directory, even when two writers race: a command's
compare-and-swap covers the parent paths it relies on, on every store (the SQL transaction, the
Redis script, the S3 head swap, the in-memory lock)."""

from __future__ import annotations

import threading

import pytest

from chat_memory.longterm import MemoryTool, long_term_memory
from chat_memory.longterm.paths import placement_holds

ROUNDS = 25


def files_and_directories(paths: list[str]) -> set[str]:
    """Paths that are a file and, by a file under them, a directory too."""
    directories = {path[:at] for path in paths for at in range(1, len(path)) if path[at] == "/"}
    return directories & set(paths)


@pytest.mark.parametrize(
    ("stored", "writes", "holds"),
    [
        ([], {"/memories/a": "x"}, True),
        (["/memories/a"], {"/memories/a/b.md": "x"}, False),
        (["/memories/a/b.md"], {"/memories/a": "x"}, False),
        (["/memories/a/c/d.md"], {"/memories/a/c": "x"}, False),
        (["/memories/a"], {"/memories/a": None, "/memories/a/b.md": "x"}, True),
        (["/memories/ab"], {"/memories/a/b.md": "x"}, True),
        (["/memories/a", "/memories/a/b.md"], {"/memories/a": "rewrite"}, True),
    ],
)
def test_placement_holds_only_when_no_new_file_sits_under_or_over_another(stored, writes, holds):
    assert placement_holds(stored, writes) is holds


def test_racing_a_file_and_a_file_under_it_never_makes_both(store):
    files = [long_term_memory(store, "race"), long_term_memory(store, "race")]
    tools = [MemoryTool(f) for f in files]
    calls = [
        {"command": "create", "path": "/memories/a", "file_text": "a file"},
        {"command": "create", "path": "/memories/a/b.md", "file_text": "under a directory"},
    ]
    try:
        for round_number in range(ROUNDS):
            start = threading.Barrier(2)
            results: list = [None, None]

            def run(i: int) -> None:
                start.wait()
                results[i] = tools[i].run(calls[i])

            threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            paths = [entry.path for entry in files[0].files()]
            assert not files_and_directories(paths), (round_number, paths, results)
            landed = [r for r in results if not r.is_error]
            assert len(landed) == 1, (round_number, results)
            refused = next(r for r in results if r.is_error)
            assert refused.text in (
                "File /memories/a already exists",
                "The path /memories/a is a file, not a directory.",
            )
            files[0].delete("/memories/a")
    finally:
        files[0].clear()
