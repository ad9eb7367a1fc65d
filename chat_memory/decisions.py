"""The engine's decisions, what :class:`~chat_memory.ChatMemory` and
:class:`~chat_memory.AsyncChatMemory` share: written once as steps (:mod:`chat_memory.steps`)
that either drives: the settings (and a summarizer of the kind the memory can call), the
append-then-compact of ``add`` (its events checked by :mod:`chat_memory.event_checks`), the
compaction plan (:mod:`chat_memory.compaction`), retraction, and turning snapshots into
stats and pages."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import steps, telemetry
from .backends.base import Snapshot, check_conversation_id
from .compaction import CompactionRecord, CompactionResult, Compactor
from .config import MemoryConfig
from .errors import (
    ChatMemoryError,
    ConfigurationError,
    InvalidInputError,
    StorageError,
)
from .event_checks import prepared_batch, tool_checked, tool_event_ids
from .events import Event, EventType
from .search import SearchHit, SearchPage, SearchQuery, check_tool_call_id
from .steps import Steps
from .strategies import Strategy, strategy_for
from .summarizer import FunctionSummarizer, Summarizer, as_summarizer, is_async_summarizer
from .summary_state import archived_counts
from .tokens import TokenCounter, default_token_counter

log = logging.getLogger("chat_memory.engine")


@dataclass(frozen=True)
class MemoryStats:
    """Counts for one conversation. ``archived_events`` counts archived events that are not
    summaries: real events and superseded pinned system events, so ``active_events +
    archived_events`` is every real event added while no pin was superseded and the archive
    cap dropped nothing; ``archived_summaries`` counts the replaced summaries kept in the
    archive (docs/lean-window.md). ``compaction_failures`` counts the compactions that failed
    since the last one that applied (kept in the store; docs/safety-nets.md)."""

    active_events: int
    archived_events: int
    turns: int
    window_tokens: int
    version: int
    last_compaction_error: str | None
    archived_summaries: int = 0
    compaction_failures: int = 0


class MemoryDecisions:
    """The settings and the shared steps of one memory (sync or async)."""

    def __init__(
        self,
        config: MemoryConfig | dict[str, Any] | None,
        summarizer: Summarizer | Any,
        token_counter: TokenCounter | None,
        *,
        asynchronous: bool,
    ) -> None:
        """``asynchronous``: the memory is an AsyncChatMemory (it awaits an ``async def``
        summarizer); a ChatMemory refuses one, which it could only call without awaiting."""
        if isinstance(config, dict):
            config = MemoryConfig.from_mapping(config)
        if config is not None and not isinstance(config, MemoryConfig):
            raise ConfigurationError(
                f"config ({config!r}) must be a MemoryConfig, a dict of settings or None"
            )
        self.config = config or MemoryConfig()
        self.summarizer = as_summarizer(summarizer)
        _check_summarizer_kind(self.summarizer, asynchronous)
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
        checks_tool_pairs: bool = False,
    ) -> Steps[list[Event]]:
        """Validate, append, and compact when the strategy's limit is exceeded (see ChatMemory.add).

        ``appends_without_window``: the store has the
        :class:`~chat_memory.backends.base.AppendsWithoutWindow` ability (``append_without_window``
        and ``find_events``, by index). The tool-pair check then looks the batch's ids up
        instead of reading the window, and a strategy that never compacts needs nothing else,
        so its append costs the batch, not the conversation's length.

        ``checks_tool_pairs``: the store has :class:`~chat_memory.backends.base.ChecksToolPairs`;
        a batch holding tool events is then checked inside the append (:func:`tool_checked`,
        on what the append's own write reads) instead of against a read before it."""
        cid = check_conversation_id(conversation_id)
        batch = yield from prepared_batch(
            cid,
            events,
            self.config,
            self.token_counter,
            appends_without_window,
            checked_in_store=checks_tool_pairs,
        )
        if not batch:
            return []
        check = (
            functools.partial(tool_checked, cid, batch)
            if checks_tool_pairs and tool_event_ids(batch)
            else None
        )
        if not self.strategy.compacts and appends_without_window:
            stored = yield from steps.append_without_window(cid, batch, check)
            return stored
        if not self.strategy.summarizes and compacts_while_appending:
            # planning is pure here: let the store compact in the same write as the append
            planner = telemetry.watched_planner(cid, self.compactor.plan_without_summary)
            snapshot, compacted = yield from steps.append_compacting(cid, batch, planner, check)
            telemetry.store_compacted(planner, compacted)
            return _stored_copies(snapshot, batch)
        snapshot = yield from steps.append(cid, batch, check)
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
                    exc_info=True,  # the driver's own error is chained below ours
                )
                yield from self._record_compaction_error(cid, exc)
        return stored

    def _record_compaction_error(self, cid: str, error: ChatMemoryError) -> Steps[None]:
        """Keep the reason for stats(); a store too broken to take it is logged, not raised
        (the original error is the one that matters)."""
        try:
            yield from steps.record_compaction_error(cid, f"{type(error).__name__}: {error}")
        except ChatMemoryError:
            log.warning(
                "chat-memory: could not record the compaction error of %r", cid, exc_info=True
            )

    def compact(self, conversation_id: str, force: bool) -> Steps[CompactionResult]:
        """Run the strategy now (see ChatMemory.compact)."""
        cid = check_conversation_id(conversation_id)
        try:
            snapshot = yield from steps.load(cid)
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
        return (yield from steps.retract(cid, ids))

    def rewind(self, conversation_id: str, seq: int, retracts: bool) -> Steps[list[Event]]:
        """Retract every real event after ``seq`` (see ChatMemory.rewind). The ids come from
        the window, and from the history only when ``seq`` is older than the window's oldest
        real event (archived real events are all older than it)."""
        cid = check_conversation_id(conversation_id)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise InvalidInputError(f"seq ({seq!r}) must be a whole number, 0 or more")
        _require_retracts(retracts)
        snapshot = yield from steps.load(cid)
        active = snapshot.window.active
        ids = [e.id for e in active if (e.seq or 0) > seq]
        if snapshot.archived_count and (not active or seq < (active[0].seq or 0) - 1):
            history = yield from steps.history(cid)
            ids = list(
                dict.fromkeys([*(e.id for e in history if e.is_real and (e.seq or 0) > seq), *ids])
            )
        if not ids:
            return []
        return (yield from steps.retract(cid, ids))

    def history(
        self, conversation_id: str, include_retracted: bool, retracts: bool
    ) -> Steps[list[Event]]:
        """Every stored event oldest first; with ``include_retracted``, the retracted ones too."""
        cid = check_conversation_id(conversation_id)
        if not isinstance(include_retracted, bool):
            raise InvalidInputError(
                f"include_retracted ({include_retracted!r}) must be True or False"
            )
        events = yield from steps.history(cid)
        if include_retracted and retracts:
            taken = yield from steps.retracted(cid)
            events = sorted([*events, *taken], key=lambda e: e.seq or 0)
        return events

    def fork(
        self, conversation_id: str, new_conversation_id: str, at: int | None, forks: bool
    ) -> Steps[list[Event]]:
        """Fork a conversation (see ChatMemory.fork); ``forks``: the store has the
        :class:`~chat_memory.backends.base.Forks` ability. Returns the fork's window."""
        cid = check_conversation_id(conversation_id)
        new_cid = check_conversation_id(new_conversation_id)
        if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
            raise InvalidInputError(
                f"at ({at!r}) must be a seq (a whole number, 0 or more) or None"
            )
        if cid == new_cid:
            raise InvalidInputError(
                f"new_conversation_id ({new_cid!r}) must differ from the conversation forked"
            )
        if not forks:
            raise ConfigurationError(
                "this store cannot fork conversations (it lacks the Forks ability: fork)"
            )
        snapshot = yield from steps.fork(cid, new_cid, at)
        return snapshot.window.events()

    def compactions(self, conversation_id: str) -> Steps[list[CompactionRecord]]:
        records = yield from steps.compactions(check_conversation_id(conversation_id))
        return [CompactionRecord.from_json(record) for record in records]

    # -- reading ---------------------------------------------------------------------------

    def window(self, conversation_id: str) -> Steps[list[Event]]:
        snapshot = yield from steps.load(check_conversation_id(conversation_id))
        return snapshot.window.events()

    def run_search(self, conversation_id: str, query: SearchQuery) -> Steps[SearchPage]:
        result = yield from steps.search(check_conversation_id(conversation_id), query)
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
        for events in (self.window(cid), steps.find_tool_events(cid, [tool_call_id])):
            found = [
                e
                for e in (yield from events)
                if e.type is EventType.TOOL_RESULT and e.tool_call_id == tool_call_id
            ]
            if found:
                return found[-1]
        return None

    def stats(self, conversation_id: str) -> Steps[MemoryStats]:
        snapshot = yield from steps.load(check_conversation_id(conversation_id))
        archived, summaries = yield from archived_counts(snapshot.conversation_id, snapshot)
        return MemoryStats(
            active_events=len(snapshot.window.active),
            archived_events=archived,
            archived_summaries=summaries,
            turns=snapshot.window.turn_count(),
            window_tokens=snapshot.window.tokens(),
            version=snapshot.version,
            last_compaction_error=snapshot.compaction_error,
            compaction_failures=snapshot.compaction_failures,
        )


