"""The workflow templates shipped with chat-memory (``compacting-chat``…), as JSON files.

This package only finds and reads them; importing and running a template is the host's job
(:func:`chat_memory.host.load_template`, :class:`chat_memory.host.ChatWorkflow`)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ..errors import ConfigurationError


def template_names() -> list[str]:
    """Names of the bundled templates (``compacting-chat``…)."""
    folder = resources.files(__package__)
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def template_source(name: str) -> dict[str, Any]:
    """A bundled template's JSON, as a dict; an unknown name is a :class:`ConfigurationError`
    that lists the templates."""
    if name not in template_names():
        raise ConfigurationError(
            f"unknown template {name!r}; templates: {', '.join(template_names())}"
        )
    source: dict[str, Any] = json.loads(
        resources.files(__package__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    )
    return source


__all__ = ["template_names", "template_source"]
