"""The conformance suite of :class:`~chat_memory.backends.base.ChecksToolPairs`, a store that
runs the engine's tool-pair check inside its append: :class:`ToolPairConformance` for a sync
store, :class:`AsyncToolPairConformance` for an async one (``checks_tool_pairs = True``).
Subclass one with a ``store`` (or ``async_store``) fixture that returns an empty store, as for
:class:`~chat_memory.testing.store_conformance.StoreConformance` (whose cases, the protocol's
own, it does not repeat); a store without the ability has every case skipped, with the reason.

The check each case passes is the engine's own (:func:`chat_memory.event_checks.tool_checked`),
wrapped to record what the store found for it.

This module imports pytest; only test code imports it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ..backends.aio import AsyncStore
from ..backends.base import ChecksToolPairs, CompactionPlan, Snapshot, Store, ToolPairCheck
from ..errors import InvalidEventError
from ..event_checks import tool_checked
from ..events import Event, EventType
from .blocking import BlockingStore, run_blocking

#: The three append methods of the ability, each called with a check.
_APPENDS = ("append", "append_without_window", "append_compacting")


def _never(_: Snapshot) -> CompactionPlan | None:
    return None


class _Recorded:
    """The engine's check of ``batch``, recording what the store found for it each time."""

    def __init__(self, cid: str, batch: list[Event], pause: float = 0.0) -> None:
        self.cid, self.batch, self.pause = cid, batch, pause
        self.found: list[list[Event]] = []

    def __call__(self, found: list[Event]) -> list[Event]:
        self.found.append(found)
        if self.pause:
            time.sleep(self.pause)  # widens the gap a racing writer may fall into
        return tool_checked(self.cid, self.batch, found)


def _append(
    store: ChecksToolPairs, how: str, cid: str, batch: list[Event], check: ToolPairCheck
) -> Any:
    if how == "append_compacting":
        return store.append_compacting(cid, batch, _never, check=check)
    method: Callable[..., Any] = getattr(store, how)
    return method(cid, batch, check=check)


def _checks(store: Store) -> ChecksToolPairs:
    if not isinstance(store, ChecksToolPairs):
        pytest.skip(f"{type(store).__name__} does not declare ChecksToolPairs")
    return store


def _call(call_id: str) -> Event:
    return Event.tool_call("lookup", {"order": call_id}, call_id=call_id, tokens=3)


def _result(call_id: str, content: str = "shipped") -> Event:
    return Event.tool_result(call_id, content, tokens=2)


def _kinds(events: Sequence[Event]) -> list[str]:
    return [e.type.value for e in events]