def _check_summarizer_kind(summarizer: Summarizer | None, asynchronous: bool) -> None:
    """Refuse, when the memory is built, a summarizer the memory could never get a summary
    from: an ``async def`` one under ChatMemory (it would be called without being awaited, and
    every compaction would fall back as if the summarizer were down), and under either memory
    one that yields its answer (a generator) instead of returning it. A sync summarizer under
    AsyncChatMemory works: it runs in a worker thread."""
    if summarizer is None:
        return
    target = summarizer.function if isinstance(summarizer, FunctionSummarizer) else summarizer
    if _yields(summarizer):
        raise ConfigurationError(
            f"summarizer ({target!r}) is a generator: summarize(previous, events, upcoming) "
            "must return the summary text, not yield it"
        )
    if is_async_summarizer(summarizer) and not asynchronous:
        raise ConfigurationError(
            f"summarizer ({target!r}) is async (its summarize is a coroutine function), and "
            "ChatMemory cannot await it: use AsyncChatMemory, or a sync summarizer "
            "(AnthropicSummarizer rather than AsyncAnthropicSummarizer)"
        )


def _yields(summarizer: Summarizer) -> bool:
    function = (
        summarizer.function
        if isinstance(summarizer, FunctionSummarizer)
        else getattr(summarizer, "summarize", None)
    )
    return inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)


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


def _stored_copies(snapshot: Snapshot, batch: list[Event]) -> list[Event]:
    """The stored copy of each event of ``batch``, in its order: the one just appended or,
    for an event whose id was in the window already, the one stored before."""
    active = snapshot.window.active
    start = len(active) - len(batch)
    if start >= 0:
        # the common case, looked at first: the batch is the window's newest events (ids are
        # unique in a window, so these are the very copies the look-up below would find)
        for stored, event in zip(active[start:], batch):
            if stored.id != event.id:
                break
        else:
            return list(active[start:])
    by_id = {e.id: e for e in (*snapshot.window.pinned, *active)}
    try:
        return [by_id[e.id] for e in batch]
    except KeyError as exc:
        raise StorageError(
            f"the store's snapshot after appending to {snapshot.conversation_id!r} lacks event {exc.args[0]!r}"
        ) from None


__all__ = ["MemoryDecisions", "MemoryStats"]
