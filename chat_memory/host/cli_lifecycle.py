"""``chat-memory list --user/--app/--tag``, ``forget`` and ``sweep``: whose conversations are
stored, forgetting a user (or one conversation), and deleting idle conversations (run it from
cron or a Kubernetes CronJob; docs/lifecycle.md). The library side is
:meth:`ChatMemory.conversations <chat_memory.ChatMemory.conversations>`,
:meth:`~chat_memory.ChatMemory.forget` and :meth:`~chat_memory.ChatMemory.sweep`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, TypeVar

from .. import ChatMemory, MemoryConfig
from . import cli_json
from .cli_session import CommandError, Session
from .cli_text import say, terminal_text

P = TypeVar("P", bound=argparse.ArgumentParser)


def add_scope_options(sub: argparse.ArgumentParser) -> None:
    """``--user`` and ``--app``: work inside that user's scope (see ``memory.for_user``)."""
    sub.add_argument("--user", metavar="ID", help="the user whose conversations (a scope)")
    sub.add_argument("--app", metavar="NAME", help="the app of the scope (with --user)")


def add_list_filters(listing: argparse.ArgumentParser) -> None:
    """``list --user/--app/--tag``: a scope's conversations, newest activity first."""
    add_scope_options(listing)
    listing.add_argument("--tag", help="only conversations with this tag")


def add_lifecycle_commands(commands: argparse._SubParsersAction[P], common: P) -> None:
    """Register the ``forget`` and ``sweep`` sub-commands."""
    text = "erase a user (--user ID [--app NAME]) or one conversation (-c ID), with a receipt"
    forget = commands.add_parser("forget", help=text, description=text, parents=[common])
    add_scope_options(forget)
    forget.add_argument("--json", action="store_true", help="print the receipt as JSON")
    forget.add_argument(
        "--yes", action="store_true", help="do not ask (required when not run from a terminal)"
    )
    text = "delete conversations idle longer than --retention-seconds (for cron / a CronJob)"
    sweep = commands.add_parser("sweep", help=text, description=text, parents=[common])
    add_scope_options(sweep)
    sweep.add_argument(
        "--retention-seconds",
        type=int,
        required=True,
        metavar="N",
        help="delete conversations with no write for N seconds",
    )
    sweep.add_argument("--json", action="store_true", help="print the report as JSON")


def scoped(memory: ChatMemory, args: argparse.Namespace) -> ChatMemory:
    """``memory`` bound to ``--user``/``--app`` when given."""
    user, app = getattr(args, "user", None), getattr(args, "app", None)
    if user is None and app is not None:
        raise CommandError(f"--app ({app!r}) needs --user", 2)
    return memory if user is None else memory.for_user(user, app)


def wants_scoped_list(args: argparse.Namespace) -> bool:
    """Whether ``list`` was asked for a scope or a tag (else: every stored id, as before)."""
    return any(getattr(args, name, None) is not None for name in ("user", "app", "tag"))


def run_scoped_list(args: argparse.Namespace, page: int, size: int) -> int:
    """``list --user U [--app A] [--tag T]``: newest activity first, through the store's index."""
    with Session(args, writes=False) as session:
        memory = scoped(ChatMemory(session.open_store(), MemoryConfig()), args)
        found = memory.conversations(tag=args.tag, page=page, page_size=size)
        if args.json:
            say(cli_json.dumps([_plain(info) for info in found]))
            return 0
        for info in found:
            title = f"  {info.title}" if info.title else ""
            tags = f"  [{', '.join(info.tags)}]" if info.tags else ""
            when = info.last_active_at.isoformat(timespec="seconds")
            say(f"{info.id!r:<30} {info.events:>6} events  {when}{title}{tags}")
        if not found:
            say("No conversations." if page == 1 else f"(page {page} is past the last page)")
    return 0


def run_forget(args: argparse.Namespace) -> int:
    """``forget --user U [--app A]`` or ``forget -c ID [--user U]``."""
    if (args.user is None) == (args.conversation is None):
        raise CommandError("forget needs --user ID (a user) or -c ID (one conversation)", 2)
    with Session(args, writes=False) as session:
        memory = ChatMemory(session.open_store(), MemoryConfig())
        what = (
            f"every conversation and long-term memory of user {args.user!r}"
            + (f" in app {args.app!r}" if args.app else "")
            if args.conversation is None
            else f"conversation {args.conversation!r}"
        )
        if not args.yes:
            if not sys.stdin.isatty():
                raise CommandError(f"forget would erase {what}; pass --yes to confirm", 2)
            answer = input(terminal_text(f"Erase {what} from {session.shown_url}? [y/N] "))
            if answer.strip().lower() not in ("y", "yes"):
                say("Nothing erased.")
                return 1
        if args.conversation is None:
            receipt = memory.forget(user=args.user, app=args.app)
        else:
            receipt = scoped(memory, args).forget(conversation=args.conversation)
        _show(receipt, args.json, f"Erased {what}")
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    """``sweep --retention-seconds N [--user U]``."""
    with Session(args, writes=False) as session:
        if session.store is None:
            say(f"Nothing to sweep: {session.shown_url} does not exist yet.")
            return 0
        config = MemoryConfig(retention_seconds=args.retention_seconds)
        report = scoped(ChatMemory(session.store, config), args).sweep()
        _show(report, args.json, f"Swept {session.shown_url}")
    return 0


def _show(result: Any, as_json: bool, headline: str) -> None:
    data = _plain(result)
    if as_json:
        say(cli_json.dumps(data))
        return
    say(f"{headline}:")
    for name, value in _flat(data):
        say(f"  {name + ':':<28} {value}")


def _plain(value: Any) -> Any:
    data = dataclasses.asdict(value)
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in data.items()}


def _flat(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            rows += _flat(value, f"{prefix}{key}.")
        else:
            rows.append((prefix + key, value))
    return rows


LIFECYCLE_HANDLERS = {"forget": run_forget, "sweep": run_sweep}
