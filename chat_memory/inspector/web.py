"""The inspector's request and response types, shared by the application and its pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Inspector


class InspectorError(Exception):
    """A page that cannot be shown: its HTTP status and a message for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """What a page handler sees of one request."""

    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        """A query (or, for POST, form) field; blank counts as absent."""
        value = self.form.get(name) if self.method == "POST" else None
        value = self.query.get(name) if value is None else value
        return value if value else None

    def number(self, name: str, default: int, minimum: int = 1) -> int:
        """A whole-number field, refused (400) naming it when it is not one."""
        raw = self.get(name)
        if raw is None:
            return default
        if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum:
            raise InspectorError(400, f"{name} ({raw!r}) must be a whole number, {minimum} or more")
        return int(raw)


@dataclass
class Response:
    """A page's answer: status, body, content type and extra headers."""

    body: str | bytes
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[["Inspector", Request], Response]


def json_response(data: Mapping[str, Any] | list[Any]) -> Response:
    """A JSON body (the request page's raw view)."""
    return Response(json.dumps(data, ensure_ascii=False, indent=2), content_type="application/json")
