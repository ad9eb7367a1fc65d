"""``chat-memory fork|export|import|copy``: fork a conversation, dump a store as JSON Lines and
restore one, and copy everything from one store URL to another (resumable, verified). See
docs/moving-stores.md; the library side is :mod:`chat_memory.transfer`."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TypeVar

from ..backends import check_conversation_id, open_store, redact_url
from ..transfer import TransferReport, copy_store, dumps_of, export_store, import_store
from .cli_lifecycle import add_scope_options, scoped
from .cli_session import CommandError, Session
from .cli_session import _sqlite_file as sqlite_file
from .cli_text import say

P = TypeVar("P", bound=argparse.ArgumentParser)

REPLACE_HELP = "overwrite conversations and namespaces the target holds with other content"


def add_transfer_commands(commands: argparse._SubParsersAction[P], common: P) -> None:
    """Register the ``fork``, ``export``, ``import`` and ``copy`` sub-commands."""

    def command(name: str, text: str) -> P:
        return commands.add_parser(name, help=text, description=text, parents=[common])

    fork = command(
        "fork", "fork a conversation: fork -c ID NEW_ID [--at SEQ] (its window as it was then)"
    )
    fork.add_argument("new_conversation", metavar="NEW_ID", help="id of the new conversation")
    fork.add_argument(
        "--at", type=int, metavar="SEQ", help="fork as it was right after this seq (default: now)"
    )
    add_scope_options(fork)
    export = command("export", "write every conversation and long-term memory as JSON Lines")
    export.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
    imported = command("import", "restore a JSON Lines export into the store (FILE or - for stdin)")
    imported.add_argument("file", metavar="FILE", help="the export to read; - reads standard input")
    imported.add_argument("--replace", action="store_true", help=REPLACE_HELP)
    copy = command("copy", "copy every conversation and long-term memory between two stores")
    copy.add_argument("--from", dest="from_url", required=True, metavar="URL", help="source store")
    copy.add_argument("--to", dest="to_url", required=True, metavar="URL", help="target store")
    copy.add_argument("--replace", action="store_true", help=REPLACE_HELP)


def run_fork(args: argparse.Namespace) -> int:
    """``fork -c ID NEW_ID [--at SEQ]``."""
    if args.conversation is None:
        raise CommandError("fork needs the conversation to fork: fork -c ID NEW_ID", 2)
    with Session(args, writes=False) as session:
        memory = scoped(session.reader(), args)
        cid = check_conversation_id(args.conversation)
        window = memory.fork(cid, args.new_conversation, at=args.at)
        at = "now" if args.at is None else f"seq {args.at}"
        say(
            f"Forked {cid!r} ({at}) into {args.new_conversation!r}: {len(window)} events in its window."
        )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """``export [--out FILE]``: the dump on stdout (or FILE), the summary on stderr."""
    with Session(args, writes=False) as session, ExitStack() as files:
        store = session.open_store()
        dumps_of(store, "source")  # refuse before creating the output file
        out: IO[str] = sys.stdout
        if args.out is not None:
            out = files.enter_context(Path(args.out).open("w", encoding="utf-8"))
        report = export_store(store, out)
        _report("Exported", report, session.shown_url)
    return 0


def run_import(args: argparse.Namespace) -> int:
    """``import FILE [--replace]``."""
    with Session(args, writes=True) as session, ExitStack() as files:
        lines: IO[str] = sys.stdin
        if args.file != "-":
            try:
                lines = files.enter_context(Path(args.file).open(encoding="utf-8"))
            except OSError as exc:
                raise CommandError(f"cannot read {args.file}: {exc.strerror or exc}", 2) from None
        report = import_store(session.open_store(), lines, replace=args.replace)
        _report("Imported", report, session.shown_url)
    return 0


def run_copy(args: argparse.Namespace) -> int:
    """``copy --from URL --to URL [--replace]``: resumable (run it again after an
    interruption: what was copied and verified is skipped)."""
    source_file = sqlite_file(args.from_url)
    if source_file is not None and not source_file.exists():
        # opening it would create an empty database: a mistyped source would copy nothing
        raise CommandError(
            f"the source store {redact_url(args.from_url)} does not exist (nothing to copy)", 1
        )
    with open_store(args.from_url) as source, open_store(args.to_url) as target:
        report = copy_store(source, target, replace=args.replace)
    _report("Copied", report, f"{redact_url(args.from_url)} to {redact_url(args.to_url)}")
    return 0


def _report(verb: str, report: TransferReport, where: str) -> None:
    skipped = f", {report.skipped} already there (verified)" if report.skipped else ""
    say(
        f"{verb} {report.conversations} conversations ({report.events} events){skipped}, "
        f"{report.namespaces} long-term namespaces ({report.file_versions} file versions): {where}",
        file=sys.stderr,
    )


TRANSFER_HANDLERS = {
    "fork": run_fork,
    "export": run_export,
    "import": run_import,
    "copy": run_copy,
}
