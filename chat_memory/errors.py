"""The exceptions chat-memory raises. Every one derives from :class:`ChatMemoryError`."""

from __future__ import annotations


class ChatMemoryError(Exception):
    """Base class of every error chat-memory raises on purpose."""


class ConfigurationError(ChatMemoryError, ValueError):
    """Bad settings: an invalid field value, an unknown URL scheme, a missing driver or summarizer."""


class InvalidInputError(ChatMemoryError, ValueError):
    """An argument that cannot be used as given (a blank conversation id, a bad page number)."""


class InvalidEventError(InvalidInputError):
    """An event that cannot be stored as given (for example a tool result whose call is unknown)."""


class SearchError(InvalidInputError):
    """A search request that cannot be run (blank keyword, negative page, unknown match mode)."""


class StorageError(ChatMemoryError):
    """The backend failed. The driver's exception is attached as ``__cause__``."""


class ConcurrencyError(StorageError):
    """A write kept losing optimistic-concurrency races after every bounded retry."""


class SummarizerError(ChatMemoryError):
    """The summarizer model failed or returned nothing; nothing was archived."""


class SchemaError(StorageError):
    """The store holds data in a layout this version of chat-memory does not understand."""
