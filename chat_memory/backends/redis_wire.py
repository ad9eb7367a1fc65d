"""The Redis stores' wire format: the names of a conversation's keys (key bases, hash tags,
the lifecycle keys a script gets), the Lua scripts of ``redis_scripts/`` (:func:`lua`), a batch
packed into append.lua's one argument (:func:`packed_batch`), and the decoding of the scripts'
replies (elements into events, the one-string ``'tail'`` and ``'same'`` replies into the shape
of the list ones).

I/O-free helpers with no state: :class:`~chat_memory.backends.redis_sansio.RedisSansIO`'s steps
use them, as do the lifecycle and transfer steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any, Literal

from ..events import Event, EventType, Window
from ..lifecycle.keys import is_scoped, scope_of_key
from ..search import search_text
from .bookkeeping import envelope_id_prefix, replaced
from .redis_io import LuaScript

_SUFFIXES = (
    "meta",
    "pinned",
    "active",
    "archive",
    "texts",
    "recent",
    "compactions",
    "ids",
    "calls",
    "retracted",
    "timeline",
)
#: Items of the reply of ``window()`` (prelude.lua): version, last seq, error, summary, pinned,
#: active, archive size, failed compactions; a script that returns more puts it after these.
_WINDOW_REPLY = 8
#: The keys ``load.lua`` reads (meta, pinned, active, archive: ``window_unless``), the first of
#: ``_SUFFIXES``: a read sends only those, not the fifteen or so a write needs.
_WINDOW_KEYS = 4

#: The scripts of ``redis_scripts/`` (besides ``prelude.lua``, which each of them but ``prune``
#: starts with).
ScriptName = Literal[
    "append",
    "apply",
    "dump",
    "find",
    "fork",
    "history",
    "load",
    "prune",
    "record_error",
    "restore",
    "retract",
    "search",
]


@cache
def lua(name: ScriptName) -> LuaScript:
    """The script ``redis_scripts/<name>.lua`` (after the shared prelude, except ``prune``)."""
    folder = resources.files(__package__) / "redis_scripts"
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name != "prune":
        body = (folder / "prelude.lua").read_text(encoding="utf-8") + "\n" + body
    return LuaScript(body)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _event(element: bytes | str, archived: bool = False, retracted: bool = False) -> Event:
    seq, _, envelope = _text(element).partition(":")
    return replaced(
        Event.from_json(envelope), {"seq": int(seq), "archived": archived, "retracted": retracted}
    )


def _stored(envelope: str, seq: int) -> Event:
    """The stored copy of an event appended as ``envelope`` with ``seq``: what reading back
    its element (``"<seq>:<envelope>"``) gives, without the round trip."""
    return replaced(Event.from_json(envelope), {"seq": seq, "archived": False, "retracted": False})


def _with_batch(window: Window, batch: Sequence[tuple[Event, str]], seqs: Sequence[Any]) -> Window:
    """``window`` followed by the events of ``batch`` (each with the envelope sent) that got a
    seq (``seqs``, one per event, 0 for an event stored before): the window after an append
    that added no pinned event."""
    added = [_stored(envelope, int(seq)) for (_, envelope), seq in zip(batch, seqs) if int(seq)]
    if not added:
        return window
    return Window(pinned=window.pinned, summary=window.summary, active=(*window.active, *added))


def _tail_reply(flat: bytes | str) -> list[Any]:
    """An append's ``'tail'`` reply as one string (append.lua) in the shape of the list one:
    ``[created, the window's ten items, (plan applied, archive size)]``."""
    fields = _text(flat).split("|", 10)
    _, created, version, last_seq, archived, failures, epoch, seqs, applied, after, error = fields
    window = [version, last_seq, error, "", [], seqs.split(",") if seqs else [], archived]
    found: list[Any] = [int(created), [*window, failures, "tail", epoch]]
    return [*found, applied, after] if applied else found


def _same_reply(flat: bytes | str) -> list[Any]:
    """A ``'same'`` window reply as one string (load.lua) in the shape of the list one."""
    _, version, last_seq, archived, failures, epoch, error = _text(flat).split("|", 6)
    return [version, last_seq, error, "", [], [], archived, failures, "same", epoch]


def _element_seq(element: bytes | str) -> int:
    """The seq an element (``"<seq>:<envelope>"``) starts with."""
    if isinstance(element, bytes):
        return int(element[: element.index(b":")])
    return int(element[: element.index(":")])


def _id_prefix(event_id: str) -> str:
    """How an envelope starts for an event of this id (``{"id":"…"``), the ``ids`` index's key."""
    return envelope_id_prefix(Event.user("").model_copy(update={"id": event_id}).to_json())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def conversation_base(prefix: str, cid: str) -> str:
    """What every key of conversation ``cid`` starts with (its hash tag included)."""
    if is_scoped(cid):
        return f"{prefix}{{{_digest(scope_of_key(cid))}}}:{_digest(cid)}"
    return f"{prefix}{{{_digest(cid)}}}"


def scope_base(prefix: str, scope: str) -> str:
    """What the lifecycle keys of a scope prefix start with (``""``: the unscoped ones, in the
    registry's slot)."""
    if scope:
        return f"{prefix}{{{_digest(scope)}}}"
    return f"{prefix}{{{prefix}conversations}}"


def lifecycle_keys(prefix: str, cid: str, cluster: bool) -> list[str]:
    """The lifecycle keys a per-conversation script gets after the conversation's own
    (prelude.lua finds them by the role their names end with): on a cluster only those of the
    conversation's slot."""
    keys = [f"{conversation_base(prefix, cid)}:erasing"]
    scope = scope_of_key(cid)
    if scope:
        base = scope_base(prefix, scope)
        keys += [f"{base}:erasingscope", f"{base}:index"]
    elif not cluster:
        keys.append(f"{scope_base(prefix, '')}:index")
    if not cluster:
        keys.append(f"{scope_base(prefix, '')}:scopes")
    return keys


def packed_batch(events: Iterable[Event]) -> tuple[bytes, list[tuple[Event, str]]]:
    """A batch as append.lua takes it, in one argument (a client encodes every argument on its
    own, so one per event field cost more than the rest of an append): per event, ``p``
    (pinned) or ``a``, the envelope's byte length, ``:``, the envelope, the folded text's byte
    length, ``:``, the text. Also each event with its envelope (each serialised once)."""
    parts: list[bytes] = []
    batch: list[tuple[Event, str]] = []
    for event in events:
        envelope = event.to_json()
        batch.append((event, envelope))
        data = envelope.encode("utf-8")
        if event.type is EventType.SYSTEM:
            parts.append(b"p%d:%s0:" % (len(data), data))
        else:
            text = (search_text(event) or "").encode("utf-8")
            parts.append(b"a%d:%s%d:%s" % (len(data), data, len(text), text))
    return b"".join(parts), batch


__all__ = [
    "ScriptName",
    "conversation_base",
    "lifecycle_keys",
    "lua",
    "packed_batch",
    "scope_base",
]
