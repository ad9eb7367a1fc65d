"""What :class:`~chat_memory.ChatMemory` and :class:`~chat_memory.AsyncChatMemory` share:
every decision, written once as steps (:mod:`chat_memory.steps`) that either drives: the
settings, validating and sizing events, tool-pair checks, the append-then-compact of
``add``, the compaction plan, and turning snapshots into stats and pages."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .backends.base import Snapshot, check_conversation_id
from .compaction import CompactionRecord, CompactionResult, Compactor
from .config import MemoryConfig
from .errors import (
    ChatMemoryError,
    ConfigurationError,
    InvalidEventError,
    InvalidInputError,
    StorageError,
)
from .events import Event, EventType
from .pins import check_pin_key, pin_key
from .search import SearchHit, SearchPage, SearchQuery, check_tool_call_id
from .steps import Steps, call
from .strategies import Strategy, strategy_for
from .summarizer import Summarizer, as_summarizer
from .summary_state import archived_counts
from .tokens import TokenCounter, count_event_tokens, default_token_counter, truncate_tool_result

log = logging.getLogger("chat_memory.engine")


@dataclass(frozen=True)
class MemoryStats:
    """Counts for one conversation. ``archived_events`` counts archived events that are not
    summaries: real events and superseded pinned system events, so ``active_events +
    archived_events`` is every real event added while no pin was superseded and the archive
    cap dropped nothing; ``archived_summaries`` counts the replaced summaries kept in the
    archive (docs/lean-window.md)."""

    active_events: int
    archived_events: int
    turns: int
    window_tokens: int
    version: int
    last_compaction_error: str | None
    archived_summaries: int = 0


class MemoryCore:
    """The settings and the shared steps of one memory (sync or async)."""

    def __init__(
        self,
        config: MemoryConfig | dict[str, Any] | None,
        summarizer: Summarizer | Any,
        token_counter: TokenCounter | None,
    ) -> None:
        if isinstance(config, dict):
            config = MemoryConfig.from_mapping(config)
        if config is not None and not isinstance(config, MemoryConfig):
            raise ConfigurationError(
                f"config ({config!r}) must be a MemoryConfig, a dict of settings or None"
            )
        self.config = config or MemoryConfig()
        self.summarizer = as_summarizer(summarizer)
        self.strategy: Strategy = strategy_for(self.config)
        if self.strategy.summarizes and self.summarizer is None:
            raise ConfigurationError(
                f"Summarizer model must be configured for {self.strategy.label.lower()} "
                "(pass summarizer=AnthropicSummarizer(model=...) or a summarize function)"
            )
        self.token_counter = token_counter or default_token_counter()
        self.compactor = Compactor(self.config, self.strategy, self.summarizer, self.token_counter)

    # -- writing ---------------------------------------------------------------------------

    def add(
        self,
        conversation_id: str,
        events: Event | Iterable[Event],
        compacts_while_appending: bool,
        appends_without_window: bool = False,
    ) -> Steps[list[Event]]:
        """Validate, append, and compact when the strategy's limit is exceeded (see ChatMemory.add).

        ``appends_without_window``: the store has the
        :class:`~chat_memory.backends.base.AppendsWithoutWindow` ability (``append_without_window``
        and ``find_events``, by index). The tool-pair check then looks the batch's ids up
        instead of reading the window, and a strategy that never compacts needs nothing else,
        so its append costs the batch, not the conversation's length."""
        cid = check_conversation_id(conversation_id)
        batch = yield from self._prepare(cid, events, appends_without_window)
        if not batch:
            return []
        if not self.strategy.compacts and appends_without_window:
            stored: list[Event] = yield from call("append_without_window", cid, batch)
            return stored
        if not self.strategy.summarizes and compacts_while_appending:
            # planning is pure here: let the store compact in the same write as the append
            snapshot, _ = yield from call(
                "append_compacting", cid, batch, self.compactor.plan_without_summary
            )
            return _stored_copies(snapshot, batch)
        snapshot = yield from call("append", cid, batch)
        stored = _stored_copies(snapshot, batch)
        cut = self.strategy.plan(snapshot.window)
        if cut is not None:
            try:
                yield from self.compactor.compact(cid, snapshot, cut)
            except ChatMemoryError as exc:
                log.warning(
                    "chat-memory: compaction of %r failed, will retry at the next trigger: %s",
                    cid,
                    exc,
                )
                yield from self._record_compaction_error(cid, exc)
        return stored

    def _record_compaction_error(self, cid: str, error: ChatMemoryError) -> Steps[None]:
        """Keep the reason for stats(); a store too broken to take it is logged, not raised
        (the original error is the one that matters)."""
        try:
            yield from call("record_compaction_error", cid, f"{type(error).__name__}: {error}")
        except ChatMemoryError:
            log.warning(
                "chat-memory: could not record the compaction error of %r", cid, exc_info=True
            )

    def compact(self, conversation_id: str, force: bool) -> Steps[CompactionResult]:
        """Run the strategy now (see ChatMemory.compact)."""
        cid = check_conversation_id(conversation_id)
        try:
            snapshot = yield from call("load", cid)
            return (yield from self.compactor.compact(cid, snapshot, force=force))
        except ChatMemoryError as exc:
            yield from self._record_compaction_error(cid, exc)
            raise

    def retract(
        self, conversation_id: str, event_ids: Iterable[str], retracts: bool
    ) -> Steps[list[Event]]:
        """Take events back (see ChatMemory.retract); ``retracts``: the store has the
        :class:`~chat_memory.backends.base.Retracts` ability."""
        cid = check_conversation_id(conversation_id)
        ids = _event_ids(event_ids)
        _require_retracts(retracts)
        if not ids:
            return []
        taken: list[Event] = yield from call("retract", cid, ids)
        return taken

    def rewind(self, conversation_id: str, seq: int, retracts: bool) -> Steps[list[Event]]:
        """Retract every real event after ``seq`` (see ChatMemory.rewind). The ids come from
        the window, and from the history only when ``seq`` is older than the window's oldest
        real event (archived real events are all older than it)."""
        cid = check_conversation_id(conversation_id)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise InvalidInputError(f"seq ({seq!r}) must be a whole number, 0 or more")
        _require_retracts(retracts)
        snapshot = yield from call("load", cid)
        active = snapshot.window.active
        ids = [e.id for e in active if (e.seq or 0) > seq]
        if snapshot.archived_count and (not active or seq < (active[0].seq or 0) - 1):
            history: list[Event] = yield from call("history", cid)
            ids = list(
                dict.fromkeys([*(e.id for e in history if e.is_real and (e.seq or 0) > seq), *ids])
            )
        if not ids:
            return []
        taken: list[Event] = yield from call("retract", cid, ids)
        return taken

    def history(
        self, conversation_id: str, include_retracted: bool, retracts: bool
    ) -> Steps[list[Event]]:
        """Every stored event oldest first; with ``include_retracted``, the retracted ones too."""
        cid = check_conversation_id(conversation_id)
        if not isinstance(include_retracted, bool):
            raise InvalidInputError(
                f"include_retracted ({include_retracted!r}) must be True or False"
            )
        events: list[Event] = yield from call("history", cid)
        if include_retracted and retracts:
            taken: list[Event] = yield from call("retracted", cid)
            events = sorted([*events, *taken], key=lambda e: e.seq or 0)
        return events

    def compactions(self, conversation_id: str) -> Steps[list[CompactionRecord]]:
        records = yield from call("compactions", check_conversation_id(conversation_id))
        return [CompactionRecord.from_json(record) for record in records]

    # -- reading ---------------------------------------------------------------------------

    def window(self, conversation_id: str) -> Steps[list[Event]]:
        snapshot = yield from call("load", check_conversation_id(conversation_id))
        return snapshot.window.events()

    def run_search(self, conversation_id: str, query: SearchQuery) -> Steps[SearchPage]:
        result = yield from call("search", check_conversation_id(conversation_id), query)
        return SearchPage(
            hits=[SearchHit.of(e) for e in result.events],
            page=query.offset // query.limit,
            page_size=query.limit,
            total=result.total,
        )

    def query(
        self,
        keyword: str,
        page: int,
        match_mode: str,
        page_size: int | None,
        include_recall_tools: bool,
    ) -> SearchQuery:
        size = page_size if page_size is not None else self.config.search_page_size
        return SearchQuery.build(keyword, match_mode, page, size, include_recall_tools)

    def fetch_tool_result(self, conversation_id: str, tool_call_id: str) -> Steps[Event | None]:
        """The newest stored result of a call: the window first, then the store's own lookup
        by id (pushed down where the store can; never the whole history on SQL)."""
        cid = check_conversation_id(conversation_id)
        tool_call_id = check_tool_call_id(tool_call_id)
        for events in (self.window(cid), call("find_tool_events", cid, [tool_call_id])):
            found = [
                e
                for e in (yield from events)
                if e.type is EventType.TOOL_RESULT and e.tool_call_id == tool_call_id
            ]
            if found:
                return found[-1]
        return None

    def stats(self, conversation_id: str) -> Steps[MemoryStats]:
        snapshot = yield from call("load", check_conversation_id(conversation_id))
        archived, summaries = yield from archived_counts(snapshot.conversation_id, snapshot)
        return MemoryStats(
            active_events=len(snapshot.window.active),
            archived_events=archived,
            archived_summaries=summaries,
            turns=snapshot.window.turn_count(),
            window_tokens=snapshot.window.tokens(),
            version=snapshot.version,
            last_compaction_error=snapshot.compaction_error,
        )

    # -- internals -------------------------------------------------------------------------

    def _prepare(
        self, cid: str, events: Event | Iterable[Event], finds_events: bool = False
    ) -> Steps[list[Event]]:
        if isinstance(events, Event):
            batch = [events]
        elif isinstance(events, Iterable):
            batch = list(events)
        else:
            raise InvalidEventError(f"events ({events!r}) must be an Event or a list of events")
        for i, event in enumerate(batch):
            if not isinstance(event, Event):
                raise InvalidEventError(
                    f"events[{i}] ({event!r}) is not an Event; build one with Event.user(...) etc."
                )
            if event.type is EventType.SUMMARY:
                raise InvalidEventError(
                    f"events[{i}] has type 'summary': summaries are written by compaction only"
                )
            if (
                event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT)
                and not event.tool_call_id
            ):
                raise InvalidEventError(
                    f"events[{i}].tool_call_id ({event.tool_call_id!r}) must be set for a {event.type.value}"
                )
            if event.type is EventType.TOOL_CALL and not event.tool_name:
                raise InvalidEventError(
                    f"events[{i}].tool_name ({event.tool_name!r}) must be set for a tool_call"
                )
        first_at: dict[str, int] = {}
        for i, event in enumerate(batch):
            j = first_at.setdefault(event.id, i)
            if j != i:
                raise InvalidEventError(
                    f"events[{i}].id ({event.id!r}) repeats events[{j}].id; every event needs its own id"
                )
        batch = [_as_stored_everywhere(i, e) for i, e in enumerate(batch)]
        pinned_at: dict[str, int] = {}
        for i, event in enumerate(batch):
            check_pin_key(i, event)
            if event.type is EventType.SYSTEM:
                j = pinned_at.setdefault(pin_key(event), i)
                if j != i:
                    raise InvalidEventError(
                        f"events[{i}] and events[{j}] are system events with the same pin key ({pin_key(event)!r}): "
                        "the later would supersede the earlier at once; add one of them"
                    )
        tool_names = yield from self._check_tool_events(cid, batch, finds_events)
        batch = [_named_after_call(e, tool_names) for e in batch]
        return [self._sized(i, e) for i, e in enumerate(batch)]

    def _sized(self, index: int, event: Event) -> Event:
        """The event with its token count, a tool result cut to ``max_tool_result_tokens``
        (with a visible note) when that is set; refused when it is larger than the whole
        context window, which no compaction could make room for."""
        tokens = count_event_tokens(event, self.token_counter)
        cap = self.config.max_tool_result_tokens
        if event.type is EventType.TOOL_RESULT and cap is not None and tokens > cap:
            event = truncate_tool_result(event, cap, tokens, self.token_counter)
            tokens = count_event_tokens(event, self.token_counter)
        window = self.config.context_window_tokens
        if tokens > window:
            hint = (
                " or set max_tool_result_tokens to cut tool results"
                if event.type is EventType.TOOL_RESULT
                else ""
            )
            raise InvalidEventError(
                f"events[{index}] ({event.type.value}) has {tokens} tokens, more than the whole context window "
                f"(context_window_tokens = {window}); shorten it{hint}"
            )
        return event.model_copy(
            update={"seq": None, "archived": False, "retracted": False, "tokens": tokens}
        )

    def _check_tool_events(
        self, cid: str, batch: list[Event], finds_events: bool = False
    ) -> Steps[dict[str, str | None]]:
        """Tool pairing (checked only when the list holds tool events): a call's id is new to
        the window; a result answers a call earlier in the list, in the window or, only when
        neither has it, in the archive, and that call has no result yet. Events already in
        the window (a retry) are skipped: they are not stored again. A check against a read,
        not inside the write: two writers racing to add different events for one call id are
        not both caught (a retry is: by id).

        What it reads: with ``finds_events`` (the store looks ids up by index), one
        ``find_events`` call for the list's tool event ids and call ids, window and archive
        at once, costing the list, not the conversation; otherwise one window read, plus one
        :meth:`Store.find_tool_events` lookup for the results whose call is in neither the
        list nor the window.

        Returns the tool name of each call the list's results answer (by call id), so that a
        result without a name can take its call's."""
        tool_batch = [e for e in batch if e.type in _TOOL_TYPES]
        if not tool_batch:
            return {}
        archived: list[Event] | None = None
        if finds_events:
            call_ids = list(dict.fromkeys(e.tool_call_id for e in tool_batch if e.tool_call_id))
            found: list[Event] = yield from call(
                "find_events", cid, [e.id for e in tool_batch], call_ids
            )
            stored_ids = {e.id for e in found if not e.archived}
            in_window = [e for e in found if not e.archived and e.type in _TOOL_TYPES]
            archived = [e for e in found if e.archived and e.type in _TOOL_TYPES]
        else:
            window = (yield from call("load", cid)).window
            stored_ids = {e.id for e in (*window.pinned, *window.active)}
            in_window = [e for e in window.active if e.type in _TOOL_TYPES]
        calls = {e.tool_call_id: e for e in in_window if e.type is EventType.TOOL_CALL}
        results = {e.tool_call_id: e for e in in_window if e.type is EventType.TOOL_RESULT}
        batch_calls: dict[str | None, int] = {}
        batch_results: dict[str | None, int] = {}
        unresolved: dict[str, int] = {}
        for i, event in enumerate(batch):
            call_id = event.tool_call_id
            if event.id in stored_ids or event.type not in _TOOL_TYPES:
                continue
            assert call_id is not None
            if event.type is EventType.TOOL_CALL:
                if call_id in batch_calls:
                    raise InvalidEventError(
                        f"events[{i}].tool_call_id ({call_id!r}) repeats the tool_call of events[{batch_calls[call_id]}]; "
                        "every tool call needs its own id"
                    )
                earlier = calls.get(call_id) or results.get(call_id)
                if earlier is not None:
                    raise InvalidEventError(
                        f"events[{i}].tool_call_id ({call_id!r}) is already in the window of conversation {cid!r} "
                        f"(the {earlier.type.value} at seq {earlier.seq}); every tool call needs its own id"
                    )
                batch_calls[call_id] = i
                continue
            if call_id in batch_results:
                raise InvalidEventError(
                    f"events[{i}] is a second tool_result for tool_call_id {call_id!r} (events[{batch_results[call_id]}] "
                    "is the first); a call takes one result"
                )
            answered = results.get(call_id)
            if answered is not None:
                raise _answered_already(i, call_id, cid, answered)
            batch_results[call_id] = i
            if call_id not in batch_calls and call_id not in calls:
                unresolved[call_id] = i
        names = {call_id: e.tool_name for call_id, e in calls.items()}
        names.update(
            {
                e.tool_call_id: e.tool_name
                for e in batch
                if e.type is EventType.TOOL_CALL and e.tool_call_id
            }
        )
        if not unresolved:
            return names
        if archived is None:
            archived = yield from call("find_tool_events", cid, list(unresolved))
        for call_id, i in unresolved.items():
            # (the window holds no event of an unresolved call id: these are archived ones)
            matches = [e for e in archived if e.tool_call_id == call_id]
            answered = next((e for e in matches if e.type is EventType.TOOL_RESULT), None)
            if answered is not None:
                raise _answered_already(i, call_id, cid, answered)
            found_call = next((e for e in matches if e.type is EventType.TOOL_CALL), None)
            if found_call is None:
                raise InvalidEventError(
                    f"events[{i}].tool_call_id ({call_id!r}) matches no tool_call in conversation {cid!r} "
                    "(window or archive); add the tool_call first (or earlier in the same list)"
                )
            names[call_id] = found_call.tool_name
        return names


