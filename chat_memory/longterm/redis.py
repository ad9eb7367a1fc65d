"""Memory files in the Redis store's server, one hash slot per namespace (Redis Cluster works).

Keys, all tagged with the namespace's digest so they share a slot:
``<prefix>ltm:{<digest>}:files`` (hash: path -> ``[revision, content]``),
``…:rev`` (the namespace revision), ``…:log`` (list of versions, newest last, capped),
``…:sizes`` (hash: path -> content bytes) and ``…:logbytes`` (content bytes in the log).
A commit is one Lua script: it checks every expected revision, the live limits and that no
path becomes both a file and a directory, applies
the writes and drops the oldest versions past the count and byte budgets, atomically
(compare-and-swap per file, no WATCH round trips). A namespace written before the sizes and
the byte counter existed gets them from its next commit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..backends.failures import stored_data
from ..backends.redis_io import REDIS_DRIVER_ERRORS
from ..errors import ConcurrencyError
from ..lifecycle.keys import guard_name, is_scoped, scope_of_key
from .files import FileEntry, FileVersion, MemoryFiles, StoredFile, size_of

_COMMIT = """
local expected = cjson.decode(ARGV[1])
local writes = cjson.decode(ARGV[2])
local max_versions, max_version_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_files, max_namespace_bytes = tonumber(ARGV[6]), tonumber(ARGV[7])
for _, item in ipairs(expected) do
  local found = redis.call('HGET', KEYS[1], item[1])
  local rev = 0
  if found then rev = cjson.decode(found)[1] end
  if rev ~= item[2] then return 0 end
