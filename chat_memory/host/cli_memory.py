"""``chat-memory memory list|show|delete --namespace NS [PATH]``: an operator's view of a
namespace's long-term memory files (what the memory tool keeps), on the store of ``--url``."""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from ..longterm import ROOT, format_size, long_term_memory
from .cli_session import CommandError, Session
from .cli_text import say, terminal_text

P = TypeVar("P", bound=argparse.ArgumentParser)


def add_memory_command(commands: argparse._SubParsersAction[P], common: P) -> None:
    """Register the ``memory`` sub-command."""
    text = "long-term memory files of a namespace: memory list|show|delete --namespace NS [PATH]"
    sub = commands.add_parser("memory", help=text, description=text, parents=[common])
    sub.add_argument("action", choices=["list", "show", "delete", "versions"])
    sub.add_argument(
        "path", nargs="?", help=f"a path under {ROOT} (show, delete, versions; list: a directory)"
    )
    sub.add_argument(
        "--namespace",
        "-n",
        required=True,
        help="whose memory (e.g. the user id the agent was given)",
    )
    sub.add_argument(
        "--yes",
        action="store_true",
        help="delete without asking (required when not run from a terminal)",
    )


def run_memory_command(args: argparse.Namespace) -> int:
    """The ``memory`` sub-command; returns the exit code."""
    writes = args.action == "delete"
    with Session(args, writes=writes) as session:
        if session.store is None:
            raise CommandError(
                f"the store {session.shown_url} does not exist yet: no memory is stored there", 1
            )
        files = long_term_memory(session.store, args.namespace)
        if args.action == "list":
            under = args.path or ROOT
            entries = [
                e
                for e in files.files()
                if e.path == under or e.path.startswith(under.rstrip("/") + "/")
            ]
            if not entries:
                say(f"No memory files in namespace {args.namespace!r} under {under}.")
                return 0
            for entry in entries:
                say(f"{format_size(entry.size):>7}  rev {entry.revision:<6} {entry.path}")
            return 0
        if not args.path:
            raise CommandError(f"memory {args.action} needs a PATH under {ROOT}", 2)
        if args.action == "show":
            say(files.read(args.path), end="")
            return 0
        if args.action == "versions":
            for version in files.versions(args.path):
                what = (
                    "deleted"
                    if version.content is None
                    else f"{len(version.content.encode('utf-8'))} bytes"
                )
                say(f"rev {version.revision:<6} {version.created_at:%Y-%m-%d %H:%M:%S} UTC  {what}")
            return 0
        what = f"{args.path} of namespace {args.namespace!r}"
        if not args.yes:
            if not sys.stdin.isatty():
                raise CommandError(
                    f"delete would remove {what}; pass --yes to confirm (no terminal to ask)", 2
                )
            if input(terminal_text(f"Delete {what}? [y/N] ")).strip().lower() not in ("y", "yes"):
                say("Nothing deleted.")
                return 1
        say(files.delete(args.path))
        return 0