def _event_ids(event_ids: Any) -> list[str]:
    """The ids a retraction names, each once, in order; a bare string is refused (it would
    read as a list of one-letter ids)."""
    if isinstance(event_ids, (str, bytes)) or not isinstance(event_ids, Iterable):
        raise InvalidInputError(
            f"event_ids ({event_ids!r}) must be a list of event ids, not a single value"
        )
    ids = list(event_ids)
    for i, event_id in enumerate(ids):
        if not isinstance(event_id, str) or not event_id:
            raise InvalidInputError(
                f"event_ids[{i}] ({event_id!r}) must be a non-empty string (an event id)"
            )
    return list(dict.fromkeys(ids))


def _require_retracts(retracts: bool) -> None:
    if not retracts:
        raise ConfigurationError(
            "this store cannot retract events (it lacks the Retracts ability: retract and retracted)"
        )


def _named_after_call(event: Event, tool_names: dict[str, str | None]) -> Event:
    """A tool result without a name takes its call's: search tells the recall tools' own
    results apart by name, whoever wrote the result."""
    if (
        event.type is not EventType.TOOL_RESULT
        or event.tool_name
        or event.tool_call_id not in tool_names
    ):
        return event
    return event.model_copy(update={"tool_name": tool_names[event.tool_call_id]})