end
-- the live limits, against what is stored now: sizes are kept beside the files (built once
-- for a namespace written before they were)
if redis.call('HLEN', KEYS[4]) ~= redis.call('HLEN', KEYS[1]) then
  redis.call('DEL', KEYS[4])
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do redis.call('HSET', KEYS[4], all[i], #cjson.decode(all[i + 1])[2]) end
end
local sizes, count, total = {}, 0, 0
local flat = redis.call('HGETALL', KEYS[4])
for i = 1, #flat, 2 do
  local size = tonumber(flat[i + 1])
  sizes[flat[i]] = size
  count, total = count + 1, total + size
end
local after_count, after_total = count, total
for _, item in ipairs(writes) do
  local old = sizes[item[1]]
  if old then after_count, after_total = after_count - 1, after_total - old end
  if item[2] ~= cjson.null then after_count, after_total = after_count + 1, after_total + #item[2] end
end
if (after_count > max_files and after_count > count) or (after_total > max_namespace_bytes and after_total > total) then
  return -1
end
-- no path may be both a file and a directory: the parents a new file relies on are part of
-- the swap (a file at a/ and one at a/b.md written by racing writers cannot both land)
local after = {}
for path in pairs(sizes) do after[path] = true end
for _, item in ipairs(writes) do
  if item[2] == cjson.null then after[item[1]] = nil else after[item[1]] = true end
end
local directories = {}
for path in pairs(after) do
  local at = string.find(path, '/', 2, true)
  while at do
    directories[string.sub(path, 1, at - 1)] = true
    at = string.find(path, '/', at + 1, true)
  end
end
for _, item in ipairs(writes) do
  local path = item[1]
  if item[2] ~= cjson.null and not sizes[path] then
    if directories[path] then return 0 end
    local at = string.find(path, '/', 2, true)
    while at do
      if after[string.sub(path, 1, at - 1)] then return 0 end
      at = string.find(path, '/', at + 1, true)
    end
  end
end
-- content bytes of the kept versions: a counter, counted once (newest first, within the
-- budgets, the rest dropped) for a namespace written before it existed
local vbytes = tonumber(redis.call('GET', KEYS[5]) or '-1')
if vbytes < 0 then
  vbytes = 0
  local n, kept = redis.call('LLEN', KEYS[3]), 0
  while kept < n and kept < max_versions do
    local content = cjson.decode(redis.call('LINDEX', KEYS[3], -(kept + 1)))[3]
    local size = 0
    if content ~= cjson.null then size = #content end
    if vbytes + size > max_version_bytes then break end
    vbytes, kept = vbytes + size, kept + 1
  end
  if kept == 0 then redis.call('DEL', KEYS[3]) elseif kept < n then redis.call('LTRIM', KEYS[3], -kept, -1) end
end
local rev = redis.call('INCR', KEYS[2])
for _, item in ipairs(writes) do
  local path, content = item[1], item[2]
  if content == cjson.null then
    redis.call('HDEL', KEYS[1], path)
    redis.call('HDEL', KEYS[4], path)
  else
    redis.call('HSET', KEYS[1], path, cjson.encode({rev, content}))
    redis.call('HSET', KEYS[4], path, #content)
    vbytes = vbytes + #content
  end
  redis.call('RPUSH', KEYS[3], cjson.encode({path, rev, content, ARGV[3]}))
end
-- the oldest versions go first, never this commit's own
local length = redis.call('LLEN', KEYS[3])
while length > #writes and (length > max_versions or vbytes > max_version_bytes) do
  local content = cjson.decode(redis.call('LPOP', KEYS[3]))[3]
  if content ~= cjson.null then vbytes = vbytes - #content end
  length = length - 1
end
redis.call('SET', KEYS[5], vbytes)
return rev
"""


class RedisFiles(MemoryFiles):
    """One namespace on the server of a :class:`~chat_memory.backends.redis.RedisStore`."""

    driver_errors = REDIS_DRIVER_ERRORS
    keeps_retention = True

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
        with stored_data(f"Redis key {self._keys[0]!r}"):
            for raw_path, raw in found.items():
                path = _text(raw_path)
                revision, content = json.loads(raw)
                listing[path] = FileEntry(path, size_of(content), revision)
        return listing

    def _read(self, path: str) -> StoredFile | None:
        raw = self.client.hget(self._keys[0], path)
        if raw is None:
            return None
        with stored_data(f"Redis key {self._keys[0]!r}"):
            revision, content = json.loads(raw)
        return StoredFile(path, content, revision)

    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        limits = self.limits
        args = (
            json.dumps([[path, revision or 0] for path, revision in expected.items()]),
            json.dumps([[path, content] for path, content in writes.items()]),
            datetime.now(timezone.utc).isoformat(),
            limits.max_versions,
            limits.version_bytes,
            limits.max_files,
            limits.max_namespace_bytes,
        )
        if (
            self.store._call(self._script, self._keys, args) <= 0
        ):  # 0: a lost race, -1: over a limit now
            return False
        self.client.sadd(self._registry, self.namespace)
        retentions = namespace_retention(self.store.prefix)
        if self.retention_seconds is not None:
            written = datetime.now(timezone.utc).timestamp()
            self.client.hset(retentions, self.namespace, f"{self.retention_seconds}:{written}")
        else:
            self.client.hdel(retentions, self.namespace)
        if is_scoped(self.namespace) and self.client.exists(
            namespace_guard(self.store.prefix, scope_of_key(self.namespace))
        ):
            # checked after the registry knows the namespace: either the erasure's listing saw
            # it, or this sees the guard the erasure set before that listing
            self._drop()
            raise ConcurrencyError(
                f"long-term namespace {self.namespace[:80]!r} is being erased (forget); "
                "commits to it are refused until the erasure guard lapses"
            )
        return True

    def stored_bytes(self) -> tuple[int, int]:
        """(content bytes of the current files, of the kept versions), as the script counts them."""
        live = sum(int(size) for size in self.client.hvals(self._keys[3]))
        return live, int(self.client.get(self._keys[4]) or 0)

    def _versions(self, path: str) -> list[FileVersion]:
        versions = []
        with stored_data(f"Redis key {self._keys[2]!r}"):
            for raw in self.client.lrange(self._keys[2], 0, -1):
                logged_path, revision, content, at = json.loads(raw)
                if logged_path == path:
                    versions.append(
                        FileVersion(path, revision, content, datetime.fromisoformat(at))
                    )
        return versions

    def _drop(self) -> None:
        self.client.delete(*self._keys)
        self.client.srem(self._registry, self.namespace)
        self.client.hdel(namespace_retention(self.store.prefix), self.namespace)

    def namespaces(self) -> list[str]:
        """Every namespace holding files."""
        names = sorted(_text(n) for n in self.client.smembers(self._registry))
        return [n for n in names if self.client.exists(_keys(self.store.prefix, n)[0])]


def namespace_registry(prefix: str) -> str:
    """The set of every namespace name holding files."""
    return f"{prefix}ltm:namespaces"


def namespace_retention(prefix: str) -> str:
    """The hash namespace -> ``"<retention seconds>:<last commit, epoch seconds>"`` of the
    namespaces with a retention (what ``memory.sweep()`` reads)."""
    return f"{prefix}ltm:retention"


def namespace_guard(prefix: str, scope: str) -> str:
    """The erasure guard of a scope's namespaces (named by a digest: no user id)."""
    return f"{prefix}ltm:guard:{guard_name(scope)}"


def namespace_keys(prefix: str, namespace: str) -> list[str]:
    """Every key of one namespace (one hash slot)."""
    return _keys(prefix, namespace)


def _keys(prefix: str, namespace: str) -> list[str]:
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]
    base = f"{prefix}ltm:{{{digest}}}"
    return [f"{base}:files", f"{base}:rev", f"{base}:log", f"{base}:sizes", f"{base}:logbytes"]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
