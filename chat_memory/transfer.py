"""Moving conversations between stores: a versioned JSON Lines dump (:func:`export_store`,
:func:`import_store`) and a direct, resumable, verified copy (:func:`copy_store`), both
exact (seqs, archive and retraction flags, summaries, compaction records, the fork timeline,
metadata and scope) and without re-running compaction, plus long-term memory files and their
kept versions. A store takes part through the :class:`~chat_memory.backends.base.Dumps`
ability; one without it is refused, naming it. See docs/moving-stores.md.

The format (version 1), one JSON object a line, streamed (one conversation at a time in
memory)::

    {"format": "chat-memory", "version": 1}
    {"part": "conversation", "id": …, "last_seq": …, "version": …, "compaction_error": …,
     "compaction_failures": …, "metadata": {…}, "events": N, "checksum": "<sha256>"}
    {"part": "events", "id": …, "events": [<event envelope>, …]}      (chunks of 200)
    {"part": "records", "id": …, "records": […]}
    {"part": "timeline", "id": …, "timeline": […]}
    {"part": "end", "id": …}
    {"part": "long_term", "namespace": …, "files": [{"path": …, "versions": [<content|null>, …]}],
     "checksum": "<sha256>"}
    {"part": "end_of_dump", "conversations": N, "namespaces": M}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from .backends.base import Dumps, Store
from .backends.registry import store_classes
from .backends.timeline import ConversationDump
from .errors import ConfigurationError, InvalidInputError, StorageError
from .events import Event
from .lifecycle.keys import stored_key

FORMAT = "chat-memory"
FORMAT_VERSION = 1
EVENTS_PER_LINE = 200

__all__ = [
    "FORMAT_VERSION",
    "ConversationDump",
    "TransferReport",
    "copy_store",
    "dumps_of",
    "export_store",
    "import_store",
]


@dataclass
class TransferReport:
    """What an export, import or copy did: conversations and events moved, conversations
    skipped because the target already held them verified (a resumed copy), long-term
    namespaces and file versions moved, and the checksum of each conversation moved."""

    conversations: int = 0
    events: int = 0
    skipped: int = 0
    namespaces: int = 0
    file_versions: int = 0
    checksums: dict[str, str] = field(default_factory=dict)


def dumps_of(store: Any, role: str) -> Dumps:
    """``store`` as a :class:`Dumps`, or a :class:`ConfigurationError` naming the ability."""
    if not isinstance(store, Dumps):
        able = [f"{c.schemes[0]}://" for c in store_classes() if issubclass(c, Dumps) and c.schemes]
        raise ConfigurationError(
            f"the {role} store ({type(store).__name__}) cannot dump and restore conversations "
            f"(it lacks the Dumps ability: dump, restore); stores that have it: {', '.join(able)}"
        )
    return store


# -- JSON Lines ------------------------------------------------------------------------------


def export_store(
    store: Store, out: IO[str], conversations: Iterable[str] | None = None
) -> TransferReport:
    """Write every conversation of ``store`` (or those named) and its long-term memory to
    ``out`` as JSON Lines, one conversation at a time."""
    source = dumps_of(store, "source")
    report = TransferReport()
    out.write(_line({"format": FORMAT, "version": FORMAT_VERSION}))
    for key in store.conversations() if conversations is None else conversations:
        cid = stored_key(key)
        dump = source.dump(cid)
        if dump is None:
            if conversations is None:
                continue  # deleted since it was listed (a live store)
            raise InvalidInputError(f"conversation_id ({cid!r}) is not a stored conversation")
        for part in _conversation_lines(dump):
            out.write(_line(part))
        report.conversations += 1
        report.events += len(dump.events)
        report.checksums[cid] = dump.checksum()
    for namespace, files in _long_term(store):
        out.write(
            _line(
                {
                    "part": "long_term",
                    "namespace": namespace,
                    "files": files,
                    "checksum": _files_checksum(files),
                }
            )
        )
        report.namespaces += 1
        report.file_versions += sum(len(f["versions"]) for f in files)
    out.write(
        _line(
            {
                "part": "end_of_dump",
                "conversations": report.conversations,
                "namespaces": report.namespaces,
            }
        )
    )
    return report


def import_store(store: Store, lines: Iterable[str], replace: bool = False) -> TransferReport:
    """Restore a JSON Lines dump into ``store``, checking each conversation's checksum; a
    conversation already stored with the same content is skipped (so an interrupted import
    can be run again), one stored with other content is refused unless ``replace``."""
    target = dumps_of(store, "target")
    report = TransferReport()
    parts = _parts(lines)
    header = next(parts, None)
    if header is None or header.get("format") != FORMAT:
        raise InvalidInputError(f"not a chat-memory dump: the first line is {header!r}")
    if header.get("version") != FORMAT_VERSION:
        raise InvalidInputError(
            f"dump format version ({header.get('version')!r}) is not supported; "
            f"this chat-memory reads version {FORMAT_VERSION}"
        )
    ended = False
    for part in parts:
        kind = part.get("part")
        if kind == "conversation":
            dump, checksum = _read_conversation(part, parts)
            _put(store, target, dump, checksum, replace, report)
        elif kind == "long_term":
            if _files_checksum(part["files"]) != part["checksum"]:
                raise InvalidInputError(
                    f"long-term namespace ({part['namespace']!r}) fails its checksum"
                )
            _put_files(store, part["namespace"], part["files"], replace, report)
        elif kind == "end_of_dump":
            ended = True
        else:
            raise InvalidInputError(f"dump part ({kind!r}) is not known here")
    if not ended:
        raise InvalidInputError("the dump is truncated: it has no end_of_dump line")
    return report


def _conversation_lines(dump: ConversationDump) -> Iterator[dict[str, Any]]:
    cid = dump.conversation_id
    yield {
        "part": "conversation",
        "id": cid,
        "last_seq": dump.last_seq,
        "version": dump.version,
        "compaction_error": dump.compaction_error,
        "compaction_failures": dump.compaction_failures,
        "metadata": dict(dump.metadata),
        "events": len(dump.events),
        "timeline_from": dump.timeline_from,
        "checksum": dump.checksum(),
    }
    for start in range(0, len(dump.events), EVENTS_PER_LINE):
        chunk = dump.events[start : start + EVENTS_PER_LINE]
        yield {"part": "events", "id": cid, "events": [json.loads(e.to_json()) for e in chunk]}
    yield {"part": "records", "id": cid, "records": list(dump.records)}
    yield {"part": "timeline", "id": cid, "timeline": list(dump.timeline)}
    yield {"part": "end", "id": cid}


def _read_conversation(
    head: dict[str, Any], parts: Iterator[dict[str, Any]]
) -> tuple[ConversationDump, str]:
    # a scoped key (docs/lifecycle.md) read from a file is re-marked as one, once checked
    cid = stored_key(head["id"])
    events: list[Event] = []
    records: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    for part in parts:
        if part.get("id") != cid:
            raise InvalidInputError(
                f"dump part ({part.get('part')!r}) of conversation {part.get('id')!r} "
                f"inside conversation {cid!r}"
            )
        kind = part.get("part")
        if kind == "events":
            events += [Event.from_json(json.dumps(e)) for e in part["events"]]
        elif kind == "records":
            records += part["records"]
        elif kind == "timeline":
            timeline += part["timeline"]
        elif kind == "end":
            break
        else:
            raise InvalidInputError(f"dump part ({kind!r}) is not known inside a conversation")
    else:
        raise InvalidInputError(f"the dump is truncated inside conversation {cid!r}")
    dump = ConversationDump(
        conversation_id=cid,
        last_seq=head["last_seq"],
        events=tuple(events),
        records=tuple(records),
        timeline=tuple(timeline),
        compaction_error=head["compaction_error"],
        compaction_failures=head["compaction_failures"],
        metadata=head["metadata"],
        version=head["version"],
        timeline_from=head.get("timeline_from", 0),
    )
    if len(events) != head["events"] or dump.checksum() != head["checksum"]:
        raise InvalidInputError(
            f"conversation ({cid!r}) fails its checksum in the dump: "
            f"{len(events)} events read, {head['events']} announced"
        )
    return dump, head["checksum"]


def _parts(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            part = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"dump line {number} is not JSON: {exc}") from None
        if not isinstance(part, dict):
            raise InvalidInputError(f"dump line {number} ({line[:60]!r}) is not a JSON object")
        yield part


def _line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- copy ------------------------------------------------------------------------------------


def copy_store(
    source: Store,
    target: Store,
    replace: bool = False,
    conversations: Iterable[str] | None = None,
) -> TransferReport:
    """Copy every conversation (or those named) and the long-term memory of ``source`` into
    ``target``, each verified after it is written (event count and content checksum read
    back from the target). Resumable: a conversation the target holds with the same checksum
    is skipped; one it holds with other content is refused unless ``replace`` (then it is
    cleared and copied again)."""
    reader = dumps_of(source, "source")
    writer = dumps_of(target, "target")
    report = TransferReport()
    for key in source.conversations() if conversations is None else conversations:
        cid = stored_key(key)
        dump = reader.dump(cid)
        if dump is None:
            if conversations is None:
                continue  # deleted since it was listed (a live store)
            raise InvalidInputError(f"conversation_id ({cid!r}) is not a stored conversation")
        _put(target, writer, dump, dump.checksum(), replace, report)
    for namespace, files in _long_term(source):
        _put_files(target, namespace, files, replace, report)
    return report


def _put(
    store: Store,
    writer: Dumps,
    dump: ConversationDump,
    checksum: str,
    replace: bool,
    report: TransferReport,
) -> None:
    cid = dump.conversation_id
    present = writer.dump(cid)
    if present is not None and present.checksum() == checksum:
        report.skipped += 1
        return
    if present is not None:
        if not replace:
            raise InvalidInputError(
                f"conversation ({cid!r}) is stored on the target with other content; "
                "pass replace (--replace) to overwrite it"
            )
        store.clear(cid)
    writer.restore(dump)
    written = writer.dump(cid)
    if written is None or written.checksum() != checksum or len(written.events) != len(dump.events):
        raise StorageError(
            f"conversation ({cid!r}) did not verify after the copy: "
            f"{0 if written is None else len(written.events)} of {len(dump.events)} events read back"
        )
    report.conversations += 1
    report.events += len(dump.events)
    report.checksums[cid] = checksum


# -- long-term memory ------------------------------------------------------------------------


def _long_term(store: Store) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each namespace of ``store``'s long-term memory: its current files, each with the
    contents of its kept versions, oldest first (None: a deletion)."""
    if getattr(type(store), "long_term", None) is None:
        return
    from .longterm import long_term_memory

    for name in long_term_memory(store, "default").namespaces():
        namespace = stored_key(name)
        files = long_term_memory(store, namespace)
        yield (
            namespace,
            [
                {
                    "path": entry.path,
                    "content": files.read(entry.path),
                    "versions": [v.content for v in files.versions(entry.path)],
                }
                for entry in sorted(files.files(), key=lambda e: e.path)
            ],
        )


