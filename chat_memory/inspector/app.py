"""The inspector's WSGI application: routing, the token gate, CSRF and the response headers.

Security (docs/inspector.md): with a token, every request must carry it, as a header
(``Authorization: Bearer T`` or ``X-Chat-Memory-Token: T``), or once as ``?token=T``, which
sets an HttpOnly, SameSite=Strict session cookie (a digest of a per-process secret, never the
token) and redirects to the same page without it. Comparisons are constant-time; the token is
never logged or echoed. Requests whose Host is not one the server is bound to are refused (DNS
rebinding). Writes are POST only, with the per-process CSRF token in a hidden field, a
same-origin Origin (when the browser sends one) and a Sec-Fetch-Site that is not cross-site;
in read-only mode they are refused and no write form is rendered."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from .. import (
    ChatMemory,
    ChatMemoryError,
    ConfigurationError,
    InvalidInputError,
    MemoryConfig,
    Store,
)
from ..strategies import strategy_class
from .html import STYLE, esc, page
from .routes import ROUTES, WRITE_ROUTES
from .web import InspectorError, Request, Response

COOKIE = "chat_memory_ui"
_log = logging.getLogger("chat_memory.inspector")
#: a POST body larger than this is refused (the forms send a few short fields)
MAX_FORM_BYTES = 64 * 1024
TOKEN_HEADER = "HTTP_X_CHAT_MEMORY_TOKEN"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Inspector:
    """The inspector over one store: a WSGI application (call it with ``environ`` and
    ``start_response``). ``config`` is the memory's configuration (rendering and the search
    page size follow it); ``writable`` enables the write actions; ``token`` gates every
    request (required by :func:`~chat_memory.inspector.serve` on a non-loopback bind)."""

    def __init__(
        self,
        store: Store,
        config: MemoryConfig | None = None,
        *,
        writable: bool = False,
        token: str | None = None,
        store_label: str = "",
    ) -> None:
        self.store = store
        config = config or MemoryConfig()
        if strategy_class(config.compaction_strategy).summarizes:
            # the inspector has no summarizer: it renders with the app's settings, and a forced
            # compaction archives under a stub summary (ChatMemory.compact(force=True))
            config = config.model_copy(update={"compaction_strategy": "none"})
        self.config = config
        self.writable = writable
        self.store_label = store_label or type(store).__name__
        self._memory = ChatMemory(store, self.config)
        self._keeps: bool | None = None
        self._secret = secrets.token_bytes(32)
        #: the per-process CSRF token every write form carries
        self.csrf = self._digest(b"csrf")
        self._token = None if token is None else token.encode("utf-8")
        self._session = self._digest(b"session")
        #: the Host values accepted (set by :meth:`bind`); empty: any
        self.hosts: set[str] = set()

    def _digest(self, purpose: bytes) -> str:
        return hmac.new(self._secret, purpose, hashlib.sha256).hexdigest()

    def bind(self, host: str, port: int, loopback: bool) -> None:
        """On a loopback bind, accept only requests addressed to it (the Host a browser sends
        for it), so that a DNS-rebinding page cannot reach it. A non-loopback bind has a token
        (required) and cannot know every name it is reached by: any Host is accepted there."""
        if not loopback:
            self.hosts = set()
            return
        names = {host, "127.0.0.1", "localhost"} if host in ("127.0.0.1", "localhost") else {host}
        if ":" in host:
            names = {f"[{host}]"} | ({"localhost"} if host == "::1" else set())
        self.hosts = {f"{name}:{port}" for name in names}

    @property
    def keeps_lifecycle(self) -> bool:
        """Whether the store lists conversations by scope and tag (it has the KeepsLifecycle
        ability: asked once, through the public API, which refuses without it)."""
        if self._keeps is None:
            try:
                self._memory.conversations(page=1, page_size=1)
                self._keeps = True
            except ConfigurationError:
                self._keeps = False
        return self._keeps

    def memory(self, user: str | None = None, app: str | None = None) -> ChatMemory:
        """The memory of a scope (unbound without ``user``)."""
        if user is None:
            if app is not None:
                raise InspectorError(400, f"app ({app!r}) needs a user")
            return self._memory
        return self._memory.for_user(user, app)

    def render(self, title: str, body: str) -> Response:
        """A page in the inspector's frame."""
        return Response(page(title, body, writable=self.writable, store=self.store_label))

    # -- WSGI ------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            response = self._handle(environ)
        except InspectorError as exc:
            response = self._error(exc.status, str(exc))
        except (InvalidInputError, ConfigurationError) as exc:
            response = self._error(400, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            # the store's or the driver's text may carry connection details: it goes to the log
            # (the command line masks URLs there), the page names the kind only
            _log.exception("chat-memory ui: %s failed", environ.get("PATH_INFO", "/"))
            kind = type(exc).__name__ if isinstance(exc, ChatMemoryError) else "internal error"
            response = self._error(
                500, f"{kind}: the request failed; the server's log has the details"
            )
        body = response.body.encode("utf-8") if isinstance(response.body, str) else response.body
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-Frame-Options", "DENY"),
            ("Referrer-Policy", "no-referrer"),
            (
                "Content-Security-Policy",
                "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
            *response.headers,
        ]
        status = HTTPStatus(response.status)
        start_response(f"{status.value} {status.phrase}", headers)
        return [body]

    def _error(self, status: int, message: str) -> Response:
        body = f'<h1>{esc(HTTPStatus(status).phrase)}</h1><p class="error">{esc(message)}</p>'
        response = self.render(HTTPStatus(status).phrase, body)
        response.status = status
        return response

    def _handle(self, environ: dict[str, Any]) -> Response:
        host = environ.get("HTTP_HOST", "")
        if self.hosts and host not in self.hosts:
            raise InspectorError(421, "this server does not answer for that Host")
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        gate = self._gate(environ, path, query)
        if gate is not None:
            return gate
        query.pop("token", None)
        if path == "/style.css":
            return Response(STYLE, content_type="text/css; charset=utf-8")
        request = Request(method, path, query)
        if method == "POST":
            request.form = self._checked_form(environ)
        elif method not in ("GET", "HEAD"):
            raise InspectorError(405, f"method ({method}) is not allowed")
        routes = WRITE_ROUTES if method == "POST" else ROUTES
        handler = routes.get(path)
        if handler is None:
            raise InspectorError(404, f"no page at {path}")
        return handler(self, request)

    def _gate(self, environ: dict[str, Any], path: str, query: dict[str, str]) -> Response | None:
        """None when the request may proceed; else the refusal (or the cookie-setting redirect)."""
        if self._token is None:
            return None
        given = environ.get(TOKEN_HEADER) or ""
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if given and hmac.compare_digest(given.encode("utf-8"), self._token):
            return None
        cookie = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        morsel = cookie.get(COOKIE)
        if morsel is not None and hmac.compare_digest(
            morsel.value.encode("utf-8"), self._session.encode("utf-8")
        ):
            return None
        in_query = query.get("token", "")
        if in_query and hmac.compare_digest(in_query.encode("utf-8"), self._token):
            rest = {k: v for k, v in query.items() if k != "token"}
            target = path + ("?" + urlencode(rest) if rest else "")
            cookie_value = f"{COOKIE}={self._session}; HttpOnly; SameSite=Strict; Path=/"
            return Response("", 303, headers=[("Location", target), ("Set-Cookie", cookie_value)])
        response = self._error(401, "this inspector needs its token (see docs/inspector.md)")
        return response

    def _checked_form(self, environ: dict[str, Any]) -> dict[str, str]:
        """The POST form, after the read-only, origin and CSRF checks (403 when one fails)."""
        if not self.writable:
            raise InspectorError(403, "the inspector is read-only (start it with --write)")
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and origin != f"http://{environ.get('HTTP_HOST', '')}":
            raise InspectorError(403, "cross-origin write refused")
        if environ.get("HTTP_SEC_FETCH_SITE", "same-origin") not in ("same-origin", "none"):
            raise InspectorError(403, "cross-site write refused")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_FORM_BYTES:
            raise InspectorError(413, f"form of {length} bytes refused")
        raw = environ["wsgi.input"].read(length).decode("utf-8", "replace")
        form = dict(parse_qsl(raw, keep_blank_values=True))
        sent = form.get("csrf", "")
        if not hmac.compare_digest(sent.encode("utf-8"), self.csrf.encode("utf-8")):
            raise InspectorError(403, "missing or wrong CSRF token: reload the confirmation page")
        return form
