"""The working-memory inspector: ``chat-memory ui``, a small server-rendered web app over any
store (conversations, one conversation's timeline, the request the model gets now, the
compaction records and a per-turn chart, the agent's ``conversation_search``, long-term memory
and fork comparison). Standard library only; read-only unless started with ``--write``; bound
to 127.0.0.1 unless given a token. See docs/inspector.md."""

from __future__ import annotations

from .app import Inspector
from .server import InspectorServer, add_ui_command, run_ui, serve

__all__ = ["Inspector", "InspectorServer", "add_ui_command", "run_ui", "serve"]
