"""The ``chat-memory`` command line: run the demo or a chat, and look into a stored
conversation (window, history, search, compact, stats), the nodes and the templates.

Exit codes: 0 success, 1 runtime failure (the store or the model failed), 2 usage or
configuration error. Errors are one line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .. import ChatMemoryError, ConfigurationError, Event, EventType, InvalidInputError, Store, open_store
from ..backends import ENV_URL, default_url
from ..search import SearchQuery
from ..templates import template_names, template_source
from ..testing.scripted_model import API_KEY as SCRIPTED_API_KEY
from ..testing.scripted_model import LABEL as SCRIPTED_LABEL
from ..tools import format_page, tool_page
from .demo import run_demo
from .nodes import default_registry
from .runtime import ChatWorkflow
from .workflow import load_template

DEFAULT_TEMPLATE = "compacting-chat"
DEFAULT_CONVERSATION = "default"
CONTENT_WIDTH = 100


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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, description=help_text, parents=[common])

    demo = command("demo", "run the five-facts conversation of the compacting-chat template end to end")
    demo.add_argument(
        "--scripted", action="store_true", help="use the scripted stand-in model even with ANTHROPIC_API_KEY"
    )
    chat = command("chat", "chat interactively through the template (/quit or end of input to stop)")
    chat.add_argument(
        "--scripted", action="store_true", help="use the scripted stand-in model even with ANTHROPIC_API_KEY"
    )
    command("window", "show what the model sees now, with tokens per event")
    command("history", "show every stored event, archived ones included")
    search = command("search", "search the whole conversation (literal, case-insensitive)")
    search.add_argument("keyword", help="text to look for")
    search.add_argument("--page", type=int, default=1, help="page number, 1 first, as in the output (default 1)")
    search.add_argument(
        "--mode", choices=["phrase", "all", "any"], default="phrase", help="match mode (default phrase)"
    )
    command("compact", "run the template's compaction strategy now")
    command("stats", "counts of the window and the archive")
    nodes = command("nodes", "list the node definitions")
    nodes.add_argument("--json", action="store_true", help="print the definitions as JSON")
    templates = command("templates", "list the templates, or print one with: templates show NAME")
    templates.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    templates.add_argument("name", nargs="?", help="template name (for show)")
    return parser


def _common_options(top_level: bool) -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    default: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    options.add_argument("--url", help=f"store URL (default: ${ENV_URL}, else the embedded SQLite file)", **default)
    options.add_argument(
        "-c", "--conversation", help=f"conversation id (default: {DEFAULT_CONVERSATION!r}; demo: a new one)", **default
    )
    options.add_argument(
        "--template",
        help=f"template whose memory settings apply (default: {DEFAULT_TEMPLATE})",
        **(default or {"default": DEFAULT_TEMPLATE}),
    )
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``chat-memory``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _HANDLERS[args.command](args)
    except (ConfigurationError, InvalidInputError) as exc:
        return _fail(exc, 2)
    except ChatMemoryError as exc:
        return _fail(exc, 1)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if type(exc).__module__.split(".")[0] == "anthropic":
            return _fail(exc, 1)
        raise


def _fail(exc: BaseException, code: int) -> int:
    message = " ".join(str(exc).splitlines()) or type(exc).__name__
    print(f"chat-memory: error: {message}", file=sys.stderr)
    return code


# -- commands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        conversation = args.conversation
        if conversation is None:
            conversation = "demo-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        return run_demo(session.runner(args.scripted), session.url, conversation, print)


def _chat(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        runner = session.runner(args.scripted)
        cid = session.conversation
        print(f"chat-memory chat: conversation {cid!r}, store {session.url}; /quit or Ctrl-D to stop")
        if getattr(runner.client, "api_key", None) == SCRIPTED_API_KEY:
            print(f"model: {SCRIPTED_LABEL}")
        for line in sys.stdin:
            message = line.strip()
            if message in ("/quit", "/exit"):
                break
            if message:
                print(f"assistant: {runner.send(cid, message).reply}", flush=True)
    return 0


def _window(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        memory, cid = session.memory(), session.conversation
        window = memory.window(cid)
        stats = memory.stats(cid)
        print(f"Window of {cid!r}: {len(window)} events, {stats.turns} turns, {stats.archived_events} archived")
        print(f"{'seq':>5}  {'type':<11} {'tokens':>6}  content")
        for event in window:
            print(f"{event.seq or 0:>5}  {event.type.value:<11} {event.tokens or 0:>6}  {_one_line(event)}")
        print(f"total tokens: {sum(e.tokens or 0 for e in window)}")
    return 0


def _history(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        events = session.memory().history(session.conversation)
        print(f"History of {session.conversation!r}: {len(events)} events, {sum(e.archived for e in events)} archived")
        for event in events:
            state = "archived" if event.archived else _state(event)
            print(f"{event.seq or 0:>5}  {state:<8}  {event.type.value:<11}  {_one_line(event)}")
    return 0


def _search(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        memory = session.memory()
        query = SearchQuery.build(args.keyword, args.mode, tool_page(args.page), memory.config.search_page_size)
        print(format_page(memory.run_search(session.conversation, query), query))
    return 0


def _compact(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        memory, cid = session.memory(), session.conversation
        result = memory.compact(cid)
        if result.compacted:
            through = result.archived_through_seq
            print(f"{result.strategy}: archived {result.archived_events} events (through seq {through})")
        else:
            print(f"{result.strategy}: nothing to compact")
    return 0


def _stats(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        stats = session.memory().stats(session.conversation)
        print(f"conversation:          {session.conversation}")
        print(f"store:                 {session.url}")
        for name in ("active_events", "archived_events", "turns", "window_tokens", "version", "last_compaction_error"):
            print(f"{name + ':':<22} {getattr(stats, name)}")
    return 0


def _nodes(args: argparse.Namespace) -> int:
    definitions = default_registry().definitions()
    if args.json:
        print(json.dumps([d.to_json() for d in definitions], indent=2))
        return 0
    for d in definitions:
        storage = f"  storage: {d.storage}" if d.storage else ""
        print(f"{d.type:<26} {d.kind:<8} {d.title}{storage}")
    return 0


def _templates(args: argparse.Namespace) -> int:
    if args.action == "show":
        if not args.name:
            raise ConfigurationError("templates show needs a template name; see: chat-memory templates")
        print(json.dumps(template_source(args.name), indent=2))
        return 0
    for name in template_names():
        print(f"{name:<20} {load_template(name).title}")
    return 0


_HANDLERS = {
    "demo": _demo,
    "chat": _chat,
    "window": _window,
    "history": _history,
    "search": _search,
    "compact": _compact,
    "stats": _stats,
    "nodes": _nodes,
    "templates": _templates,
}


# -- helpers -------------------------------------------------------------------------------


class _Session:
    """The store the command works on (opened from ``--url``, ``CHAT_MEMORY_URL`` or the
    embedded default, and closed at the end) and the template that configures the memory."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url or default_url()
        self.conversation = DEFAULT_CONVERSATION if args.conversation is None else args.conversation
        self.workflow = load_template(args.template)
        self.store: Store = open_store(self.url)
        self._runner: ChatWorkflow | None = None

    def runner(self, scripted: bool = False) -> ChatWorkflow:
        """The template's runtime on this store, with Claude or the scripted stand-in."""
        client: Any = None
        if scripted or not os.environ.get("ANTHROPIC_API_KEY"):
            from ..testing.scripted_model import scripted_client

            client = scripted_client()
        self._runner = ChatWorkflow(self.workflow, client=client, store=self.store)
        return self._runner

    def memory(self) -> Any:
        """The memory of the selected conversation, configured by the template."""
        return ChatWorkflow(self.workflow, client=None, store=self.store).memory(self.conversation)

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def _state(event: Event) -> str:
    return {EventType.SYSTEM: "pinned", EventType.SUMMARY: "summary"}.get(event.type, "active")


def _one_line(event: Event, width: int = CONTENT_WIDTH) -> str:
    text = " ".join(event.text().split())
    if event.type is EventType.TOOL_RESULT and event.is_error:
        text = "[error] " + text
    return text if len(text) <= width else text[: width - 1] + "…"


if __name__ == "__main__":
    sys.exit(main())
