"""The heads a store last read or wrote, with their ETags."""

from __future__ import annotations

import threading
from collections import OrderedDict

from .layout import Head


class HeadCache:
    """The heads this store last read or wrote, with their ETags, for the first attempt of a
    write: a writer working alone then skips the GET before its conditional PUT (the ETag
    still guards it; a stale entry only costs one 412 and a fresh read)."""

    def __init__(self, size: int = 256) -> None:
        self._entries: OrderedDict[str, tuple[Head, str]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, cid: str) -> tuple[Head, str] | None:
        with self._lock:
            return self._entries.get(cid)

    def put(self, cid: str, head: Head, etag: str | None) -> None:
        with self._lock:
            if etag is None:
                self._entries.pop(cid, None)
                return
            self._entries[cid] = (head, etag)
            self._entries.move_to_end(cid)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def drop(self, cid: str) -> None:
        with self._lock:
            self._entries.pop(cid, None)
