"""AsyncChatMemory: :class:`~chat_memory.ChatMemory` for asyncio. Every method is a
coroutine with the same arguments, results and guarantees; the decisions are the very same
code (:mod:`chat_memory.decisions`, driven by :func:`chat_memory.steps.arun`), only the store and
the summarizer are awaited. See docs/async.md."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from .backends.aio import AsyncStore, ThreadedStore
from .backends.base import KeepsLifecycle, Store, check_conversation_id
from .compaction import CompactionRecord, CompactionResult
from .compression import compress_window
from .config import MemoryConfig
from .decisions import MemoryDecisions, MemoryStats
from .errors import ConfigurationError
from .events import Event
from .lifecycle import decisions as lifecycle
from .lifecycle.keys import Scope
from .lifecycle.records import ConversationInfo, ErasureReceipt, SweepReport
from .lifecycle.scoped import async_scoped_view
from .render import to_anthropic, to_openai
from .search import SearchPage, SearchQuery
from .steps import Step, Steps, StoreCall, _ado, adrive, arun
from .summarizer import Summarizer
from .telemetry import ADD, SEARCH, WINDOW, traced
from .tokens import TokenCounter
from .tools import AsyncConversationSearchTool, AsyncFetchToolResultTool

T = TypeVar("T")


class AsyncChatMemory:
    """Chat memory for asyncio over an :class:`~chat_memory.backends.aio.AsyncStore` (a sync
    :class:`~chat_memory.Store` is accepted too and run in a
    :class:`~chat_memory.backends.aio.ThreadedStore`). The summarizer may be ``async def``
    (awaited, e.g. :class:`~chat_memory.summarizer.AsyncAnthropicSummarizer`) or sync (run
    in a worker thread); nothing blocks the event loop.

    >>> memory = AsyncChatMemory(open_async_store("redis://localhost:6379/0"), {"max_turns": 20})
    >>> await memory.add("conv-1", [Event.user("Hi"), Event.assistant("Hello")])
    """

    #: The scope (user, app) this memory is bound to by :meth:`for_user`; None: unbound.
    scope: Scope | None = None

    def __init__(
        self,
        store: AsyncStore | Store,
        config: MemoryConfig | dict[str, Any] | None = None,
        summarizer: Summarizer | Any = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if isinstance(store, Store):
            store = ThreadedStore(store)
        if not isinstance(store, AsyncStore):
            raise ConfigurationError(
                f"store ({store!r}) must be an AsyncStore (open_async_store(url)) or a Store"
            )
        self._decisions = MemoryDecisions(config, summarizer, token_counter, asynchronous=True)
        self.store = store
        self.config = self._decisions.config
        self.summarizer = self._decisions.summarizer
        self.strategy = self._decisions.strategy
        self.token_counter = self._decisions.token_counter
        #: the store add() last ran on, and whether it has AppendsWithoutWindow
        self._lean: tuple[AsyncStore, bool] | None = None

    # -- writing ---------------------------------------------------------------------------

    @traced(ADD)
    async def add(self, conversation_id: str, events: Event | Iterable[Event]) -> list[Event]:
        """:meth:`ChatMemory.add <chat_memory.ChatMemory.add>`: append atomically and in
        order, idempotent per event id, tool pairs checked, compaction when a limit is
        exceeded (a failing compaction does not fail the append)."""
        store = self.store
        known = self._lean
        if known is None or known[0] is not store:  # found once per store, not per add
            lean = all(
                callable(getattr(store, name, None))
                for name in ("append_without_window", "find_events")
            )
            known = self._lean = (store, lean)
        return await _admitted(
            self._decisions.add(
                conversation_id,
                events,
                self.store.compacts_while_appending,
                known[1],
                # (a wrapper that forwards every name to a sync store may not have it)
                getattr(self.store, "checks_tool_pairs", False) is True,
            ),
            self.store,
        )

    async def compact(self, conversation_id: str, force: bool = False) -> CompactionResult:
        """:meth:`ChatMemory.compact <chat_memory.ChatMemory.compact>`: run the strategy now;
        with ``force``, archive every turn but the newest (the overflow safety net)."""
        return await arun(self._decisions.compact(conversation_id, force), self.store)

    async def compactions(self, conversation_id: str) -> list[CompactionRecord]:
        """The conversation's newest compactions (50 at most), oldest first."""
        return await arun(self._decisions.compactions(conversation_id), self.store)

    async def retract(self, conversation_id: str, event_ids: Iterable[str]) -> list[Event]:
        """:meth:`ChatMemory.retract <chat_memory.ChatMemory.retract>`: take events back
        atomically (a tool call with its result); returns them, oldest first."""
        return await arun(
            self._decisions.retract(conversation_id, event_ids, _retracts(self.store)), self.store
        )

    async def rewind(self, conversation_id: str, seq: int) -> list[Event]:
        """:meth:`ChatMemory.rewind <chat_memory.ChatMemory.rewind>`: retract every real event
        after ``seq``."""
        return await arun(
            self._decisions.rewind(conversation_id, seq, _retracts(self.store)), self.store
        )

    async def fork(
        self, conversation_id: str, new_conversation_id: str, at: int | None = None
    ) -> list[Event]:
        """:meth:`ChatMemory.fork <chat_memory.ChatMemory.fork>`: a new, independent
        conversation whose window is exactly the original's right after seq ``at`` (None: now);
        returns the fork's window."""
        return await arun(
            self._decisions.fork(
                conversation_id,
                new_conversation_id,
                at,
                callable(getattr(self.store, "fork", None)),
            ),
            self.store,
        )

    async def clear(self, conversation_id: str) -> None:
        """Delete the conversation: window, summary, archive and retracted events."""
        await self.store.clear(check_conversation_id(conversation_id))

    # -- reading ---------------------------------------------------------------------------

    @traced(WINDOW)
    async def window(self, conversation_id: str) -> list[Event]:
        """What the model sees now: pinned system events, the summary, the active events."""
        return await _admitted(self._decisions.window(conversation_id), self.store)

    async def history(self, conversation_id: str, include_retracted: bool = False) -> list[Event]:
        """Every stored event, archived included, oldest first; retracted ones only with
        ``include_retracted`` (marked)."""
        return await arun(
            self._decisions.history(conversation_id, include_retracted, _retracts(self.store)),
            self.store,
        )

    async def search(
        self,
        conversation_id: str,
        keyword: str,
        page: int = 0,
        match_mode: str = "phrase",
        page_size: int | None = None,
        include_recall_tools: bool = False,
    ) -> SearchPage:
        """:meth:`ChatMemory.search <chat_memory.ChatMemory.search>`: literal,
        case-insensitive search over the whole conversation, oldest match first."""
        return await self.run_search(
            conversation_id,
            self._decisions.query(keyword, page, match_mode, page_size, include_recall_tools),
        )

    @traced(SEARCH)
    async def run_search(self, conversation_id: str, query: SearchQuery) -> SearchPage:
        """Run an already validated query and page its results."""
        return await _admitted(self._decisions.run_search(conversation_id, query), self.store)

    def search_tool(self, conversation_id: str) -> AsyncConversationSearchTool:
        """The ``conversation_search`` tool bound to one conversation; ``await tool(arguments)``."""
        return AsyncConversationSearchTool(
            self.run_search, check_conversation_id(conversation_id), self.config.search_page_size
        )

    def fetch_tool(self, conversation_id: str) -> AsyncFetchToolResultTool:
        """The ``fetch_tool_result`` tool bound to one conversation; ``await tool(arguments)``."""
        return AsyncFetchToolResultTool(
            self.fetch_tool_result, check_conversation_id(conversation_id)
        )

    async def fetch_tool_result(self, conversation_id: str, tool_call_id: str) -> Event | None:
        """The stored (full) result of the tool call ``tool_call_id``, archived or not (None: none)."""
        return await arun(
            self._decisions.fetch_tool_result(conversation_id, tool_call_id), self.store
        )

    async def model_window(self, conversation_id: str) -> list[Event]:
        """:meth:`window` with large tool results already read replaced by stubs when
        ``compress_tool_results`` is on."""
        return compress_window(await self.window(conversation_id), self.config, self.token_counter)

    async def to_anthropic(
        self, conversation_id: str, system_prompt: str | None = None, **options: Any
    ) -> Any:
        """``(system, messages)`` for the Anthropic Messages API (see :meth:`ChatMemory.to_anthropic
        <chat_memory.ChatMemory.to_anthropic>`)."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_anthropic(await self.model_window(conversation_id), system_prompt, **options)

    async def to_openai(
        self, conversation_id: str, system_prompt: str | None = None, **options: Any
    ) -> Any:
        """Chat Completions messages from :meth:`model_window`."""
        options.setdefault("summary_placement", self.config.summary_placement)
        return to_openai(await self.model_window(conversation_id), system_prompt, **options)

    async def stats(self, conversation_id: str) -> MemoryStats:
        """Counts of the window and archive, the version, and the last compaction error."""
        return await arun(self._decisions.stats(conversation_id), self.store)

    # -- whose it is, how long it lives (docs/lifecycle.md) ------------------------------------

    def for_user(self, user: str, app: str | None = None) -> AsyncChatMemory:
        """:meth:`ChatMemory.for_user <chat_memory.ChatMemory.for_user>`: this memory bound to
        the scope (``user``, ``app``), ids resolved inside it by construction. Closing the
        bound memory leaves the store open (it belongs to this one)."""
        scope = Scope(user, app)
        bound = AsyncChatMemory(
            async_scoped_view(self.store, scope), self.config, self.summarizer, self.token_counter
        )
        bound.scope = scope
        return bound

    async def set_metadata(
        self,
        conversation_id: str,
        title: str | None = None,
        tags: Iterable[str] | None = None,
        **values: Any,
    ) -> ConversationInfo:
        """:meth:`ChatMemory.set_metadata <chat_memory.ChatMemory.set_metadata>`: title, tags
        and free key-values (a value None removes its key); returns the conversation's info."""
        return await arun(
            lifecycle.set_metadata(
                self.scope, conversation_id, title, tags, values, _keeps(self.store)
            ),
            self.store,
        )

    async def conversations(
        self, tag: str | None = None, page: int = 1, page_size: int = 50
    ) -> list[ConversationInfo]:
        """:meth:`ChatMemory.conversations <chat_memory.ChatMemory.conversations>`: the scope's
        conversations, newest activity first, paged from 1."""
        return await arun(
            lifecycle.conversations(self.scope, tag, page, page_size, _keeps(self.store)),
            self.store,
        )

    async def sweep(self) -> SweepReport:
        """:meth:`ChatMemory.sweep <chat_memory.ChatMemory.sweep>`: delete what is idle longer
        than ``retention_seconds``, each by a conditional delete."""
        return await arun(
            lifecycle.sweep(self.scope, self.config.retention_seconds, _keeps(self.store)),
            self.store,
        )

    async def forget(
        self,
        user: str | None = None,
        app: str | None = None,
        conversation: str | None = None,
    ) -> ErasureReceipt:
        """:meth:`ChatMemory.forget <chat_memory.ChatMemory.forget>`: erase a user's scope (and
        their long-term namespaces) or one conversation; returns counts by kind."""
        return await arun(
            lifecycle.forget(self.scope, user, app, conversation, _keeps(self.store)),
            self.store,
        )

    async def aclose(self) -> None:
        """Close the store."""
        await self.store.aclose()


