"""The store and the memory one ``chat-memory`` command works on.

Reading commands never create anything: a SQLite file that does not exist is reported, not
made, and an unknown conversation id is an error naming it. Writing commands (``demo``,
``chat``) create the SQLite file's folder first, so that a folder that cannot be made is one
clear line instead of a traceback from deep inside the driver. ``compact`` applies only the
strategy the operator names (:func:`chosen_config`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .. import AnthropicSummarizer, ChatMemory, ConfigurationError, MemoryConfig, Store, open_store
from ..backends import ENV_URL, check_conversation_id, default_url, prepare_sqlite_file, redact_url
from ..components.definitions import TRIGGER
from ..strategies import strategy_class, strategy_names
from .expressions import references
from .runtime import ChatWorkflow
from .workflow import Workflow, load_template

DEFAULT_TEMPLATE = "compacting-chat"
DEFAULT_CONVERSATION = "default"
#: ``compact --strategy`` flags -> MemoryConfig fields; a strategy's limits among them are required
LIMIT_FLAGS = {
    "max_events": "--max-events",
    "max_turns": "--max-turns",
    "max_tokens": "--max-tokens",
    "max_events_to_keep": "--max-events-to-keep",
    "overlap_size": "--overlap-size",
}
_OPTIONAL_LIMITS = {"overlap_size"}


class CommandError(Exception):
    """A failure the command line reports as one line with its own exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Session:
    """The store a command works on (``--url``, ``CHAT_MEMORY_URL`` or the embedded default),
    closed at the end, and the template whose memory settings apply.

    ``writes``: the command may create the store. Otherwise a SQLite file that does not exist
    is left alone and :attr:`store` is None (nothing is stored there)."""

    def __init__(self, args: argparse.Namespace, *, writes: bool) -> None:
        self.url: str = args.url or default_url()
        #: the URL as shown in headers and messages (credentials masked)
        self.shown_url = redact_url(self.url)
        self.url_source = (
            "--url" if args.url else (ENV_URL if os.environ.get(ENV_URL, "").strip() else None)
        )
        self.embedded = self.url_source is None
        self.given_conversation: str | None = args.conversation
        self.conversation = DEFAULT_CONVERSATION if args.conversation is None else args.conversation
        self.template_given = args.template is not None
        self.workflow: Workflow = load_template(args.template or DEFAULT_TEMPLATE)
        self.missing_file: Path | None = None
        sqlite_file = _sqlite_file(self.url)
        if sqlite_file is not None and writes:
            self._make_folder(sqlite_file)
        elif sqlite_file is not None and not sqlite_file.exists():
            self.missing_file = sqlite_file
        self.store: Store | None = None if self.missing_file else open_store(self.url)

    def open_store(self) -> Store:
        """The store; raises the "does not exist" error when reading a missing SQLite file."""
        if self.store is None:
            raise CommandError(
                f"the store {self.shown_url} does not exist yet (nothing is stored there); {self._hint()}",
                1,
            )
        return self.store

    def require_conversation(self) -> str:
        """The selected conversation id, checked to exist in the store (exit 1 otherwise)."""
        if not self.conversation.strip():  # worded as the demo's and the nodes' refusal
            raise CommandError(f"Conversation ID ({self.conversation!r}) must not be blank", 2)
        cid = check_conversation_id(self.conversation)
        if self.store is None:
            raise CommandError(
                f"unknown conversation {cid!r}: the store {self.shown_url} does not exist yet; {self._hint()}",
                1,
            )
        # Every write bumps the version, so 0 means "never written or cleared": one read.
        if self.store.load(cid).version == 0:
            raise CommandError(
                f"unknown conversation {cid!r} in {self.shown_url}; see: chat-memory list", 1
            )
        return cid

    def template_config(self) -> MemoryConfig:
        """The memory settings of the template's Chat Memory node."""
        return (
            ChatWorkflow(self.workflow, client=None, store=self.open_store())
            .memory_settings(self.conversation)
            .config
        )

    def reader(self) -> ChatMemory:
        """A memory for reading: no strategy applies (reads never compact), the template's
        search page size does."""
        return ChatMemory(
            self.open_store(),
            MemoryConfig(search_page_size=self.template_config().search_page_size),
        )

    def template_memory(self) -> ChatMemory:
        """The memory exactly as the template's agent uses it (strategy and summarizer included)."""
        return ChatWorkflow(self.workflow, client=None, store=self.open_store()).memory(
            self.conversation
        )

    def chosen_memory(self, config: MemoryConfig, summarizer_model: str | None) -> ChatMemory:
        """A memory with the config :func:`chosen_config` built (and a Claude summarizer when
        the strategy summarizes)."""
        summarizer = None
        if strategy_class(config.compaction_strategy).summarizes:
            summarizer = AnthropicSummarizer(model=summarizer_model or "")
        return ChatMemory(self.open_store(), config, summarizer=summarizer)

    def runner(self, scripted: bool = False) -> ChatWorkflow:
        """The template's runtime on this store, with Claude or the scripted stand-in."""
        client: Any = None
        if scripted or not os.environ.get("ANTHROPIC_API_KEY"):
            from ..testing.scripted_model import scripted_client

            client = scripted_client()
        return ChatWorkflow(self.workflow, client=client, store=self.open_store())

    def _make_folder(self, sqlite_file: Path) -> None:
        # the same preparation as the store's engine: the embedded default owner-only
        folder = sqlite_file.parent
        try:
            prepare_sqlite_file(sqlite_file)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            where = (
                "set XDG_DATA_HOME or CHAT_MEMORY_URL to a writable place, or pass --url"
                if self.embedded
                else "pass a --url in a folder that can be created"
            )
            raise ConfigurationError(
                f"the data folder {folder} cannot be created ({reason}); {where}"
            ) from None

    def _hint(self) -> str:
        return (
            "chat-memory demo or chat creates it" if self.embedded else f"check {self.url_source}"
        )

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()


