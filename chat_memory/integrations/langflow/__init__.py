"""Langflow: the Chat Memory nodes as a Langflow extension (``pip install 'chat-memory[langflow]'``).

The five Chat Memory components (built-in, JDBC/SQL, Redis, AWS S3, in-memory) are generated
from our node definitions (:mod:`chat_memory.components`), and so is the Auto Memory Tool
(long-term memory for an agent's Tools); the ``ChatMemoryAgent`` component is Langflow's
Agent with a Chat Memory input that stores every step. The manifest
(``extension.json``) and the components (``bundle/``) are in this package; Langflow finds
them through the ``langflow.extensions`` entry point. See docs/langflow.md."""

from __future__ import annotations

from .. import missing_extra

try:
    import lfx  # noqa: F401
except ImportError:  # pragma: no cover - exercised without lfx installed
    raise missing_extra("lfx", "langflow") from None
