"""The S3 store: conditional writes (``If-None-Match: *`` / ``If-Match: <ETag>``) on one head
object per conversation, plus immutable archive segments."""

from __future__ import annotations

from .store import S3Store

__all__ = ["S3Store"]