def _put_files(
    store: Store, namespace: str, files: list[dict[str, Any]], replace: bool, report: TransferReport
) -> None:
    """Replay a namespace's kept versions on ``store`` (revisions are renumbered there)."""
    from .longterm import long_term_memory

    if getattr(type(store), "long_term", None) is None:
        raise ConfigurationError(
            f"the target store ({type(store).__name__}) has no long-term memory to copy "
            f"namespace {namespace!r} into"
        )
    memory = long_term_memory(store, stored_key(namespace))
    present = [
        {
            "path": e.path,
            "content": memory.read(e.path),
            "versions": [v.content for v in memory.versions(e.path)],
        }
        for e in sorted(memory.files(), key=lambda e: e.path)
    ]
    if present == files:
        return
    if present and not replace and not _interrupted_replay(present, files):
        raise InvalidInputError(
            f"long-term namespace ({namespace!r}) holds other files on the target; "
            "pass replace (--replace) to overwrite it"
        )
    memory.clear()
    for entry in files:
        revision: int | None = None
        contents = _replayed(entry)
        for content in contents:
            if not memory._commit({entry["path"]: revision}, {entry["path"]: content}):
                raise StorageError(
                    f"long-term file ({entry['path']!r}) of namespace {namespace!r} "
                    "could not be written on the target"
                )
            current = memory._read(entry["path"])
            revision = None if current is None else current.revision
        report.file_versions += len(contents)
    report.namespaces += 1


def _replayed(entry: dict[str, Any]) -> list[str | None]:
    """The contents a file's replay writes on the target, oldest first."""
    contents: list[str | None] = list(entry["versions"])
    if not contents or contents[-1] != entry["content"]:
        contents.append(entry["content"])  # its versions were trimmed: keep what it holds
    return contents


def _interrupted_replay(present: list[dict[str, Any]], files: list[dict[str, Any]]) -> bool:
    """Whether the target's namespace is what an interrupted replay of ``files`` leaves
    (each file there is one of them with only its first versions): then replaying it again
    loses nothing, and a resumed copy must not be refused."""
    wanted = {entry["path"]: _replayed(entry) for entry in files}
    return all(
        entry["path"] in wanted
        and entry["versions"][-1:] == [entry["content"]]
        and entry["versions"] == wanted[entry["path"]][: len(entry["versions"])]
        for entry in present
    )


def _files_checksum(files: list[dict[str, Any]]) -> str:
    return hashlib.sha256(
        json.dumps(files, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()
