"""The lifecycle on Redis and Redis Cluster (:class:`~chat_memory.backends.base.KeepsLifecycle`,
docs/lifecycle.md and docs/redis.md): metadata, listing by scope, retention by native expiry and
the sweep, erasure — written once, as steps both Redis stores drive.

Keys (``<prefix>`` the store's, ``S`` the first 32 hex digits of the SHA-256 of a scope prefix,
``D`` of a conversation key):

- a scoped conversation lives in its **scope's hash slot**: ``<prefix>{S}:D:<suffix>``; an
  unscoped one where it always did, ``<prefix>{D}:<suffix>``. Every key of a conversation
  shares its hash tag (one script writes it), and a scope's conversations share one slot with
  the scope's lifecycle keys, so on a cluster too an append updates the index and checks the
  guards in its own script;
- ``<prefix>{S}:index``: sorted set, member a conversation's key base (``<prefix>{S}:D``),
  score its last activity in microseconds of the server's clock; ``<prefix>{S}:tag:<sha1>``:
  set of the bases carrying that tag; ``<prefix>{S}:erasingscope``: the scope's erasure
  guard; ``<base>:erasing``: one conversation's. Names hold digests only, values the key bases:
  no user id is in a lifecycle key;
- the unscoped conversations' index and tag sets, and ``…:scopes`` (the set of scope indexes,
  what a sweep of the whole store walks) live under ``<prefix>{<prefix>conversations}:`` —
  the slot of the registry ``<prefix>conversations``. On a single server the scripts update
  them too; on a cluster a conversation's creation registers it there in one more call (as the
  registry always was), and the unscoped index's scores are then creation times: listing the
  unscoped conversations there reads each one's own record (exact, bounded by their number).

Every write (append, compaction, retraction, metadata, a recorded error) stamps ``active``
and ``created`` in the conversation's meta hash and, with a TTL, ``PEXPIRE``\\ s every key of
the conversation, its scope index and its tag sets in the same script (prelude.lua's
``refresh_ttl``): an idle conversation disappears by itself, its index entry with it or, when
the index lives on, at the next listing or sweep.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any, Generic, Literal

from ..errors import ConcurrencyError, InvalidInputError
from ..lifecycle.keys import scope_of_key, stored_key
from ..lifecycle.records import ConversationRecord, ErasureCounts, merged_values
from .redis_io import LuaScript, RedisSteps, command, script
from .redis_sansio import ClientT, RedisSansIO
from .redis_wire import _text, conversation_base, lifecycle_keys, scope_base

#: Expired conversations' index entries a sweep drops per index and call.
BATCH_OF_EXPIRED = 1000
#: How often ``set_metadata`` re-reads and retries when another writer changed the values.
METADATA_RETRIES = 20


@cache
def _lifecycle_script(name: Literal["lifecycle", "scope"]) -> LuaScript:
    folder = resources.files(__package__) / "redis_scripts"
    common = (folder / "lifecycle_common.lua").read_text(encoding="utf-8")
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name == "lifecycle":
        # after the prelude of every per-conversation script (its keys and refresh_ttl)
        prelude = (folder / "prelude.lua").read_text(encoding="utf-8")
        return LuaScript(prelude + "\n" + common + "\n" + body)
    return LuaScript(common + "\n" + body)


def tag_key(index: str, tag: str) -> str:
    """The set of the bases tagged ``tag`` beside ``index`` (as lifecycle_common.lua names it)."""
    return f"{index[: -len('index')]}tag:{hashlib.sha1(tag.encode('utf-8')).hexdigest()}"


def _when(microseconds: Any) -> datetime:
    return datetime.fromtimestamp(int(_text(microseconds)) / 1_000_000, timezone.utc)


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _record(reply: Sequence[Any]) -> tuple[str, ConversationRecord, str]:
    """``(base, record, values JSON)`` of a record_of reply (lifecycle_common.lua)."""
    base, cid, created, active, events, has_title, title, tags, values = reply
    text = _text(values)
    return (
        _text(base),
        ConversationRecord(
            conversation_id=stored_key(_text(cid)),
            created_at=_when(created),
            last_active_at=_when(active),
            events=int(events),
            title=_text(title) if int(has_title) else None,
            tags=tuple(json.loads(_text(tags))),
            values=json.loads(text),
        ),
        text,
    )


def _counts(reply: Sequence[Any]) -> ErasureCounts:
    events, archived, summaries, records, retracted = (int(x) for x in reply[3:8])
    return ErasureCounts(
        conversations=1,
        events=events,
        archived_events=archived,
        summaries=summaries,
        compaction_records=records,
        retracted_events=retracted,
    )


def _check_scope(scope: Any) -> str:
    if not isinstance(scope, str) or not scope:
        raise InvalidInputError(f"scope ({scope!r}) must be a scope prefix, not empty")
    return scope


def _newest_first(records: list[ConversationRecord]) -> list[ConversationRecord]:
    records.sort(key=lambda r: r.conversation_id)
    records.sort(key=lambda r: r.last_active_at, reverse=True)
    return records


class RedisLifecycle(RedisSansIO[ClientT], Generic[ClientT]):
    """The I/O-free lifecycle of the Redis stores: each ``_…_steps`` is the step of the
    :class:`~chat_memory.backends.base.KeepsLifecycle` method of the same name."""

    # -- keys --------------------------------------------------------------------------------

    @property
    def _scopes_key(self) -> str:
        return f"{scope_base(self.prefix, '')}:scopes"

    def _index(self, scope: str) -> str:
        return f"{scope_base(self.prefix, scope)}:index"

    def _exact(self, scope: str) -> bool:
        """Whether ``scope``'s index scores are every write's (else creation times)."""
        return not self.cluster or scope != ""

    def _scope_steps(self, key: str, *args: Any) -> RedisSteps[Any]:
        yield from self._layout_steps()
        return (yield from script(_lifecycle_script("scope"), (key,), args))

    def _conversation_steps(self, cid: str, *args: Any) -> RedisSteps[Any]:
        return (
            yield from self._script_steps(_lifecycle_script("lifecycle"), self._keys(cid), args)
        )

    # -- what other slots hold, on a cluster -------------------------------------------------

    def _register_steps(self, cid: str) -> RedisSteps[None]:
        """After a write created ``cid`` on a cluster: the registry, the unscoped index or the
        set of scope indexes (the registry's slot), in one call."""
        scope = scope_of_key(cid)
        yield from self._scope_steps(
            self._registry,
            "register",
            cid,
            conversation_base(self.prefix, cid),
            "" if scope else self._index(""),
            self._index(scope) if scope else "",
            self._scopes_key,
        )

    def _created_steps(self, cid: str) -> RedisSteps[None]:
        yield from self._register_steps(cid)

    def _restored_steps(self, cid: str, metadata: Mapping[str, Any]) -> RedisSteps[None]:
        if self.cluster:
            yield from self._register_steps(cid)
            if not scope_of_key(cid) and metadata.get("tags"):
                yield from self._retag_steps(cid, (), list(metadata["tags"]))

    def _metadata_of(self, cid: str, meta: Mapping[str, str]) -> dict[str, Any]:
        """What a dump carries of the lifecycle: title, tags, values, created and last active."""
        return {
            "title": meta.get("title"),
            "tags": json.loads(meta.get("tags") or "[]"),
            "values": json.loads(meta.get("values") or "{}"),
            "created_at": _when(meta.get("created") or meta.get("active") or 0).isoformat(),
            "last_active_at": _when(meta.get("active") or 0).isoformat(),
        }

    def _metadata_pairs(self, cid: str, metadata: Mapping[str, Any]) -> list[str]:
        """The meta fields restore.lua writes for a dump's metadata (its activity kept)."""
        pairs: list[str] = []
        if metadata.get("title") is not None:
            pairs += ["title", str(metadata["title"])]
        if metadata.get("tags"):
            pairs += ["tags", json.dumps(sorted(set(metadata["tags"])))]
        if metadata.get("values"):
            pairs += ["values", json.dumps(metadata["values"], separators=(",", ":"))]
        for name, field in (("created_at", "created"), ("last_active_at", "active")):
            if metadata.get(name):
                pairs += [field, str(_micros(datetime.fromisoformat(metadata[name])))]
        return pairs

    def _unregister_steps(self, cid: str, tags: Sequence[str]) -> RedisSteps[None]:
        """After ``cid`` was deleted on a cluster: undo :meth:`_register_steps` (and, unscoped,
        its tag sets, which share the registry's slot)."""
        scope = scope_of_key(cid)
        index = self._index("")
        yield from self._scope_steps(
            self._registry,
            "unregister",
            cid,
            conversation_base(self.prefix, cid),
            "" if scope else index,
            *([] if scope else [tag_key(index, tag) for tag in tags]),
        )

    # -- records -----------------------------------------------------------------------------

    def _conversation_record_steps(self, cid: str) -> RedisSteps[ConversationRecord | None]:
        reply = yield from self._conversation_steps(cid, "record")
        return _record(reply)[1] if isinstance(reply, list) else None

    def _records_of_steps(self, bases: Sequence[str]) -> RedisSteps[list[ConversationRecord]]:
        """The records of conversations by key base, one call each (other slots than the
        index's: a cluster's unscoped conversations); those gone left out."""
        found = []
        for base in bases:
            reply = yield from self._scope_steps(base, "record")
            if isinstance(reply, list):
                found.append(_record(reply)[1])
        return found

    def _set_metadata_steps(
        self,
        cid: str,
        title: str | None,
        tags: Sequence[str] | None,
        values: Mapping[str, Any],
    ) -> RedisSteps[ConversationRecord]:
        tags_json = "" if tags is None else json.dumps(sorted(set(tags)))
        for _ in range(METADATA_RETRIES):
            before = yield from self._conversation_steps(cid, "record")
            current = _record(before)[2] if isinstance(before, list) else "{}"
            new_values = ""
            if values:
                merged = merged_values(json.loads(current), values)
                new_values = json.dumps(merged, allow_nan=False, separators=(",", ":"))
            reply = yield from self._conversation_steps(
                cid,
                "meta",
                cid,
                self._ttl,
                "0" if title is None else "1",
                title or "",
                tags_json,
                current,
                new_values,
            )
            if int(reply[0]) == -1:
                continue  # another writer changed the values since they were read
            if int(reply[0]) == -2:
                raise self._refused(cid)
            if self.cluster:
                if int(reply[0]):
                    yield from self._register_steps(cid)
                if not scope_of_key(cid) and tags is not None:
                    yield from self._retag_steps(cid, json.loads(_text(reply[2])), tags)
            return _record(reply[1])[1]
        raise ConcurrencyError(
            f"conversation {cid[:80]!r}: its metadata changed under {METADATA_RETRIES} tries"
        )

    def _retag_steps(
        self, cid: str, before: Sequence[str], after: Sequence[str]
    ) -> RedisSteps[None]:
        """A cluster's unscoped conversation: its tag sets (in the registry's slot) follow."""
        index, changes = self._index(""), list[str]()
        for tag in sorted(set(before) - set(after)):
            changes += ["-", tag_key(index, tag)]
        for tag in sorted(set(after) - set(before)):
            changes += ["+", tag_key(index, tag)]
        if changes:
            base = conversation_base(self.prefix, cid)
            yield from self._scope_steps(self._registry, "retag", base, *changes)

    @staticmethod
    def _refused(cid: str) -> ConcurrencyError:
        return ConcurrencyError(
            f"conversation {cid[:80]!r} is being erased (forget); writes that would create it "
            "again are refused until the erasure guard lapses"
        )

    # -- listing -----------------------------------------------------------------------------

    def _list_conversations_steps(
        self, scope: str, tag: str | None, offset: int, limit: int
    ) -> RedisSteps[list[ConversationRecord]]:
        index, exact = self._index(scope), self._exact(scope)
        if tag is not None:
            found = yield from self._scope_steps(
                tag_key(index, tag), "tagged", "1" if exact else "0"
            )
            if exact:
                records = [_record(r)[1] for r in found]
            else:
                records = yield from self._records_of_steps([_text(b) for b in found])
            return _newest_first(records)[offset : offset + limit]
        if exact:
            found = yield from self._scope_steps(index, "page", offset, limit, "1")
            return _newest_first([_record(r)[1] for r in found])
        # a cluster's unscoped index holds creation times: every record, sorted here
        found = yield from self._scope_steps(index, "page", 0, 2**31, "0")
        records = yield from self._records_of_steps([_text(pair[0]) for pair in found])
        return _newest_first(records)[offset : offset + limit]

    # -- retention ---------------------------------------------------------------------------

    def _idle_conversations_steps(
        self, scope: str | None, cutoff: datetime, limit: int
    ) -> RedisSteps[list[str]]:
        if scope is None:
            members = yield from self._command_steps("smembers", self._scopes_key)
            indexes = sorted({self._index(""), *(_text(m) for m in members)})
        else:
            indexes = [self._index(scope)]
        moment = _micros(cutoff)
        found: list[tuple[datetime, str]] = []
        for index in indexes:
            if self._ttl and (index != self._index("") or not self.cluster):
                # entries older than the TTL are of expired conversations: dropped, whatever
                # the memory's own retention (what it finds alive it leaves alone)
                expired = _micros(datetime.now(timezone.utc)) - self._ttl * 1000
                yield from self._scope_steps(index, "idle", expired, BATCH_OF_EXPIRED, "1")
            exact = index != self._index("") or not self.cluster
            pairs = yield from self._scope_steps(
                index, "idle", moment, limit, "1" if exact else "0"
            )
            if exact:
                found += [(_when(score), _text(cid)) for _, cid, score in pairs]
                continue
            for base, score in pairs:
                record = yield from self._scope_steps(_text(base), "record")
                if not isinstance(record, list):  # expired: its entry goes, unless written since
                    yield from self._scope_steps(index, "drop", _text(base), int(float(score)))
                    continue
                kept = _record(record)[1]
                found.append((kept.last_active_at, str(kept.conversation_id)))
        found.sort()
        return [stored_key(cid) for when, cid in found if when < cutoff][:limit]

    def _delete_steps(
        self, cid: str, cutoff: datetime | None, guard_seconds: float | None
    ) -> RedisSteps[ErasureCounts | None]:
        reply = yield from self._conversation_steps(
            cid,
            "delete",
            "" if cutoff is None else _micros(cutoff),
            "" if not guard_seconds else max(1, int(guard_seconds * 1000)),
        )
        status = int(reply[0])
        if status == 2 and self.cluster and not scope_of_key(cid):
            # kept: its entry in the cluster's unscoped index learns its real activity
            yield from self._scope_steps(
                self._index(""), "touch", conversation_base(self.prefix, cid), _text(reply[1])
            )
        if status != 1:
            return None
        if self.cluster:
            yield from self._unregister_steps(cid, json.loads(_text(reply[2])))
        return _counts(reply)

    def _delete_idle_steps(self, cid: str, cutoff: datetime) -> RedisSteps[ErasureCounts | None]:
        return (yield from self._delete_steps(cid, cutoff, None))

    # -- erasure -----------------------------------------------------------------------------

    def _erase_steps(self, cid: str, guard_seconds: float) -> RedisSteps[ErasureCounts]:
        counts = yield from self._delete_steps(cid, None, guard_seconds or None)
        return counts or ErasureCounts()

    def _erase_scope_steps(
        self, scope: str, limit: int, guard_seconds: float
    ) -> RedisSteps[ErasureCounts]:
        scope = _check_scope(scope)
        base = scope_base(self.prefix, scope)
        if guard_seconds > 0:
            yield from self._layout_steps()
            yield from command(
                "set", f"{base}:erasingscope", "1", px=max(1, int(guard_seconds * 1000))
            )
        total, index = ErasureCounts(), f"{base}:index"
        while total.conversations < limit:
            found = yield from self._scope_steps(index, "page", 0, limit - total.conversations, "1")
            if not found:
                break
            for reply in found:
                cid = str(_record(reply)[1].conversation_id)
                total += (
                    yield from self._delete_steps(stored_key(cid), None, None)
                ) or ErasureCounts()
        return total

    # -- long-term namespaces ----------------------------------------------------------------

    def _erase_namespaces_steps(
        self, scope: str, guard_seconds: float
    ) -> RedisSteps[ErasureCounts]:
        from ..longterm.redis import namespace_guard, namespace_registry

        scope = _check_scope(scope)
        if guard_seconds > 0:
            yield from self._layout_steps()
            yield from command(
                "set",
                namespace_guard(self.prefix, scope),
                "1",
                px=max(1, int(guard_seconds * 1000)),
            )
        names = yield from self._command_steps("smembers", namespace_registry(self.prefix))
        total = ErasureCounts()
        for name in sorted(_text(n) for n in names):
            if name.startswith(scope):
                total += yield from self._drop_namespace_steps(name)
        return total

    def _drop_namespace_steps(self, name: str) -> RedisSteps[ErasureCounts]:
        from ..longterm.redis import namespace_keys, namespace_registry, namespace_retention

        keys = namespace_keys(self.prefix, name)
        files, versions = yield from self._script_steps(
            _lifecycle_script("scope"), keys, ("namespace",)
        )
        yield from command("srem", namespace_registry(self.prefix), name)
        yield from self._scope_steps(namespace_retention(self.prefix), "hdel", name)
        return ErasureCounts(long_term_files=int(files), long_term_versions=int(versions))

    def _sweep_namespaces_steps(
        self, scope: str | None, now: datetime
    ) -> RedisSteps[tuple[int, ErasureCounts]]:
        from ..longterm.redis import namespace_retention

        kept = yield from self._scope_steps(namespace_retention(self.prefix), "hgetall")
        count, total = 0, ErasureCounts()
        for i in range(0, len(kept), 2):
            name, value = _text(kept[i]), _text(kept[i + 1])
            if scope is not None and not name.startswith(scope):
                continue
            retention, written = value.split(":", 1)
            if now.timestamp() - float(written) > int(retention):
                total += yield from self._drop_namespace_steps(name)
                count += 1
        return count, total


__all__ = [
    "METADATA_RETRIES",
    "RedisLifecycle",
    "conversation_base",
    "lifecycle_keys",
    "scope_base",
    "tag_key",
]
