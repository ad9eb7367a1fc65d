"""The async store conformance suite: the :class:`~chat_memory.backends.aio.AsyncStore`
protocol, for chat-memory's native async stores and yours.

Subclass :class:`AsyncStoreConformance` in a test module and give it an ``async_store``
fixture that returns an empty async store (a fresh one for every test)::

    # tests/test_my_async_store.py
    import pytest
    from chat_memory.testing.async_store_conformance import AsyncStoreConformance

    from my_package import MyAsyncStore


    class TestMyAsyncStore(AsyncStoreConformance):
        @pytest.fixture
        def async_store(self):
            return MyAsyncStore.from_url(...)  # empty: a fresh database, prefix or bucket

Then ``pytest tests/test_my_async_store.py``: no pytest-asyncio needed.

**One copy of each case.** The cases are :class:`~chat_memory.testing.store_conformance.
StoreConformance`'s, run unchanged: this class only supplies their ``store`` fixture, a
blocking facade (:func:`~chat_memory.testing.blocking.blocking_store`) over your async store,
which awaits every call on one background event loop and waits for its result. The loop is
real and shared by the calls, so the concurrency cases (several threads appending at once)
run concurrent coroutines against your store on that loop. A new case added to the sync
suite therefore holds for async stores too, with nothing to copy.

**The fixture contract.** ``async_store`` is a plain (not ``async def``) fixture returning
an :class:`AsyncStore` that holds no conversation and has not been used on any event loop
yet: every call the suite makes runs on its own background loop (a driver that binds its
connections to the first loop that uses it binds them to that one). The suite closes the
store after each test, with ``await store.aclose()`` on that loop, so ``aclose`` must be
callable more than once (one of the cases checks it); a fixture may still clean up after
``yield`` (drop a database, say) but need not close the store. The optional abilities follow
the store's declarations: ``compacts_while_appending = True`` runs the case of
:class:`~chat_memory.backends.base.CompactsWhileAppending`, the methods
``append_without_window`` and ``find_events`` the case of
:class:`~chat_memory.backends.base.AppendsWithoutWindow`, ``retract`` and ``retracted`` those
of :class:`~chat_memory.backends.base.Retracts`; the others are skipped, with the reason.

Every case is a plain method taking ``store``, so a single one can be called directly:
``AsyncStoreConformance().test_clear_restarts_seq(blocking_store(async_store))``.

This module imports pytest; only test code imports it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..backends.aio import AsyncStore
from ..backends.base import Store
from .blocking import blocking_store, run_blocking
from .store_conformance import StoreConformance


class AsyncStoreConformance(StoreConformance):
    """:class:`StoreConformance`'s cases on an :class:`AsyncStore`. Subclass it and provide
    an ``async_store`` fixture (the contract is in this module's docstring)."""

    @pytest.fixture
    def async_store(self) -> AsyncStore:
        pytest.fail(
            f"{type(self).__name__} must define an `async_store` fixture that returns an empty "
            "AsyncStore"
        )

    @pytest.fixture
    def store(self, async_store: AsyncStore) -> Iterator[Store]:
        """``async_store`` as a sync :class:`Store` for the cases, closed after each test."""
        if not isinstance(async_store, AsyncStore):
            pytest.fail(
                f"the async_store fixture of {type(self).__name__} returned {async_store!r}, "
                "which is not a chat_memory AsyncStore (a sync Store belongs in "
                "StoreConformance, or in ThreadedStore)"
            )
        yield blocking_store(async_store)
        run_blocking(async_store.aclose())


__all__ = ["AsyncStoreConformance"]
