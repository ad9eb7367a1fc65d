"""ChatMemory: the engine. ``add`` appends atomically and compacts when a limit is exceeded
(plan with the strategy, summarise if needed, apply as compare-and-swap); the rest reads.
Every decision lives in :mod:`chat_memory.decisions`, shared with :class:`~chat_memory.AsyncChatMemory`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .backends.base import (
    ChecksToolPairs,
    CompactsWhileAppending,
    KeepsLifecycle,
    Store,
    check_conversation_id,
)
from .compaction import CompactionRecord, CompactionResult
from .compression import compress_window
from .config import MemoryConfig
from .decisions import MemoryDecisions, MemoryStats
from .events import Event
from .lifecycle import decisions as lifecycle
from .lifecycle.keys import Scope
from .lifecycle.records import ConversationInfo, ErasureReceipt, SweepReport
from .lifecycle.scoped import scoped_view
from .render import to_anthropic, to_openai
from .search import SearchPage, SearchQuery
from .steps import run
from .summarizer import Summarizer
from .telemetry import ADD, SEARCH, WINDOW, traced
from .tokens import TokenCounter
from .tools import ConversationSearchTool, FetchToolResultTool


class ChatMemory:
    """Chat memory over a store: an append-only event log, a bounded window, an archive,
    and a search over everything.

    The summarizer is sync (``AnthropicSummarizer``, a function): an ``async def`` one is
    refused when the memory is built (:class:`ConfigurationError`); it needs
    :class:`~chat_memory.AsyncChatMemory`.

    >>> memory = ChatMemory(open_store("memory://"), MemoryConfig(compaction_strategy="turn_window", max_turns=3))
    >>> memory.add("conv-1", [Event.user("Hi"), Event.assistant("Hello")])
    """

    #: The scope (user, app) this memory is bound to by :meth:`for_user`; None: unbound.
    scope: Scope | None = None

    def __init__(
        self,
        store: Store,
        config: MemoryConfig | dict[str, Any] | None = None,
        summarizer: Summarizer | Any = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self._decisions = MemoryDecisions(config, summarizer, token_counter, asynchronous=False)
        self.store = store
        self.config = self._decisions.config
        self.summarizer = self._decisions.summarizer
        self.strategy = self._decisions.strategy
        self.token_counter = self._decisions.token_counter
        #: the store add() last ran on, and its append abilities (see _append_abilities)
        self._abilities: tuple[Store, bool, bool, bool] | None = None

    # -- writing ---------------------------------------------------------------------------

    @traced(ADD)
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
        store = self.store
        known = self._abilities
        if known is None or known[0] is not store:  # found once per store, not per add
            known = self._abilities = (store, *_append_abilities(store))
        _, compacting, lean, checks = known
        return run(self._decisions.add(conversation_id, events, compacting, lean, checks), store)

    def compact(self, conversation_id: str, force: bool = False) -> CompactionResult:
        """Run the strategy now (the "Compact" button); raises when the summarizer or the
        store fails. With ``force``, archive every turn but the newest whatever the limit
        says (the overflow safety net): with a new summary when the strategy summarises
        (archiving under a note of the gap if the summarizer fails), otherwise under a short
        stub summary saying how many events were archived and that ``conversation_search``
        reaches them."""
        return run(self._decisions.compact(conversation_id, force), self.store)

    def compactions(self, conversation_id: str) -> list[CompactionRecord]:
        """The conversation's newest compactions (50 at most), oldest first: strategy, events
        archived, tokens before and after, summarizer and its latency, fallback or not."""
        return run(self._decisions.compactions(conversation_id), self.store)

    def retract(self, conversation_id: str, event_ids: Iterable[str]) -> list[Event]:
        """Take events back, atomically: they leave :meth:`window`, :meth:`model_window`,
        :meth:`history`, :meth:`search`, :meth:`fetch_tool_result` and :meth:`stats`, and
        their ids and call ids may be added again; ``history(conv, include_retracted=True)``
        still shows them, marked ``retracted``, until :meth:`clear`. A tool call and its
        result go together (naming either retracts both, window or archive). Unknown and
        already retracted ids are ignored. Returns what was retracted, oldest first.
        An id naming a pinned system event or a summary raises :class:`InvalidInputError`
        and nothing is written. seq numbers are never reused. See docs/retraction.md."""
        return run(
            self._decisions.retract(conversation_id, event_ids, _retracts(self.store)), self.store
        )

    def rewind(self, conversation_id: str, seq: int) -> list[Event]:
        """Retract every real event with a seq greater than ``seq`` (edit-and-resend, undo;
        0 retracts them all). Returns what was retracted, oldest first (see :meth:`retract`)."""
        return run(self._decisions.rewind(conversation_id, seq, _retracts(self.store)), self.store)

    def fork(
        self, conversation_id: str, new_conversation_id: str, at: int | None = None
    ) -> list[Event]:
        """Start ``new_conversation_id`` as an independent copy of the conversation as it was
        right after the event with seq ``at`` was stored (None: as it is now): its window is
        exactly the window then (the summary in force, archive flags and retractions as they
        were), its history the history then, and its next event gets seq ``at + 1``. Later
        writes to either conversation never show in the other. Returns the fork's window.
        :class:`InvalidInputError` when the conversation is not stored, the new id is, or
        ``at`` is out of range (or so far back that the archive cap deleted what its window
        showed); :class:`ConfigurationError` on a store without the Forks ability. See
        docs/lifecycle.md ("Fork")."""
        return run(
            self._decisions.fork(
                conversation_id,
                new_conversation_id,
                at,
                callable(getattr(self.store, "fork", None)),
            ),
            self.store,
        )

    def clear(self, conversation_id: str) -> None:
        """Delete the conversation: window, summary, archive and retracted events."""
        self.store.clear(check_conversation_id(conversation_id))

    # -- reading ---------------------------------------------------------------------------

    @traced(WINDOW)
    def window(self, conversation_id: str) -> list[Event]:
        """What the model sees now: pinned system events, the summary, the active events."""
        return run(self._decisions.window(conversation_id), self.store)

    def history(self, conversation_id: str, include_retracted: bool = False) -> list[Event]:
        """Every stored event, archived included, oldest first; retracted events only with
        ``include_retracted`` (marked ``retracted=True``, in seq order)."""
        return run(
            self._decisions.history(conversation_id, include_retracted, _retracts(self.store)),
            self.store,
        )

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
        return self.run_search(
            conversation_id,
            self._decisions.query(keyword, page, match_mode, page_size, include_recall_tools),
        )

    @traced(SEARCH)
    def run_search(self, conversation_id: str, query: SearchQuery) -> SearchPage:
        """Run an already validated query and page its results."""
        return run(self._decisions.run_search(conversation_id, query), self.store)

    def search_tool(self, conversation_id: str) -> ConversationSearchTool:
        """The ``conversation_search`` tool bound to one conversation."""
        return ConversationSearchTool(
            self.run_search, check_conversation_id(conversation_id), self.config.search_page_size
        )

    def fetch_tool(self, conversation_id: str) -> FetchToolResultTool:
        """The ``fetch_tool_result`` tool bound to one conversation (pair it with
        ``compress_tool_results``: stubs tell the model to call it)."""
        return FetchToolResultTool(self.fetch_tool_result, check_conversation_id(conversation_id))

    def fetch_tool_result(self, conversation_id: str, tool_call_id: str) -> Event | None:
        """The stored (full) result of the tool call ``tool_call_id``, archived or not; the
        newest when there are several; None when there is none. Reads the window first and
        the history only for results no longer in view."""
        return run(self._decisions.fetch_tool_result(conversation_id, tool_call_id), self.store)

    def model_window(self, conversation_id: str) -> list[Event]:
        """The window as the model is shown it: :meth:`window` with large tool results it has
        already read replaced by stubs when ``compress_tool_results`` is on (see
        :mod:`chat_memory.compression`); the stored events are unchanged."""
        return compress_window(self.window(conversation_id), self.config, self.token_counter)

    def to_anthropic(
        self, conversation_id: str, system_prompt: str | None = None, **options: Any
    ) -> Any:
        """``(system, messages)`` for the Anthropic Messages API from :meth:`model_window`,
        with this memory's ``summary_placement`` (``options`` go to
        :func:`chat_memory.to_anthropic` and may override it)."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_anthropic(self.model_window(conversation_id), system_prompt, **options)

    def to_openai(
        self, conversation_id: str, system_prompt: str | None = None, **options: Any
    ) -> Any:
        """Chat Completions messages from :meth:`model_window`, with this memory's
        ``summary_placement`` (see :func:`chat_memory.to_openai`)."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_openai(self.model_window(conversation_id), system_prompt, **options)

    def stats(self, conversation_id: str) -> MemoryStats:
        """Counts of the window and archive, the version, and the last compaction error."""
        return run(self._decisions.stats(conversation_id), self.store)

    # -- whose it is, how long it lives (docs/lifecycle.md) ------------------------------------

    def for_user(self, user: str, app: str | None = None) -> ChatMemory:
        """This memory bound to the scope (``user``, ``app``): same config, store, summarizer
        and token counter; its conversation ids are resolved inside the scope, by construction
        (two users' ``"conv-1"`` are different conversations, and no id reaches another
        scope's). Works on every store; listing, sweeping and forgetting need the store's
        ``KeepsLifecycle`` ability. Scopes do not nest (a bound memory refuses)."""
        scope = Scope(user, app)
        bound = ChatMemory(
            scoped_view(self.store, scope), self.config, self.summarizer, self.token_counter
        )
        bound.scope = scope
        return bound

    def set_metadata(
        self,
        conversation_id: str,
        title: str | None = None,
        tags: Iterable[str] | None = None,
        **values: Any,
    ) -> ConversationInfo:
        """Set the conversation's ``title`` and ``tags`` (None leaves them; ``tags`` replaces
        the set) and merge free JSON key-values (a value None removes its key); refreshes its
        last activity. A conversation not stored yet is created, empty. Returns its info."""
        return run(
            lifecycle.set_metadata(
                self.scope, conversation_id, title, tags, values, _keeps(self.store)
            ),
            self.store,
        )

    def conversations(
        self, tag: str | None = None, page: int = 1, page_size: int = 50
    ) -> list[ConversationInfo]:
        """This memory's conversations (the bound scope's; the unbound memory's: those with
        bare ids), with ``tag`` if given, newest activity first, ``page`` from 1, at most
        ``page_size`` (1 to 500) per page, through the store's index."""
        return run(
            lifecycle.conversations(self.scope, tag, page, page_size, _keeps(self.store)),
            self.store,
        )

    def sweep(self) -> SweepReport:
        """Delete — not hide — conversations idle longer than ``retention_seconds`` (the bound
        scope's; for the unbound memory, every conversation of the store), with everything they
        own, and long-term namespaces past their own retention. Incremental and safe from many
        processes at once: each delete is conditional, so a conversation written to during
        the sweep is kept. Without a retention, conversations are kept (the report says so)."""
        return run(
            lifecycle.sweep(self.scope, self.config.retention_seconds, _keeps(self.store)),
            self.store,
        )

    def forget(
        self,
        user: str | None = None,
        app: str | None = None,
        conversation: str | None = None,
    ) -> ErasureReceipt:
        """Erase a user's scope — every conversation, archived event, summary, compaction
        record, retracted event and metadata, and the long-term namespaces made with
        ``long_term_memory(store, ns, user=user, app=app)`` with their versions — or one
        ``conversation`` of this memory's scope. Returns what was deleted, by kind;
        idempotent. A write racing the erasure is erased too, or refused for
        :data:`~chat_memory.lifecycle.decisions.ERASURE_GUARD_SECONDS` after it. A bound
        memory forgets only its own user."""
        return run(
            lifecycle.forget(self.scope, user, app, conversation, _keeps(self.store)),
            self.store,
        )


def _append_abilities(store: Store) -> tuple[bool, bool, bool]:
    """Which of its appends ``add()`` can use on ``store``: CompactsWhileAppending,
    AppendsWithoutWindow (found by name, as the async engine does) and ChecksToolPairs."""
    lean = all(
        callable(getattr(store, name, None)) for name in ("append_without_window", "find_events")
    )
    return (
        isinstance(store, CompactsWhileAppending),
        lean,
        isinstance(store, ChecksToolPairs),
    )


def _keeps(store: Any) -> bool:
    """Whether the store has the KeepsLifecycle ability (a scoped view mirrors its store's)."""
    return isinstance(store, KeepsLifecycle)


def _retracts(store: Any) -> bool:
    """Whether the store has the Retracts ability (found by name, as the async engine does)."""
    return all(callable(getattr(store, name, None)) for name in ("retract", "retracted"))


__all__ = ["ChatMemory", "MemoryStats"]
