"""Memory files in the Redis store's server, one hash slot per namespace (Redis Cluster works).

Keys, all tagged with the namespace's digest so they share a slot:
``<prefix>ltm:{<digest>}:files`` (hash: path -> ``[revision, content]``),
``…:rev`` (the namespace revision) and ``…:log`` (list of versions, newest last, capped).
A commit is one Lua script: it checks every expected revision and applies the writes
atomically (compare-and-swap per file, no WATCH round trips)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .files import FileEntry, FileVersion, MemoryFiles, StoredFile, size_of

_COMMIT = """
local expected = cjson.decode(ARGV[1])
local writes = cjson.decode(ARGV[2])
for _, item in ipairs(expected) do
  local found = redis.call('HGET', KEYS[1], item[1])
  local rev = 0
  if found then rev = cjson.decode(found)[1] end
  if rev ~= item[2] then return 0 end
end
local rev = redis.call('INCR', KEYS[2])
for _, item in ipairs(writes) do
  local path, content = item[1], item[2]
  if content == cjson.null then
    redis.call('HDEL', KEYS[1], path)
  else
    redis.call('HSET', KEYS[1], path, cjson.encode({rev, content}))
  end
  redis.call('RPUSH', KEYS[3], cjson.encode({path, rev, content, ARGV[3]}))
end
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1)
return rev
"""


class RedisFiles(MemoryFiles):
    """One namespace on the server of a :class:`~chat_memory.backends.redis.RedisStore`."""

    def __init__(self, store: Any, namespace: str, **options: Any) -> None:
        super().__init__(namespace, **options)
        self.store = store
        self.client = store.client
        self._keys = _keys(store.prefix, self.namespace)
        self._registry = f"{store.prefix}ltm:namespaces"
        self._script = self.client.register_script(_COMMIT)

    def _listing(self) -> dict[str, FileEntry]:
        found = self.client.hgetall(self._keys[0])
        listing = {}
        for raw_path, raw in found.items():
            path = _text(raw_path)
            revision, content = json.loads(raw)
            listing[path] = FileEntry(path, size_of(content), revision)
        return listing

    def _read(self, path: str) -> StoredFile | None:
        raw = self.client.hget(self._keys[0], path)
        if raw is None:
            return None
        revision, content = json.loads(raw)
        return StoredFile(path, content, revision)

    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        args = (
            json.dumps([[path, revision or 0] for path, revision in expected.items()]),
            json.dumps([[path, content] for path, content in writes.items()]),
            datetime.now(timezone.utc).isoformat(),
            self.limits.max_versions,
        )
        if not self.store._call(self._script, self._keys, args):
            return False
        self.client.sadd(self._registry, self.namespace)
        return True

    def _versions(self, path: str) -> list[FileVersion]:
        versions = []
        for raw in self.client.lrange(self._keys[2], 0, -1):
            logged_path, revision, content, at = json.loads(raw)
            if logged_path == path:
                versions.append(FileVersion(path, revision, content, datetime.fromisoformat(at)))
        return versions

    def _drop(self) -> None:
        self.client.delete(*self._keys)
        self.client.srem(self._registry, self.namespace)

    def namespaces(self) -> list[str]:
        """Every namespace holding files."""
        names = sorted(_text(n) for n in self.client.smembers(self._registry))
        return [n for n in names if self.client.exists(_keys(self.store.prefix, n)[0])]


def _keys(prefix: str, namespace: str) -> list[str]:
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]
    base = f"{prefix}ltm:{{{digest}}}"
    return [f"{base}:files", f"{base}:rev", f"{base}:log"]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
