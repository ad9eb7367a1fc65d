"""An interrupted copy resumes: interrupted between two conversations, right after a
conversation was written (before it was verified), or halfway through a long-term
namespace's versions, the same ``chat-memory copy`` run again ends with the target equal to
the source, each conversation written once; a namespace with a history of its own on the
target is still refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat_memory import open_store
from chat_memory.backends.base import Dumps
from chat_memory.backends.sql import SQLStore
from chat_memory.backends.timeline import ConversationDump
from chat_memory.errors import InvalidInputError
from chat_memory.lifecycle.keys import stored_key
from chat_memory.longterm import MemoryFiles, long_term_memory
from chat_memory.transfer import copy_store
from tests.stores.test_copy_chain import contents, copy, seed


class CountingStore(SQLStore):
    """A real SQL store that counts its restores and is interrupted (as by Ctrl-C) at the
    restore numbered ``stop_at``: before writing it, or with ``after=True`` once it is written."""

    stop_at: int | None = None
    after = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.restored: list[str] = []

    def restore(self, dump: ConversationDump) -> None:
        if len(self.restored) + 1 == self.stop_at and not self.after:
            raise KeyboardInterrupt
        super().restore(dump)
        self.restored.append(dump.conversation_id)
        if len(self.restored) == self.stop_at:
            raise KeyboardInterrupt


@pytest.mark.parametrize("after", [False, True], ids=["before-a-restore", "after-a-restore"])
@pytest.mark.postgres
def test_an_interrupted_copy_run_again_copies_the_rest_once(
    sqlite_url: str, postgres_url: str, capsys: pytest.CaptureFixture[str], after: bool
) -> None:
    with open_store(sqlite_url) as source:
        seed(source, conversations=2, turns=4)
        expected = contents(source)
        keys = expected["keys"]
        target = CountingStore.from_url(postgres_url)
        assert isinstance(target, CountingStore)
        target.stop_at, target.after = 4, after
        try:
            with pytest.raises(KeyboardInterrupt):
                copy_store(source, target)
            first = list(target.restored)
            assert len(first) == (4 if after else 3)
            # what the interrupted copy wrote is whole: the rest is not there at all
            assert sorted(target.conversations()) == sorted(first)
            target.stop_at = None
            resumed = copy_store(source, target)
            assert resumed.skipped == len(first)
            assert resumed.conversations == len(keys) - len(first)
            # every conversation restored exactly once over both runs, none twice
            assert sorted(target.restored) == sorted(keys)
        finally:
            target.close()
    # the command line agrees: a third run finds everything there, verified
    report = copy(sqlite_url, postgres_url, capsys)
    assert f"Copied 0 conversations (0 events), {len(keys)} already there (verified)" in report
    with open_store(postgres_url) as moved:
        assert sorted(moved.conversations()) == keys
        assert contents(moved) == expected


@pytest.mark.redis
def test_a_copy_interrupted_inside_a_long_term_namespace_resumes(
    sqlite_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(sqlite_url) as source, open_store(redis_url) as target:
        seed(source)
        expected = contents(source)
        assert isinstance(source, Dumps) and isinstance(target, Dumps)
        for key in expected["keys"][:2]:  # two conversations made it across
            dump = source.dump(stored_key(key))
            assert dump is not None
            target.restore(dump)
        # what interruptions during the replay of a namespace leave: the first versions only
        long_term_memory(target, "team").create("/memories/notes.md", "one\n")
        long_term_memory(target, "prefs", user="bob").create(
            "/memories/prefs.md", "bob likes tea\n"
        )
    report = copy(sqlite_url, redis_url, capsys)
    assert f"Copied {len(expected['keys']) - 2} conversations" in report
    assert "2 already there (verified), 3 long-term namespaces" in report
    with open_store(redis_url) as moved:
        assert contents(moved) == expected


def test_a_namespace_holding_other_files_is_still_refused(sqlite_url: str) -> None:
    with open_store(sqlite_url) as source:
        seed(source, turns=3)
        target = open_store("memory://")
        long_term_memory(target, "team").create("/memories/notes.md", "someone else's\n")
        with pytest.raises(InvalidInputError, match=r"namespace \('team'\).*replace"):
            copy_store(source, target)
        assert long_term_memory(target, "team").read("/memories/notes.md") == "someone else's\n"


PATH = "/memories/notes.md"


def _write(files: MemoryFiles, versions: list[str]) -> None:
    files.create(PATH, versions[0])
    for before, after in zip(versions, versions[1:]):
        files.str_replace(PATH, before, after)


def _listed(files: MemoryFiles) -> tuple[str, list[str | None]]:
    return files.read(PATH), [v.content for v in files.versions(PATH)]


@settings(max_examples=30)
@given(
    versions=st.lists(st.text("ab\n", min_size=1, max_size=4), min_size=1, max_size=4, unique=True),
    data=st.data(),
)
def test_a_namespace_left_at_any_of_its_versions_resumes_and_any_other_is_refused(
    versions: list[str], data: st.DataObject
) -> None:
    source, target = open_store("memory://"), open_store("memory://")
    _write(long_term_memory(source, "ns"), versions)
    kept = data.draw(st.integers(1, len(versions)), label="versions already copied")
    _write(long_term_memory(target, "ns"), versions[:kept])
    copy_store(source, target)
    assert _listed(long_term_memory(target, "ns")) == _listed(long_term_memory(source, "ns"))
    other = open_store("memory://")
    _write(long_term_memory(other, "ns"), ["c", *versions[:kept]])  # a history of its own
    with pytest.raises(InvalidInputError, match=r"namespace \('ns'\)"):
        copy_store(source, other)