async def _admitted(steps: Steps[T], store: AsyncStore) -> T:
    """:func:`~chat_memory.steps.arun` inside the store's admission
    (:meth:`AsyncStore.admitted <chat_memory.backends.aio.AsyncStore.admitted>`), taken before
    the first step, so the batch is built, checked and sized only once the store can serve
    it: a burst of a thousand adds then prepares pool-size batches per loop iteration, not a
    thousand. The turn is given back while a summarizer runs or a retry pauses (a pool slot
    must not wait on a model)."""
    admitted = getattr(store, "admitted", None)  # a wrapper forwarding names may lack it
    if not callable(admitted):
        return await arun(steps, store)
    turn = _Turn(admitted, store)
    await turn.take()
    try:
        return await adrive(steps, turn.perform)
    finally:
        await turn.give_back()


class _Turn:
    """One task's turn at a store's admission, given back and taken again around the steps
    that are not store calls."""

    def __init__(
        self, admitted: Callable[[], AbstractAsyncContextManager[None]], store: AsyncStore
    ) -> None:
        self._admitted = admitted
        self._store = store
        self._held: AbstractAsyncContextManager[None] | None = None

    async def take(self) -> None:
        admission = self._admitted()
        await admission.__aenter__()
        self._held = admission

    async def give_back(self) -> None:
        admission, self._held = self._held, None
        if admission is not None:
            await admission.__aexit__(None, None, None)

    async def perform(self, step: Step) -> Any:
        if isinstance(step, StoreCall):
            return await getattr(self._store, step.name)(*step.args, **step.kwargs)
        await self.give_back()
        try:
            return await _ado(step, self._store)
        finally:
            await self.take()


def _keeps(store: Any) -> bool:
    """Whether the async store offers the KeepsLifecycle methods (found by name)."""
    return all(callable(getattr(store, name, None)) for name in KeepsLifecycle.__abstractmethods__)


def _retracts(store: Any) -> bool:
    return all(callable(getattr(store, name, None)) for name in ("retract", "retracted"))


__all__ = ["AsyncChatMemory"]
