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


class ContextOverflowError(ChatMemoryError):
    """The model refused the request as longer than its context window, again after a forced
    compaction: the message names the conversation and the sizes."""


#: What providers say when a prompt does not fit the model's context window.
_OVERFLOW_TEXTS = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
)


def is_context_overflow(error: BaseException) -> bool:
    """True for a provider's "the prompt is too long" refusal: Anthropic's HTTP 400
    ``invalid_request_error`` "prompt is too long: N tokens > M maximum", OpenAI's
    ``context_length_exceeded``. Duck-typed on the SDKs' exceptions (``status_code``,
    ``code``, the message), so that no SDK is imported here."""
    status = getattr(error, "status_code", None)
    code = getattr(error, "code", None)
    if code == "context_length_exceeded":
        return True
    if status not in (400, 413):
        return False
    text = str(error).lower()
    return any(marker in text for marker in _OVERFLOW_TEXTS)
