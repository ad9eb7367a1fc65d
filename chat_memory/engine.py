"""ChatMemory: the engine. ``add`` appends atomically and compacts when a limit is exceeded
(plan with the strategy, summarise if needed, apply as compare-and-swap); the rest reads."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .backends.base import CompactsWhileAppending, Snapshot, Store, check_conversation_id
from .compaction import CompactionRecord, CompactionResult, Compactor
from .compression import compress_window
from .config import MemoryConfig
from .errors import ChatMemoryError, ConfigurationError, InvalidEventError, StorageError
from .events import Event, EventType
from .pins import check_pin_key, pin_key
from .render import to_anthropic, to_openai
from .search import SearchHit, SearchPage, SearchQuery
from .strategies import Strategy, strategy_for
from .summarizer import Summarizer, as_summarizer
from .tokens import TokenCounter, count_event_tokens, default_token_counter, truncate_tool_result
from .tools import ConversationSearchTool, FetchToolResultTool

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class MemoryStats:
    """Counts for one conversation."""

    active_events: int
    archived_events: int
    turns: int
    window_tokens: int
    version: int
    last_compaction_error: str | None


class ChatMemory:
    """Chat memory over a store: an append-only event log, a bounded window, an archive,
    and a search over everything.

    >>> memory = ChatMemory(open_store("memory://"), MemoryConfig(compaction_strategy="turn_window", max_turns=3))
    >>> memory.add("conv-1", [Event.user("Hi"), Event.assistant("Hello")])
    """

    def __init__(
        self,
        store: Store,
        config: MemoryConfig | dict[str, Any] | None = None,
        summarizer: Summarizer | Any = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if isinstance(config, dict):
            config = MemoryConfig.from_mapping(config)
        if config is not None and not isinstance(config, MemoryConfig):
            raise ConfigurationError(f"config ({config!r}) must be a MemoryConfig, a dict of settings or None")
        self.store = store
        self.config = config or MemoryConfig()
        self.summarizer = as_summarizer(summarizer)
        self.strategy: Strategy = strategy_for(self.config)
        if self.strategy.summarizes and self.summarizer is None:
            raise ConfigurationError(
                f"Summarizer model must be configured for {self.strategy.label.lower()} "
                "(pass summarizer=AnthropicSummarizer(model=...) or a summarize function)"
            )
        self.token_counter = token_counter or default_token_counter()
        self._compactor = Compactor(self.store, self.config, self.strategy, self.summarizer, self.token_counter, self.history)

    # -- writing ---------------------------------------------------------------------------

    def add(self, conversation_id: str, events: Event | Iterable[Event]) -> list[Event]:
        """Append one event or a list, atomically and in order, then compact if the
        strategy's limit is exceeded. Returns the stored events (with ``seq`` and
        ``tokens``). A failing compaction does not fail the append: it is logged and shown
        by :meth:`stats` and retried at the next trigger.

        Idempotent per event id: an event whose ``id`` is already in the window is not
        stored again, and its stored copy is returned in its place (the others of the list
        are appended, in order), so retrying a failed ``add()`` is safe. Tool events are
        checked first (:class:`InvalidEventError` naming the id): a ``tool_call`` id may not
        already be in the window, and a ``tool_result`` must answer a call that exists in
        the conversation (earlier in the list, in the window, or archived) and has no
        result yet. See docs/tool-pairs.md."""
        cid = check_conversation_id(conversation_id)
        batch = self._prepare(cid, events)
        if not batch:
            return []
        if not self.strategy.summarizes and isinstance(self.store, CompactsWhileAppending):
            # planning is pure here: let the store compact in the same write as the append
            snapshot, _ = self.store.append_compacting(cid, batch, self._compactor.plan_without_summary)
            return _stored_copies(snapshot, batch)
        snapshot = self.store.append(cid, batch)
        stored = _stored_copies(snapshot, batch)
        cut = self.strategy.plan(snapshot.window)
        if cut is not None:
            try:
                self._compactor.compact(cid, snapshot, cut)
            except ChatMemoryError as exc:
                log.warning("chat-memory: compaction of %r failed, will retry at the next trigger: %s", cid, exc)
                self._record_compaction_error(cid, exc)
        return stored

    def _record_compaction_error(self, cid: str, error: ChatMemoryError) -> None:
        """Keep the reason for stats(); a store too broken to take it is logged, not raised
        (the original error is the one that matters)."""
        try:
            self.store.record_compaction_error(cid, f"{type(error).__name__}: {error}")
        except ChatMemoryError:
            log.warning("chat-memory: could not record the compaction error of %r", cid, exc_info=True)

    def compact(self, conversation_id: str, force: bool = False) -> CompactionResult:
        """Run the strategy now (the "Compact" button); raises when the summarizer or the
        store fails. With ``force``, archive every turn but the newest whatever the limit
        says (the overflow safety net): with a new summary when the strategy summarises
        (archiving under a note of the gap if the summarizer fails), otherwise under a short
        stub summary saying how many events were archived and that ``conversation_search``
        reaches them."""
        cid = check_conversation_id(conversation_id)
        try:
            return self._compactor.compact(cid, self.store.load(cid), force=force)
        except ChatMemoryError as exc:
            self._record_compaction_error(cid, exc)
            raise

    def compactions(self, conversation_id: str) -> list[CompactionRecord]:
        """The conversation's newest compactions (50 at most), oldest first: strategy, events
        archived, tokens before and after, summarizer and its latency, fallback or not."""
        records = self.store.compactions(check_conversation_id(conversation_id))
        return [CompactionRecord.from_json(record) for record in records]

    def clear(self, conversation_id: str) -> None:
        """Delete the conversation: window, summary and archive."""
        self.store.clear(check_conversation_id(conversation_id))

    # -- reading ---------------------------------------------------------------------------

    def window(self, conversation_id: str) -> list[Event]:
        """What the model sees now: pinned system events, the summary, the active events."""
        return self.store.load(check_conversation_id(conversation_id)).window.events()

    def history(self, conversation_id: str) -> list[Event]:
        """Every stored event, archived included, oldest first."""
        return self.store.history(check_conversation_id(conversation_id))

    def search(
        self,
        conversation_id: str,
        keyword: str,
        page: int = 0,
        match_mode: str = "phrase",
        page_size: int | None = None,
        include_recall_tools: bool = False,
    ) -> SearchPage:
        """Literal, case-insensitive search over the whole conversation, oldest match first,
        pages counted from 0. The calls and results of ``conversation_search`` and
        ``fetch_tool_result`` (which only echo other events) are left out unless
        ``include_recall_tools``."""
        size = page_size if page_size is not None else self.config.search_page_size
        return self.run_search(conversation_id, SearchQuery.build(keyword, match_mode, page, size, include_recall_tools))

    def run_search(self, conversation_id: str, query: SearchQuery) -> SearchPage:
        """Run an already validated query and page its results."""
        result = self.store.search(check_conversation_id(conversation_id), query)
        return SearchPage(
            hits=[SearchHit.of(e) for e in result.events],
            page=query.offset // query.limit,
            page_size=query.limit,
            total=result.total,
        )

    def search_tool(self, conversation_id: str) -> ConversationSearchTool:
        """The ``conversation_search`` tool bound to one conversation."""
        return ConversationSearchTool(self.run_search, check_conversation_id(conversation_id), self.config.search_page_size)

    def fetch_tool(self, conversation_id: str) -> FetchToolResultTool:
        """The ``fetch_tool_result`` tool bound to one conversation (pair it with
        ``compress_tool_results``: stubs tell the model to call it)."""
        return FetchToolResultTool(self.fetch_tool_result, check_conversation_id(conversation_id))

    def fetch_tool_result(self, conversation_id: str, tool_call_id: str) -> Event | None:
        """The stored (full) result of the tool call ``tool_call_id``, archived or not; the
        newest when there are several; None when there is none. Reads the window first and
        the history only for results no longer in view."""
        cid = check_conversation_id(conversation_id)
        for events in (lambda: self.window(cid), lambda: self.history(cid)):
            found = [e for e in events() if e.type is EventType.TOOL_RESULT and e.tool_call_id == tool_call_id]
            if found:
                return found[-1]
        return None

    def model_window(self, conversation_id: str) -> list[Event]:
        """The window as the model is shown it: :meth:`window` with large tool results it has
        already read replaced by stubs when ``compress_tool_results`` is on (see
        :mod:`chat_memory.compression`); the stored events are unchanged."""
        return compress_window(self.window(conversation_id), self.config, self.token_counter)

    def to_anthropic(self, conversation_id: str, system_prompt: str | None = None, **options: Any) -> Any:
        """``(system, messages)`` for the Anthropic Messages API from :meth:`model_window`,
        with this memory's ``summary_placement`` (``options`` go to
        :func:`chat_memory.to_anthropic` and may override it)."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_anthropic(self.model_window(conversation_id), system_prompt, **options)

    def to_openai(self, conversation_id: str, system_prompt: str | None = None, **options: Any) -> Any:
        """Chat Completions messages from :meth:`model_window`, with this memory's
        ``summary_placement`` (see :func:`chat_memory.to_openai`)."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_openai(self.model_window(conversation_id), system_prompt, **options)

    def stats(self, conversation_id: str) -> MemoryStats:
        """Counts of the window and archive, the version, and the last compaction error."""
        snapshot = self.store.load(check_conversation_id(conversation_id))
        return MemoryStats(
            active_events=len(snapshot.window.active),
            archived_events=snapshot.archived_count,
            turns=snapshot.window.turn_count(),
            window_tokens=snapshot.window.tokens(),
            version=snapshot.version,
            last_compaction_error=snapshot.compaction_error,
        )

    # -- internals -------------------------------------------------------------------------

    def _prepare(self, cid: str, events: Event | Iterable[Event]) -> list[Event]:
        if isinstance(events, Event):
            batch = [events]
        elif isinstance(events, Iterable):
            batch = list(events)
        else:
            raise InvalidEventError(f"events ({events!r}) must be an Event or a list of events")
        for i, event in enumerate(batch):
            if not isinstance(event, Event):
                raise InvalidEventError(f"events[{i}] ({event!r}) is not an Event; build one with Event.user(...) etc.")
            if event.type is EventType.SUMMARY:
                raise InvalidEventError(f"events[{i}] has type 'summary': summaries are written by compaction only")
            if event.type in (EventType.TOOL_CALL, EventType.TOOL_RESULT) and not event.tool_call_id:
                raise InvalidEventError(f"events[{i}].tool_call_id ({event.tool_call_id!r}) must be set for a {event.type.value}")
            if event.type is EventType.TOOL_CALL and not event.tool_name:
                raise InvalidEventError(f"events[{i}].tool_name ({event.tool_name!r}) must be set for a tool_call")
        first_at: dict[str, int] = {}
        for i, event in enumerate(batch):
            j = first_at.setdefault(event.id, i)
            if j != i:
                raise InvalidEventError(f"events[{i}].id ({event.id!r}) repeats events[{j}].id; every event needs its own id")
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
        tool_names = self._check_tool_events(cid, batch)
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
            hint = " or set max_tool_result_tokens to cut tool results" if event.type is EventType.TOOL_RESULT else ""
            raise InvalidEventError(
                f"events[{index}] ({event.type.value}) has {tokens} tokens, more than the whole context window "
                f"(context_window_tokens = {window}); shorten it{hint}"
            )
        return event.model_copy(update={"seq": None, "archived": False, "tokens": tokens})

    def _check_tool_events(self, cid: str, batch: list[Event]) -> dict[str, str | None]:
        """Tool pairing, checked against one window read (and only when the list holds tool
        events): a call's id is new to the window; a result answers a call earlier in the
        list, in the window or, only when neither has it, in the archive (one
        :meth:`Store.find_tool_events` lookup for all such results), and that call has no
        result yet. Events already in the window (a retry) are skipped: they are not stored
        again. A check against a read, not inside the write: two writers racing to add
        different events for one call id are not both caught (a retry is: by id).

        Returns the tool name of each call the list's results answer (by call id), so that a
        result without a name can take its call's."""
        if not any(e.type in _TOOL_TYPES for e in batch):
            return {}
        window = self.store.load(cid).window
        stored_ids = {e.id for e in (*window.pinned, *window.active)}
        calls = {e.tool_call_id: e for e in window.active if e.type is EventType.TOOL_CALL}
        results = {e.tool_call_id: e for e in window.active if e.type is EventType.TOOL_RESULT}
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
        names.update({e.tool_call_id: e.tool_name for e in batch if e.type is EventType.TOOL_CALL and e.tool_call_id})
        if not unresolved:
            return names
        found = self.store.find_tool_events(cid, list(unresolved))
        for call_id, i in unresolved.items():
            matches = [e for e in found if e.tool_call_id == call_id]
            answered = next((e for e in matches if e.type is EventType.TOOL_RESULT), None)
            if answered is not None:
                raise _answered_already(i, call_id, cid, answered)
            call = next((e for e in matches if e.type is EventType.TOOL_CALL), None)
            if call is None:
                raise InvalidEventError(
                    f"events[{i}].tool_call_id ({call_id!r}) matches no tool_call in conversation {cid!r} "
                    "(window or archive); add the tool_call first (or earlier in the same list)"
                )
            names[call_id] = call.tool_name
        return names
        return {**window_calls, **calls}


def _named_after_call(event: Event, tool_names: dict[str, str | None]) -> Event:
    """A tool result without a name takes its call's: search tells the recall tools' own
    results apart by name, whoever wrote the result."""
    if event.type is not EventType.TOOL_RESULT or event.tool_name or event.tool_call_id not in tool_names:
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