_TOOL_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT)


def _answered_already(index: int, call_id: str, cid: str, result: Event) -> InvalidEventError:
    where = "archived" if result.archived else "in the window"
    return InvalidEventError(
        f"events[{index}] is a second tool_result for tool_call_id {call_id!r} in conversation {cid!r}: "
        f"the call already has its result (seq {result.seq}, {where}); a call takes one result"
    )


def _stored_copies(snapshot: Snapshot, batch: list[Event]) -> list[Event]:
    """The stored copy of each event of ``batch``, in its order: the one just appended or,
    for an event whose id was in the window already, the one stored before."""
    by_id = {e.id: e for e in (*snapshot.window.pinned, *snapshot.window.active)}
    try:
        return [by_id[e.id] for e in batch]
    except KeyError as exc:
        raise StorageError(
            f"the store's snapshot after appending to {snapshot.conversation_id!r} lacks event {exc.args[0]!r}"
        ) from None


def _as_stored_everywhere(index: int, event: Event) -> Event:
    """The event as every backend keeps it: its JSON envelope read back (a tuple becomes a
    list, NaN becomes null). What JSON cannot carry (a lone surrogate, a tool argument that
    is no JSON value) is refused here, alike on every backend, instead of failing in one
    driver and being kept as is by the in-memory store."""
    try:
        return Event.from_json(event.to_json())
    except ValueError as exc:
        raise InvalidEventError(f"events[{index}] cannot be stored as JSON: {exc}") from None


__all__ = ["MemoryCore", "MemoryStats"]