def chosen_config(args: argparse.Namespace) -> MemoryConfig | None:
    """The config ``compact --strategy`` names, or None for ``--template``; neither is refused:
    an operator command never applies a strategy the operator did not choose."""
    given = {
        field: getattr(args, field) for field in LIMIT_FLAGS if getattr(args, field) is not None
    }
    if args.strategy is None:
        if given or args.summarizer_model:
            flags = [LIMIT_FLAGS[f] for f in given] + (
                ["--summarizer-model"] if args.summarizer_model else []
            )
            raise CommandError(f"{', '.join(flags)} needs --strategy NAME", 2)
        if args.template is None:
            raise CommandError(
                "compact needs the strategy to apply: --strategy NAME with its limits "
                f"(e.g. --strategy turn_window --max-turns 3; strategies: {', '.join(strategy_names())}), "
                "or --template NAME for a template's memory settings",
                2,
            )
        return None
    if args.template is not None:
        raise CommandError("compact takes --strategy or --template, not both", 2)
    strategy = strategy_class(args.strategy)  # an unknown name: the usual ConfigurationError
    uses = [field for field in strategy.settings if field in LIMIT_FLAGS]
    unused = [LIMIT_FLAGS[field] for field in given if field not in uses]
    if unused:
        needs = ", ".join(LIMIT_FLAGS[f] for f in uses) or "no limits"
        raise CommandError(
            f"{', '.join(unused)} does not apply to {strategy.name} (it uses: {needs})", 2
        )
    missing = [LIMIT_FLAGS[f] for f in uses if f not in given and f not in _OPTIONAL_LIMITS]
    if missing:
        raise CommandError(
            f"compact --strategy {strategy.name} needs {' and '.join(f'{m} N' for m in missing)}", 2
        )
    if strategy.summarizes and not args.summarizer_model:
        raise CommandError(
            f"compact --strategy {strategy.name} needs --summarizer-model NAME (a Claude model)", 2
        )
    # a one-off compaction to the limits the operator typed; compact_to_ratio's hysteresis is
    # for conversations compacting as they run (docs/prompt-caching.md)
    ratio = {"compact_to_ratio": 1.0} if "compact_to_ratio" in strategy.settings else {}
    return MemoryConfig(compaction_strategy=strategy.name, **ratio, **given)


def user_fields(workflow: Workflow) -> list[str]:
    """The node fields of a workflow fed by its trigger's ``userId`` output (``node.field``),
    e.g. an Auto Memory Tool's namespace: such a template cannot run without a user id."""
    trigger = {n.name for n in workflow.of_kind(TRIGGER)}
    return [
        f"{node.name}.{key}"
        for node in workflow.all_nodes()
        for key, value in node.parameters.items()
        if any(ref.node in trigger and ref.path[0] == "userId" for ref in references(value))
    ]


def chat_user(workflow: Workflow, user: str | None) -> str | None:
    """The ``chat --user`` id, refused when blank, and required when the template reads the
    trigger's userId (exit 2 naming the option and the field that needs it)."""
    if user is not None and not user.strip():
        raise CommandError(f"--user ({user!r}) must not be blank", 2)
    fields = user_fields(workflow)
    if user is None and fields:
        raise CommandError(
            f"template {workflow.name!r} needs a user id (its field {fields[0]} is the trigger's userId): "
            f"pass --user ID, e.g. chat-memory --template {workflow.name} chat --user alice",
            2,
        )
    return user


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None for other stores, in-memory and ``file:`` URIs)."""
    if not url.lower().startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # open_store names the problem
    database = parsed.database or ""
    if (
        parsed.get_backend_name() != "sqlite"
        or database in ("", ":memory:")
        or database.startswith("file:")
    ):
        return None
    return Path(database).expanduser()
