"""Eight processes editing one memory file at once, on every shared backend: no edit is lost."""

from __future__ import annotations

import pytest

from chat_memory import open_store
from chat_memory.longterm import long_term_memory
from tests.conftest import WRITER_PROCESSES as WRITERS
from tests.support.workers import edit_memory_file

EDITS = 12


@pytest.mark.slow
def test_eight_processes_editing_one_file_lose_nothing(store_url, writer_processes):
    store = open_store(store_url)
    files = long_term_memory(store, "team")
    try:
        files.create("/memories/shared.md", "# Shared notes\n")
        done = list(
            writer_processes.map(
                edit_memory_file,
                [store_url] * WRITERS,
                ["team"] * WRITERS,
                range(WRITERS),
                [EDITS] * WRITERS,
            )
        )
        assert done == [EDITS] * WRITERS
        lines = files.read("/memories/shared.md").splitlines()
        expected = {f"w{w}-e{i}" for w in range(WRITERS) for i in range(EDITS)}
        assert (
            lines[0] == "# Shared notes"
            and len(lines) == len(expected) + 1
            and set(lines[1:]) == expected
        )
        for w in range(WRITERS):  # each writer's own edits keep their order (newest inserted first)
            mine = [int(line.split("-e")[1]) for line in lines[1:] if line.startswith(f"w{w}-")]
            assert mine == sorted(mine, reverse=True)
        revisions = [v.revision for v in files.versions("/memories/shared.md")]
        assert len(revisions) == WRITERS * EDITS + 1 and revisions == sorted(set(revisions))
    finally:
        files.clear()
        store.close()
