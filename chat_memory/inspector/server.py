"""Serving the inspector: a threaded ``wsgiref`` server (standard library only), bound to
127.0.0.1 unless told otherwise, and the ``chat-memory ui`` sub-command."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import socketserver
import sys
import threading
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import ConfigurationError, MemoryConfig, Store
from .app import Inspector

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8700
#: the environment variable that may carry the token (kept out of the process list)
ENV_TOKEN = "CHAT_MEMORY_UI_TOKEN"
MIN_TOKEN_CHARS = 16

P = TypeVar("P", bound=argparse.ArgumentParser)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind other than loopback without a token, and a short token."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"token must be at least {MIN_TOKEN_CHARS} characters (got {len(token)})"
        )
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"host ({host!r}) is not a loopback address: binding it needs a token "
            f"(--token or ${ENV_TOKEN}), or bind 127.0.0.1"
        )


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _IPv6Server(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """Logs nothing: request lines carry ``?token=`` on a first visit."""

    def log_message(self, format: str, *args: Any) -> None:
        return


class InspectorServer:
    """A running inspector: :attr:`url`, :meth:`serve_forever`, or :meth:`start` in a thread
    and :meth:`stop`."""

    def __init__(self, app: Inspector, host: str, port: int) -> None:
        server_class = _IPv6Server if ":" in host else _ThreadingServer
        self.app = app
        self.httpd = make_server(
            host, port, app, server_class=server_class, handler_class=_QuietHandler
        )
        self.port = int(self.httpd.server_port)
        self.host = host
        app.bind(host, self.port, is_loopback(host))
        shown = f"[{host}]" if ":" in host else host
        #: the base URL (no token in it)
        self.url = f"http://{shown}:{self.port}"
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Serve until interrupted."""
        self.httpd.serve_forever()

    def start(self) -> InspectorServer:
        """Serve from a daemon thread (tests, scripts); returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (not the store)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()


def serve(
    store: Store,
    config: MemoryConfig | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    writable: bool = False,
    store_label: str = "",
) -> InspectorServer:
    """An inspector server over ``store`` (not started: call ``serve_forever`` or ``start``).
    Port 0 picks a free one. A non-loopback ``host`` needs a ``token`` (ConfigurationError)."""
    check_bind(host, token)
    app = Inspector(store, config, writable=writable, token=token, store_label=store_label)
    return InspectorServer(app, host, port)


def add_ui_command(commands: argparse._SubParsersAction[P], common: P) -> None:
    """Register ``chat-memory ui``."""
    text = "browse conversations, requests and long-term memory in the browser (read-only unless --write)"
    sub = commands.add_parser("ui", help=text, description=text, parents=[common])
    sub.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
    )
    sub.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free one)",
    )
    sub.add_argument(
        "--token",
        help=f"require this token (16+ characters; also ${ENV_TOKEN}); needed for a non-loopback --host",
    )
    sub.add_argument(
        "--write",
        action="store_true",
        help="enable the write actions (force a compaction, forget, restore a long-term version)",
    )


def run_ui(args: argparse.Namespace) -> int:
    """``chat-memory ui``: serve until Ctrl-C."""
    from ..host.cli_session import Session  # the host's store handling (URL, masking)
    from ..host.cli_text import say

    token = args.token or os.environ.get(ENV_TOKEN) or None
    check_bind(args.host, token)  # before opening anything
    with Session(args, writes=False) as session:
        # the template's memory settings: the request is rendered as its agent gets it
        config = session.template_config() if session.template_given else MemoryConfig()
        server = serve(
            session.open_store(),
            config,
            host=args.host,
            port=args.port,
            token=token,
            writable=args.write,
            store_label=session.shown_url,
        )
        mode = "write mode" if args.write else "read-only"
        say(f"chat-memory ui: {session.shown_url} at {server.url}/ ({mode}); Ctrl-C to stop")
        if token:
            say("open it once with ?token=<your token> (or send it as a Bearer header)")
        sys.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.httpd.server_close()
    return 0
