"""The ``chat-memory`` command line: run the demo or a chat, and look into stored
conversations (list, window, history, search, stats, compact, clear), the nodes and the
templates.

Exit codes: 0 success, 1 runtime failure (the store or the model failed, an unknown
conversation, a store that does not exist yet), 2 usage or configuration error, 141 output
closed early (``| head``). Errors are one line on stderr; store URLs are shown with their
credentials masked, and the store URL's secrets are masked in every message and log line
(docs/security.md). Everything is printed through :func:`~.cli_text.say`: stored text cannot
send control sequences to the operator's terminal."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .. import (
    ChatMemoryError,
    ConfigurationError,
    Event,
    EventType,
    InvalidInputError,
    MemoryConfig,
)
from ..backends import ENV_URL, default_url, redact_message
from ..inspector import add_ui_command, run_ui
from ..search import SearchQuery
from ..strategies import strategy_names
from ..templates import template_names, template_source
from ..testing.scripted_model import API_KEY as SCRIPTED_API_KEY
from ..testing.scripted_model import LABEL as SCRIPTED_LABEL
from ..tools import format_page, tool_page
from . import cli_json
from .cli_lifecycle import (
    LIFECYCLE_HANDLERS,
    add_lifecycle_commands,
    add_list_filters,
    run_scoped_list,
    wants_scoped_list,
)
from .cli_memory import add_memory_command, run_memory_command
from .cli_session import (
    DEFAULT_CONVERSATION,
    DEFAULT_TEMPLATE,
    LIMIT_FLAGS,
    CommandError,
    Session,
    chat_user,
    chosen_config,
)
from .cli_text import say, terminal_text
from .cli_transfer import TRANSFER_HANDLERS, add_transfer_commands
from .demo import run_demo
from .nodes import default_registry
from .workflow import load_template

CONTENT_WIDTH = 100
LIST_PAGE_SIZE = 50
#: exit code when stdout is closed early (128 + SIGPIPE, what a shell reports for `yes | head`)
EXIT_PIPE_CLOSED = 141


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one sub-command per action, ``--help`` on each)."""
    parser = argparse.ArgumentParser(
        prog="chat-memory",
        description="Chat memory for AI agents: a bounded window, an archive, and a conversation_search tool.",
        parents=[_common_options(top_level=True)],
    )
    # The sub-commands take the same options; their defaults are suppressed so that an
    # option given before the sub-command is not reset by it.
    common = _common_options(top_level=False)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_IntermixedParser
    )

    def command(name: str, help_text: str, json_output: bool = False) -> _IntermixedParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[common])
        if json_output:
            sub.add_argument(
                "--json", action="store_true", help="print JSON for scripts (shapes: docs/cli.md)"
            )
        return sub

    scripted: dict[str, Any] = {
        "action": "store_true",
        "help": "use the scripted stand-in model even with ANTHROPIC_API_KEY",
    }
    command(
        "demo", "run the five-facts conversation of the compacting-chat template end to end"
    ).add_argument("--scripted", **scripted)
    chat = command(
        "chat", "chat interactively through the template (/quit or end of input to stop)"
    )
    chat.add_argument("--scripted", **scripted)
    chat.add_argument(
        "--user",
        metavar="ID",
        help="the user id the trigger sends (userId); required by templates that keep memory per user, "
        "such as remembering-chat",
    )
    listing = command(
        "list", "list the stored conversation ids, sorted, a page at a time", json_output=True
    )
    listing.add_argument("--page", type=int, default=1, help="page number, 1 first (default 1)")
    listing.add_argument(
        "--page-size",
        type=int,
        default=LIST_PAGE_SIZE,
        help=f"ids per page (default {LIST_PAGE_SIZE})",
    )
    add_list_filters(listing)
    command("window", "show what the model sees now, with tokens per event", json_output=True)
    command("history", "show every stored event, archived ones included", json_output=True)
    search = command(
        "search", "search the whole conversation (literal, case-insensitive)", json_output=True
    )
    search.add_argument("keyword", help="text to look for")
    search.add_argument(
        "--page", type=int, default=1, help="page number, 1 first, as in the output (default 1)"
    )
    search.add_argument(
        "--page-size", type=int, help="hits per page (default: the template's search page size)"
    )
    search.add_argument(
        "--mode",
        choices=["phrase", "all", "any"],
        default="phrase",
        help="match mode (default phrase)",
    )
    compact = command(
        "compact",
        "compact now with the strategy you name: --strategy NAME and its limits, or --template NAME",
    )
    compact.add_argument("--strategy", help=f"compaction strategy: {', '.join(strategy_names())}")
    for field, flag in LIMIT_FLAGS.items():
        compact.add_argument(
            flag,
            dest=field,
            type=int,
            metavar="N",
            help=f"{field.replace('_', ' ')} for --strategy",
        )
    compact.add_argument(
        "--summarizer-model", help="Claude model that writes summaries (summarizing strategies)"
    )
    command("stats", "counts of the window and the archive", json_output=True)
    clear = command("clear", "delete one conversation (window, summary and archive): clear -c ID")
    clear.add_argument(
        "--yes", action="store_true", help="do not ask (required when not run from a terminal)"
    )
    nodes = command("nodes", "list the node definitions")
    nodes.add_argument("--json", action="store_true", help="print the definitions as JSON")
    templates = command(
        "templates",
        "list the templates, print one (templates show NAME) or export one (templates export NAME --format langflow)",
    )
    templates.add_argument("action", nargs="?", choices=["list", "show", "export"], default="list")
    templates.add_argument("name", nargs="?", help="template name (for show and export)")
    templates.add_argument(
        "--format",
        choices=["langflow"],
        default="langflow",
        help="export format (needs the langflow extra)",
    )
    add_memory_command(commands, common)
    add_transfer_commands(commands, common)
    add_lifecycle_commands(commands, common)
    add_ui_command(commands, common)
    return parser


