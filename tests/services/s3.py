"""moto's S3 server over real HTTP on loopback, made as atomic per request as real S3.
Used by the test fixtures and the benchmarks (no pytest needed)."""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # never read a developer's real profile or config
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def make_moto_writes_atomic() -> None:
    """moto checks If-Match / If-None-Match and then stores the object as two steps, so two
    threads (or two requests to its threaded server) can both pass the check; and a GET
    racing a DELETE of the same key can read a closed buffer. Real S3 does each request
    atomically; serialising moto's object requests gives the tests that guarantee."""
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_chat_memory_atomic", False):
        return
    lock = threading.RLock()
    for name in (
        "put_object",
        "get_object",
        "head_object",
        "delete_object",
        "_bucket_response_delete_keys",
    ):
        original = getattr(S3Response, name)

        @functools.wraps(original)
        def serialized(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return __original(self, *args, **kwargs)

        setattr(S3Response, name, serialized)
    S3Response._chat_memory_atomic = True


def start_moto_server() -> tuple[Any, str]:
    """Start moto's threaded S3 server on 127.0.0.1 and a free port; returns (server, endpoint URL).
    Stop it with ``server.stop()``."""
    from moto.server import ThreadedMotoServer

    make_moto_writes_atomic()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"