class ToolPairConformance:
    """The cases of :class:`~chat_memory.backends.base.ChecksToolPairs`. Subclass it and
    provide a ``store`` fixture (an empty store)."""

    @pytest.fixture
    def store(self) -> Store:
        pytest.fail(
            f"{type(self).__name__} must define a `store` fixture that returns an empty store"
        )

    @pytest.mark.parametrize("how", _APPENDS)
    def test_a_checked_result_answers_an_archived_call_and_takes_its_name(
        self, store: Store, how: str
    ) -> None:
        checks = _checks(store)
        store.append("c", [Event.user("where is it?", tokens=3), _call("c1")])
        store.append("c", [Event.user("later", tokens=1)])
        assert store.apply("c", CompactionPlan(store.load("c").version, archive_through_seq=2))
        batch = [_result("c1")]
        check = _Recorded("c", batch)
        _append(checks, how, "c", batch, check)
        found = check.found[-1]
        assert [(e.type, e.tool_call_id, e.archived) for e in found] == [
            (EventType.TOOL_CALL, "c1", True)
        ]
        stored = [e for e in store.history("c") if e.type is EventType.TOOL_RESULT]
        assert [(e.tool_call_id, e.tool_name, e.seq) for e in stored] == [("c1", "lookup", 4)]

    @pytest.mark.parametrize("how", _APPENDS)
    def test_a_checked_append_refusing_a_duplicate_call_id_writes_nothing(
        self, store: Store, how: str
    ) -> None:
        checks = _checks(store)
        store.append("c", [Event.user("go", tokens=1), _call("c1"), _result("c1")])
        before = store.load("c")
        history = store.history("c")
        batch = [Event.user("again", tokens=1), _call("c1")]
        with pytest.raises(InvalidEventError, match=r"\('c1'\) is already in the window"):
            _append(checks, how, "c", batch, _Recorded("c", batch))
        after = store.load("c")
        assert (after.version, after.last_seq) == (before.version, before.last_seq)
        assert store.history("c") == history

    def test_a_checked_retry_is_stored_once(self, store: Store) -> None:
        checks = _checks(store)
        batch = [Event.user("go", tokens=1), _call("c1"), _result("c1")]
        first = checks.append("c", batch, check=_Recorded("c", batch))
        again = _Recorded("c", batch)
        second = checks.append("c", batch, check=again)
        assert second.last_seq == first.last_seq == 3
        assert {e.id for e in again.found[-1]} >= {batch[1].id, batch[2].id}
        assert _kinds(store.history("c")) == ["user", "tool_call", "tool_result"]

    def test_racing_checked_results_for_one_call_store_one(self, store: Store) -> None:
        """Writers racing to answer one call: the check inside the append lets exactly one
        through, whoever wins; the others are refused as a second result."""
        checks = _checks(store)
        store.append("c", [Event.user("go", tokens=1), _call("c1")])
        stored: list[Event] = []
        refused: list[InvalidEventError] = []
        errors: list[BaseException] = []

        def write(worker: int) -> None:
            batch = [_result("c1", f"answer {worker}")]
            try:
                stored.extend(
                    checks.append_without_window(
                        "c", batch, check=_Recorded("c", batch, pause=0.01)
                    )
                )
            except InvalidEventError as exc:
                refused.append(exc)
            except BaseException as exc:  # reported below, in the test's own thread
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(stored) == 1 and len(refused) == 3
        assert all("second tool_result for tool_call_id 'c1'" in str(e) for e in refused)
        results = [e for e in store.history("c") if e.type is EventType.TOOL_RESULT]
        assert [e.content for e in results] == [stored[0].content]


class _CheckingBlockingStore(ChecksToolPairs, BlockingStore):
    """An async store with ``checks_tool_pairs`` as a sync :class:`ChecksToolPairs` store:
    the three appends, check included, awaited on the shared background loop."""

    def append(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> Snapshot:
        snapshot: Snapshot = self._await("append", conversation_id, events, check=check)
        return snapshot

    def append_without_window(
        self, conversation_id: str, events: Sequence[Event], check: ToolPairCheck | None = None
    ) -> list[Event]:
        stored: list[Event] = self._await(
            "append_without_window", conversation_id, events, check=check
        )
        return stored

    def append_compacting(
        self,
        conversation_id: str,
        events: Sequence[Event],
        planner: Callable[[Snapshot], CompactionPlan | None],
        check: ToolPairCheck | None = None,
    ) -> tuple[Snapshot, bool]:
        result: tuple[Snapshot, bool] = self._await(
            "append_compacting", conversation_id, events, planner, check=check
        )
        return result

    def _await(self, name: str, *args: Any, check: ToolPairCheck | None) -> Any:
        # found by name: the AsyncStore protocol's own methods take no check
        method: Callable[..., Any] = getattr(self.async_store, name)
        return run_blocking(method(*args, check=check) if check else method(*args))


class AsyncToolPairConformance(ToolPairConformance):
    """:class:`ToolPairConformance`'s cases on an :class:`AsyncStore`: provide an
    ``async_store`` fixture returning an empty one, not yet used on any event loop (the
    contract of :class:`~chat_memory.testing.async_store_conformance.AsyncStoreConformance`)."""

    @pytest.fixture
    def async_store(self) -> AsyncStore:
        pytest.fail(
            f"{type(self).__name__} must define an `async_store` fixture that returns an empty "
            "AsyncStore"
        )

    @pytest.fixture
    def store(self, async_store: AsyncStore) -> Iterator[Store]:
        """``async_store`` as a sync store for the cases, closed after each test."""
        if not async_store.checks_tool_pairs:
            pytest.skip(f"{type(async_store).__name__} does not say checks_tool_pairs")
        yield _CheckingBlockingStore(async_store)
        run_blocking(async_store.aclose())


__all__ = ["AsyncToolPairConformance", "ToolPairConformance"]
