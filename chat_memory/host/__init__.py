"""A workflow host built on chat-memory's public API: the workflow format and its
``${node.output}`` expressions, the agent and its node kinds, the runtime that runs a chat
workflow, the five-facts demo and the ``chat-memory`` command line. The core never imports
this package."""

from __future__ import annotations

from .agent import Agent, ToolCallRecord, TurnResult
from .nodes import default_registry
from .runtime import ChatRun, ChatWorkflow
from .workflow import Workflow, WorkflowError, WorkflowNode, import_workflow, load_template

__all__ = [
    "Agent",
    "ChatRun",
    "ChatWorkflow",
    "ToolCallRecord",
    "TurnResult",
    "Workflow",
    "WorkflowError",
    "WorkflowNode",
    "default_registry",
    "import_workflow",
    "load_template",
]
