"""Long-term memory: small text files per namespace (a user, an agent, a team), kept across
conversations on any chat-memory store, and the ``memory`` tool (Anthropic's
``memory_20250818``) that lets a model read and edit them.

>>> from chat_memory.longterm import MemoryTool, long_term_memory
>>> tool = MemoryTool(long_term_memory(store, namespace="user-42"))
"""

from __future__ import annotations

from .budget import MemoryLimits
from .files import FileEntry, FileVersion, MemoryFiles
from .paths import ROOT, MemoryLimitError, MemoryPathError, MemoryToolError, check_path
from .stores import long_term_memory
from .tool import MEMORY_SYSTEM_PROMPT, MemoryTool
from .views import format_size

__all__ = [
    "MEMORY_SYSTEM_PROMPT",
    "ROOT",
    "FileEntry",
    "FileVersion",
    "MemoryFiles",
    "MemoryLimitError",
    "MemoryLimits",
    "MemoryPathError",
    "MemoryTool",
    "MemoryToolError",
    "check_path",
    "format_size",
    "long_term_memory",
]
