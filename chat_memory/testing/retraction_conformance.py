"""The conformance cases of the :class:`~chat_memory.backends.base.Retracts` ability, mixed
into :class:`~chat_memory.testing.store_conformance.StoreConformance` (skipped, with the
reason, for a store that does not declare the ability). Each test takes an empty ``store``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pytest

from ..backends.base import AppendsWithoutWindow, CompactionPlan, Retracts, Store
from ..errors import InvalidInputError
from ..events import Event
from ..search import SearchQuery


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _user(text: str) -> Event:
    return Event.user(text, tokens=_tokens(text))


def _assistant(text: str) -> Event:
    return Event.assistant(text, tokens=_tokens(text))


def _call(call_id: str) -> Event:
    return Event.tool_call("lookup", {"q": call_id}, call_id=call_id, tokens=2)


def _result(call_id: str, text: str) -> Event:
    return Event.tool_result(call_id, text, name="lookup", tokens=_tokens(text))


def _seqs(events: Sequence[Event]) -> list[int]:
    return [e.seq or 0 for e in events]


def _archive_through(store: Store, cid: str, seq: int, **plan: Any) -> bool:
    return store.apply(
        cid, CompactionPlan(store.load(cid).version, archive_through_seq=seq, **plan)
    )


if TYPE_CHECKING:

    class _RetractingStore(Store, AppendsWithoutWindow, Retracts):
        """What the cases use: a store that retracts, with the id indexes retraction keeps."""


def _retracting(store: Store) -> _RetractingStore:
    if not isinstance(store, Retracts):
        pytest.skip(f"{type(store).__name__} does not declare Retracts")
    # the cases call find_events too: every store that retracts looks ids up by index
    return cast("_RetractingStore", store)


def _found(store: Store, cid: str, keyword: str) -> list[int]:
    return _seqs(store.search(cid, SearchQuery.build(keyword)).events)


class RetractionConformance:
    """What every store with the Retracts ability does alike."""

    def test_retracts_from_the_window_and_from_the_archive(self, store: Store) -> None:
        store = _retracting(store)
        events = [
            _user("alpha one"),
            _assistant("beta two"),
            _user("gamma three"),
            _assistant("delta four"),
        ]
        store.append("c", events)
        assert _archive_through(store, "c", 2)
        version = store.load("c").version
        taken = store.retract("c", [events[0].id, events[2].id])
        assert _seqs(taken) == [1, 3] and all(e.retracted and not e.archived for e in taken)
        assert [e.content for e in taken] == ["alpha one", "gamma three"]
        after = store.load("c")
        assert (
            after.version > version
            and _seqs(after.window.active) == [4]
            and after.archived_count == 1
        )
        assert _seqs(store.history("c")) == [2, 4] and not any(
            e.retracted for e in store.history("c")
        )
        assert (
            _found(store, "c", "alpha") == []
            and _found(store, "c", "gamma") == []
            and _found(store, "c", "beta") == [2]
        )
        assert _seqs(store.retracted("c")) == [1, 3] and all(
            e.retracted for e in store.retracted("c")
        )
        assert store.retracted("c")[0].content == "alpha one"

    def test_a_call_retracts_its_result_and_a_result_its_call(self, store: Store) -> None:
        store = _retracting(store)
        first_call, first_result = _call("k1"), _result("k1", "first result")
        second_call, second_result = _call("k2"), _result("k2", "second result")
        store.append(
            "c", [_user("q"), first_call, first_result, _user("again"), second_call, second_result]
        )
        assert _archive_through(store, "c", 2)  # the first call archived, its result in the window
        assert _seqs(store.retract("c", [first_call.id])) == [2, 3]
        assert _seqs(store.retract("c", [second_result.id])) == [5, 6]
        assert _seqs(store.history("c")) == [1, 4]
        assert store.find_tool_events("c", ["k1", "k2"]) == []
        assert _seqs(store.retracted("c")) == [2, 3, 5, 6]

    def test_retraction_is_idempotent_and_ignores_unknown_ids(self, store: Store) -> None:
        store = _retracting(store)
        question, answer = _user("q"), _assistant("a")
        store.append("c", [question, answer])
        assert _seqs(store.retract("c", [answer.id, "no such id"])) == [2]
        assert store.retract("c", [answer.id]) == [] and store.retract("c", ["no such id"]) == []
        assert store.retract("unknown conversation", [answer.id]) == []
        assert _seqs(store.retracted("c")) == [2] and _seqs(store.history("c")) == [1]

    def test_pinned_events_and_summaries_are_refused_and_nothing_is_written(
        self, store: Store
    ) -> None:
        store = _retracting(store)
        pin, question, answer = Event.system("rules", tokens=1), _user("q"), _assistant("a")
        store.append("c", [pin, question, answer, _user("q2"), _assistant("a2")])
        assert _archive_through(store, "c", 3, summary=Event.summary("the summary", tokens=2))
        summary = store.load("c").window.summary
        assert summary is not None
        before = store.load("c")
        for refused in (pin, summary):
            with pytest.raises(InvalidInputError, match=refused.id):
                store.retract("c", [question.id, refused.id])
        assert store.load("c") == before and store.retracted("c") == []
        assert _archive_through(
            store, "c", 5, summary=Event.summary("newer", tokens=1)
        )  # the old one archived
        with pytest.raises(InvalidInputError, match=summary.id):
            store.retract("c", [summary.id])

    def test_seq_is_never_reused_and_a_retracted_id_is_stored_again(self, store: Store) -> None:
        store = _retracting(store)
        question, call, result = _user("q"), _call("k1"), _result("k1", "done")
        store.append("c", [question, call, result])
        store.retract("c", [result.id])
        again = store.append("c", [call, result])  # same ids, same call id: stored anew
        assert again.last_seq == 5 and _seqs(again.window.active) == [1, 4, 5]
        assert _seqs(store.find_events("c", [call.id], ["k1"])) == [4, 5]
        assert _seqs(store.retracted("c")) == [2, 3]
        assert _seqs(store.history("c")) == [1, 4, 5]

    def test_retracted_events_leave_every_read_and_clear_removes_them(self, store: Store) -> None:
        store = _retracting(store)
        kept, gone = _user("needle kept"), _assistant("needle gone")
        store.append("c", [kept, gone])
        store.retract("c", [gone.id])
        assert _found(store, "c", "needle") == [1]
        assert store.search("c", SearchQuery.build("needle")).total == 1
        assert _seqs(store.load("c").window.active) == [1]
        assert store.find_events("c", [gone.id], []) == []
        store.clear("c")
        assert store.retracted("c") == [] and store.history("c") == []
        assert store.append("c", [_user("fresh")]).last_seq == 1