class _IntermixedParser(argparse.ArgumentParser):
    """A sub-command's parser that takes its options anywhere among its positionals.

    Plain argparse binds an optional positional (``memory show [PATH]``) to nothing when an
    option comes first, so ``memory show --namespace NS PATH`` (the documented form) failed
    with "unrecognized arguments: PATH". Intermixed parsing reads the options first, then the
    positionals in order, whatever their places. Only parsers with such a positional need
    it; a ``--`` (``search -- -x``) keeps the plain parsing, which honours it (the intermixed
    one drops it between its two passes)."""

    _inner = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # parse_known_intermixed_args calls parse_known_args itself (twice): those calls
        # must be the plain ones
        optional = any(a.nargs in ("?", "*") for a in self._get_positional_actions())
        if self._inner or not optional or (args is not None and "--" in args):
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def _common_options(top_level: bool) -> _IntermixedParser:
    # of the sub-commands' class, as add_parser's parents must be (only its options are used)
    options = _IntermixedParser(add_help=False)
    default: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    options.add_argument(
        "--url", help=f"store URL (default: ${ENV_URL}, else the embedded SQLite file)", **default
    )
    options.add_argument(
        "-c",
        "--conversation",
        help=f"conversation id (default: {DEFAULT_CONVERSATION!r}; demo: a new one)",
        **default,
    )
    options.add_argument(
        "--template",
        help=f"template whose memory settings apply (default: {DEFAULT_TEMPLATE})",
        **default,
    )
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``chat-memory``; returns the exit code."""
    args = build_parser().parse_args(argv)
    urls = _store_urls(args)
    logger, handler = logging.getLogger("chat_memory"), _RedactingHandler(urls)
    logger.addHandler(handler)
    try:
        return _run(args, urls)
    finally:
        logger.removeHandler(handler)


def _store_urls(args: argparse.Namespace) -> list[str]:
    """The store URLs this command may use, whose secrets no message may show."""
    urls = [getattr(args, name, None) for name in ("url", "from_url", "to_url")]
    urls.append(os.environ.get(ENV_URL, "").strip())
    return [url for url in urls if url] or [default_url()]


def _run(args: argparse.Namespace, urls: list[str]) -> int:
    try:
        code = _HANDLERS[args.command](args)
        sys.stdout.flush()  # a closed pipe surfaces here, inside the handler below
        return code
    except BrokenPipeError:
        # Python's documented idiom: point stdout at devnull so the interpreter's own final
        # flush does not fail again, and exit quietly.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_PIPE_CLOSED
    except CommandError as exc:
        return _fail(exc, exc.code, urls)
    except (ConfigurationError, InvalidInputError) as exc:
        return _fail(exc, 2, urls)
    except ChatMemoryError as exc:
        return _fail(exc, 1, urls)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if type(exc).__module__.split(".")[0] == "anthropic":
            return _fail(exc, 1, urls)
        raise


def _fail(exc: BaseException, code: int, urls: list[str]) -> int:
    message = " ".join(str(exc).splitlines()) or type(exc).__name__
    say(f"chat-memory: error: {redact_message(message, urls)}", file=sys.stderr)
    return code


class _RedactingHandler(logging.Handler):
    """Writes chat-memory's warnings to the stderr of the moment, with the store URL's
    secrets and credentials in any URL masked (a driver's error text may carry one) and
    control characters escaped; the mask sticks to the record, so any handler further up
    sees it masked too."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.urls = urls

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact_message(record.getMessage(), self.urls), None
        return super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(terminal_text(self.format(record)) + "\n")


# -- commands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    with Session(args, writes=True) as session:
        conversation = args.conversation
        if conversation is None:
            conversation = "demo-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        return run_demo(session.runner(args.scripted), session.shown_url, conversation, say)


def _chat(args: argparse.Namespace) -> int:
    user = chat_user(
        load_template(args.template or DEFAULT_TEMPLATE), args.user
    )  # exit 2, nothing written
    with Session(args, writes=True) as session:
        runner = session.runner(args.scripted)
        cid = session.conversation
        who = "" if user is None else f", user {user!r}"
        say(
            f"chat-memory chat: conversation {cid!r}{who}, store {session.shown_url}; /quit or Ctrl-D to stop"
        )
        if getattr(runner.client, "api_key", None) == SCRIPTED_API_KEY:
            say(f"model: {SCRIPTED_LABEL}")
        for line in sys.stdin:
            message = line.strip()
            if message in ("/quit", "/exit"):
                break
            if message:
                say(f"assistant: {runner.send(cid, message, user_id=user).reply}", flush=True)
    return 0


def _list(args: argparse.Namespace) -> int:
    page, size = _whole(args.page, "page", 1), _whole(args.page_size, "page size", 1)
    if wants_scoped_list(args):
        return run_scoped_list(args, page, size)
    first = (page - 1) * size  # pages are numbered from 1, as in search and its tool
    with Session(args, writes=False) as session:
        ids = [] if session.store is None else session.store.conversations()
        shown = ids[first : first + size]
        data = cli_json.list_json(session.shown_url, shown, page, size, len(ids))
        if args.json:
            say(cli_json.dumps(data))
            return 0
        where = f"{session.shown_url}" + (
            " (the file does not exist yet)" if session.store is None else ""
        )
        say(f"Conversations in {where}: {len(ids)} in all")
        for cid in shown:
            say(cid if cid.isprintable() else repr(cid))
        if shown:
            say(f"(page {page}: {first + 1}-{first + len(shown)} of {len(ids)})")
        elif ids:
            say(f"(page {page} is past the last page, page {(len(ids) - 1) // size + 1})")
        if data["has_more"]:
            say(f"more: chat-memory list --page {page + 1}")
    return 0


def _window(args: argparse.Namespace) -> int:
    with Session(args, writes=False) as session:
        cid = session.require_conversation()
        memory = session.reader()
        window, stats = memory.window(cid), memory.stats(cid)
        if args.json:
            say(cli_json.dumps(cli_json.window_json(cid, window, stats)))
            return 0
        say(
            f"Window of {cid!r}: {len(window)} events, {stats.turns} turns, {stats.archived_events} archived"
        )
        say(f"{'seq':>5}  {'type':<11} {'tokens':>6}  content")
        for event in window:
            say(
                f"{event.seq or 0:>5}  {event.type.value:<11} {event.tokens or 0:>6}  {_one_line(event)}"
            )
        say(f"total tokens: {sum(e.tokens or 0 for e in window)}")
    return 0


def _history(args: argparse.Namespace) -> int:
    with Session(args, writes=False) as session:
        cid = session.require_conversation()
        events = session.reader().history(cid)
        if args.json:
            say(cli_json.dumps(cli_json.history_json(cid, events)))
            return 0
        say(f"History of {cid!r}: {len(events)} events, {sum(e.archived for e in events)} archived")
        for event in events:
            say(
                f"{event.seq or 0:>5}  {cli_json.state(event):<8}  {event.type.value:<11}  {_one_line(event)}"
            )
    return 0


def _search(args: argparse.Namespace) -> int:
    with Session(args, writes=False) as session:
        size = args.page_size
        if size is None:
            size = (
                session.template_config().search_page_size
                if session.store
                else MemoryConfig().search_page_size
            )
        query = SearchQuery.build(
            args.keyword, args.mode, tool_page(args.page), size
        )  # bad input first: exit 2
        cid = session.require_conversation()
        page = session.reader().run_search(cid, query)
        say(
            cli_json.dumps(cli_json.search_json(cid, query, page, args.keyword))
            if args.json
            else format_page(page, query)
        )
    return 0


def _compact(args: argparse.Namespace) -> int:
    config = chosen_config(args)  # refuse before touching the store
    with Session(args, writes=False) as session:
        cid = session.require_conversation()
        memory = (
            session.template_memory()
            if config is None
            else session.chosen_memory(config, args.summarizer_model)
        )
        result = memory.compact(cid)
        if result.compacted:
            through = result.archived_through_seq
            say(
                f"{result.strategy}: archived {result.archived_events} events (through seq {through})"
            )
        else:
            say(f"{result.strategy}: nothing to compact")
    return 0


def _stats(args: argparse.Namespace) -> int:
    with Session(args, writes=False) as session:
        cid = session.require_conversation()
        stats = session.reader().stats(cid)
        if args.json:
            say(cli_json.dumps(cli_json.stats_json(cid, session.shown_url, stats)))
            return 0
        say(f"conversation:          {cid}")
        say(f"store:                 {session.shown_url}")
        for name in cli_json.STATS_FIELDS:
            say(f"{name + ':':<22} {getattr(stats, name)}")
    return 0


def _clear(args: argparse.Namespace) -> int:
    if args.conversation is None:
        raise CommandError(
            "clear needs the conversation to delete: clear -c ID (see: chat-memory list)", 2
        )
    with Session(args, writes=False) as session:
        cid = session.require_conversation()
        memory = session.reader()
        stats = memory.stats(cid)
        what = f"conversation {cid!r} ({stats.active_events} active and {stats.archived_events} archived events)"
        if not args.yes:
            if not sys.stdin.isatty():
                raise CommandError(
                    f"clear would delete {what}; pass --yes to confirm (no terminal to ask)", 2
                )
            answer = input(terminal_text(f"Delete {what} from {session.shown_url}? [y/N] "))
            if answer.strip().lower() not in ("y", "yes"):
                say("Nothing deleted.")
                return 1
        memory.clear(cid)
        say(f"Deleted {what}.")
    return 0


def _nodes(args: argparse.Namespace) -> int:
    definitions = default_registry().definitions()
    if args.json:
        say(cli_json.dumps([d.to_json() for d in definitions]))
        return 0
    for d in definitions:
        storage = f"  storage: {d.storage}" if d.storage else ""
        say(f"{d.type:<26} {d.kind:<8} {d.title}{storage}")
    return 0


def _templates(args: argparse.Namespace) -> int:
    if args.action in ("show", "export") and not args.name:
        raise ConfigurationError(
            f"templates {args.action} needs a template name; see: chat-memory templates"
        )
    if args.action == "show":
        say(cli_json.dumps(template_source(args.name)))
        return 0
    if args.action == "export":
        from ..integrations.langflow.export import (
            export_langflow,
        )  # needs lfx: chat-memory[langflow]

        say(cli_json.dumps(export_langflow(args.name)))
        return 0
    for name in template_names():
        say(f"{name:<20} {load_template(name).title}")
    return 0


_HANDLERS = {
    "demo": _demo,
    "chat": _chat,
    "list": _list,
    "window": _window,
    "history": _history,
    "search": _search,
    "compact": _compact,
    "stats": _stats,
    "clear": _clear,
    "nodes": _nodes,
    "templates": _templates,
    "memory": run_memory_command,
    **TRANSFER_HANDLERS,
    **LIFECYCLE_HANDLERS,
    "ui": run_ui,
}


# -- helpers -------------------------------------------------------------------------------


def _whole(value: int, name: str, minimum: int) -> int:
    if value < minimum:
        raise CommandError(f"{name} ({value}) must be a whole number, {minimum} or more", 2)
    return value


def _one_line(event: Event, width: int = CONTENT_WIDTH) -> str:
    text = " ".join(event.text().split())
    if event.type is EventType.TOOL_RESULT and event.is_error:
        text = "[error] " + text
    return text if len(text) <= width else text[: width - 1] + "…"


if __name__ == "__main__":
    sys.exit(main())
