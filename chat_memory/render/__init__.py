"""Rendering a window for a model: always a request the provider accepts.

:func:`to_anthropic` gives the Anthropic Messages API ``system`` and ``messages`` (with
prompt-cache breakpoints); :func:`to_openai` gives Chat Completions ``messages``. Both build
on one plan (:mod:`chat_memory.render.plan`): which call each result answers, the ids a
provider accepts, and the order the model reads. The rules are in docs/rendering.md."""

from __future__ import annotations

from .anthropic import to_anthropic
from .openai import to_openai
from .plan import MISSING_RESULT_TEXT, SUMMARY_PREFACE, provider_id, summary_text

__all__ = [
    "MISSING_RESULT_TEXT",
    "SUMMARY_PREFACE",
    "provider_id",
    "summary_text",
    "to_anthropic",
    "to_openai",
]
