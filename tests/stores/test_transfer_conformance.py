"""The fork and dump/restore conformance suite (chat_memory.testing.transfer_conformance) on
the stores that have the abilities (memory:// this round), and the refusal, naming the
ability, on those that do not yet."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat_memory import open_store
from chat_memory.backends.base import Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import ConfigurationError
from chat_memory.testing.transfer_conformance import TransferConformance
from chat_memory.transfer import copy_store, export_store, import_store


class TestInMemoryTransfer(TransferConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()

    @pytest.fixture
    def second_store(self) -> InMemoryStore:
        return InMemoryStore()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'chat.db'}")
    yield store
    store.close()


def test_a_store_without_the_dumps_ability_is_refused_naming_it(sqlite_store: Store) -> None:
    with pytest.raises(ConfigurationError, match="source store.*Dumps ability"):
        export_store(sqlite_store, io.StringIO())
    with pytest.raises(ConfigurationError, match="target store.*Dumps ability"):
        import_store(sqlite_store, ['{"format":"chat-memory","version":1}\n'])
    with pytest.raises(ConfigurationError, match="target store.*Dumps ability"):
        copy_store(InMemoryStore(), sqlite_store)
