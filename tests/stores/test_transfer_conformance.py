"""The fork and dump/restore conformance suite (chat_memory.testing.transfer_conformance) on
memory:// (the other stores: tests/stores/test_*_transfer.py), and the refusal, naming the
ability, of a store without it."""

from __future__ import annotations

import io

import pytest

from chat_memory import ThreadedStore
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.errors import ConfigurationError
from chat_memory.testing.blocking import blocking_store
from chat_memory.testing.transfer_conformance import TransferConformance
from chat_memory.transfer import copy_store, export_store, import_store


class TestInMemoryTransfer(TransferConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()

    @pytest.fixture
    def second_store(self) -> InMemoryStore:
        return InMemoryStore()


def test_a_store_without_the_dumps_ability_is_refused_naming_it() -> None:
    # every store of the package dumps: a sync store over an async one has the protocol only
    plain = blocking_store(ThreadedStore(InMemoryStore()))
    with pytest.raises(ConfigurationError, match="source store.*Dumps ability"):
        export_store(plain, io.StringIO())
    with pytest.raises(ConfigurationError, match="target store.*Dumps ability"):
        import_store(plain, ['{"format":"chat-memory","version":1}\n'])
    with pytest.raises(ConfigurationError, match="target store.*Dumps ability"):
        copy_store(InMemoryStore(), plain)
