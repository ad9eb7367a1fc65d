"""Workflow templates: the JSON format and its import (``workflow``), ``${node.output}``
expressions, the bundled templates (``compacting-chat``) and the runtime that runs them."""

from __future__ import annotations

from .runtime import ChatRun, ChatWorkflow
from .workflow import (
    Workflow,
    WorkflowError,
    WorkflowNode,
    import_workflow,
    load_template,
    template_names,
    template_source,
)

__all__ = [
    "ChatRun",
    "ChatWorkflow",
    "Workflow",
    "WorkflowError",
    "WorkflowNode",
    "import_workflow",
    "load_template",
    "template_names",
    "template_source",
]
