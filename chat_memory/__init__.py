"""chat-memory: chat memory for AI agents.

An append-only event log per conversation, a bounded window for the model, compaction by
whole turns that archives instead of deleting, and a paged ``conversation_search`` tool.
"""

from __future__ import annotations

from .aio import AsyncChatMemory
from .backends import open_store
from .backends.aio import AsyncStore, ThreadedStore, open_async_store
from .backends.base import Store
from .compaction import CompactionRecord, CompactionResult
from .config import MemoryConfig, SummaryPlacement
from .engine import ChatMemory, MemoryStats
from .errors import (
    ChatMemoryError,
    ConcurrencyError,
    ConfigurationError,
    ContextOverflowError,
    InvalidEventError,
    InvalidInputError,
    SchemaError,
    SearchError,
    StorageError,
    SummarizerError,
    is_context_overflow,
)
from .events import Event, EventType
from .lifecycle import ConversationInfo, ErasureReceipt, Scope, SweepReport
from .overflow import with_overflow_retry
from .render import to_anthropic, to_openai
from .search import SearchHit, SearchPage
from .summarizer import AnthropicSummarizer, AsyncAnthropicSummarizer, Summarizer
from .tools import ConversationSearchTool

__version__ = "0.1.0"

__all__ = [
    "AnthropicSummarizer",
    "AsyncAnthropicSummarizer",
    "AsyncChatMemory",
    "AsyncStore",
    "ChatMemory",
    "ChatMemoryError",
    "CompactionRecord",
    "CompactionResult",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextOverflowError",
    "ConversationInfo",
    "ConversationSearchTool",
    "ErasureReceipt",
    "Event",
    "EventType",
    "InvalidEventError",
    "InvalidInputError",
    "MemoryConfig",
    "MemoryStats",
    "Scope",
    "SchemaError",
    "SearchError",
    "SearchHit",
    "SearchPage",
    "StorageError",
    "Store",
    "Summarizer",
    "SummarizerError",
    "SummaryPlacement",
    "SweepReport",
    "ThreadedStore",
    "is_context_overflow",
    "open_async_store",
    "open_store",
    "to_anthropic",
    "with_overflow_retry",
    "to_openai",
]
