"""The shared body of the five Chat Memory components: inputs generated from our node
definition, validation by :func:`memory_settings`, one store and one memory per process and
node settings, and three outputs (the LangChain history, the rendered window,
``conversation_search``)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

from lfx.base.memory.model import LCChatMemoryComponent
from lfx.io import Output
from lfx.schema.message import Message

from ...backends import open_store
from ...backends.base import Store
from ...components import NodeDefinition, memory_node, memory_settings
from ...components.fields import USER_ID
from ...components.settings import MemoryNodeSettings
from ...engine import ChatMemory
from ...errors import ConfigurationError
from ..langchain import ChatMemoryHistory
from ..langchain.convert import message_text
from ..langchain.tools import as_langchain_tool
from .fields import (
    applicable,
    canvas_field_order,
    controlling_fields,
    field_value,
    input_for,
    show_for_form,
    shown,
)

_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()
#: Memories a process keeps (one per store, config, summarizer model and Anthropic
#: settings), the least recently used dropped beyond it.
_MEMORIES: OrderedDict[tuple[str, str, str | None, str], ChatMemory] = OrderedDict()
_MEMORIES_KEPT = 64
#: What the default ``anthropic.Anthropic()`` client reads from the environment.
_ANTHROPIC_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")


def _store_key(url: str | None, options: dict[str, Any]) -> str:
    return repr((url or ("builtin", os.environ.get("CHAT_MEMORY_URL")), sorted(options.items())))


def shared_store(url: str | None, options: dict[str, Any]) -> Store:
    """The process's one store for these settings: an in-memory store survives between the
    messages of a running Langflow server (each message builds the components anew). The
    built-in store (URL None) is the one ``CHAT_MEMORY_URL`` names now."""
    key = _store_key(url, options)
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = open_store(url, **options)
        return _STORES[key]


def shared_memory(settings: MemoryNodeSettings) -> ChatMemory:
    """The process's one :class:`ChatMemory` for these settings (over :func:`shared_store`):
    built at the first message, so the summarizer's client is not rebuilt at every one. A
    changed Anthropic key or base URL in the environment builds a new one. Nothing depends on
    the reuse for correctness: the summarizer's failures in a row are counted in the store."""
    url, options = settings.store_target()
    model = settings.summarizer_model if settings.summarizes else None
    # a digest, so that no key is kept in the cache's keys
    client_env = "\0".join(os.environ.get(name, "") for name in _ANTHROPIC_ENV) if model else ""
    key = (
        _store_key(url, options),
        settings.config.model_dump_json(),
        model,
        hashlib.sha256(client_env.encode("utf-8")).hexdigest(),
    )
    with _STORES_LOCK:
        if key in _MEMORIES:
            _MEMORIES.move_to_end(key)
            return _MEMORIES[key]
    summarizer = None
    if model is not None:
        import anthropic

        from ...summarizer import AnthropicSummarizer

        summarizer = AnthropicSummarizer(model=model, client=anthropic.Anthropic())
    memory = ChatMemory(shared_store(url, options), settings.config, summarizer=summarizer)
    with _STORES_LOCK:  # a racing message may have built one meanwhile: keep the first
        memory = _MEMORIES.setdefault(key, memory)
        _MEMORIES.move_to_end(key)
        while len(_MEMORIES) > _MEMORIES_KEPT:
            _MEMORIES.popitem(last=False)
        return memory


def memory_inputs(storage: str) -> list[Any]:
    """The Langflow inputs of the version-2 Chat Memory node of ``storage``, in canvas order."""
    definition = memory_node(storage)
    refresh = controlling_fields(definition)
    visible = shown(definition, {})
    return [
        input_for(spec, spec.name in refresh, visible[spec.name])
        for spec in sorted(definition.fields, key=lambda f: f.order)
    ]


MEMORY_OUTPUTS = [
    Output(display_name="Memory", name="memory", method="build_message_history", types=["Memory"]),
    Output(display_name="Window", name="window", method="build_window", types=["Message"]),
    Output(
        display_name="Conversation search",
        name="search_tool",
        method="build_search_tool",
        types=["Tool"],
    ),
]


class ChatMemoryComponent(LCChatMemoryComponent):
    """One Chat Memory node in Langflow; subclasses name the ``storage``."""

    storage = "builtin"
    icon = "brain"

    @classmethod
    def definition(cls) -> NodeDefinition:
        """Our node definition this component is generated from."""
        return memory_node(cls.storage)

    def _validate_outputs(self) -> None:
        # lfx's base requires an output literally named build_message_history; ours is "memory"
        return None

    def _get_field_order(self) -> list[str]:
        # the canvas's order is the inputs' order (the node definition's), see canvas_field_order
        return canvas_field_order(super()._get_field_order())

    def parameters(self) -> dict[str, Any]:
        """The node's parameters from the component's values (unset ones left to defaults;
        an empty Conversation ID is the run's session id). Every field's value arrives, hidden
        or shown (``override_skip``); those the settings do not use (``showIf`` false for these
        values, e.g. Max turns under a sliding window) are left out, whatever the stored
        ``show`` flag says."""
        params = {}
        for spec in self.definition().fields:
            value = field_value(spec, getattr(self, spec.name, None))
            if value is not None:
                params[spec.name] = value
        params = applicable(self.definition(), params)
        if not str(params.get("conversationId", "")).strip():
            params["conversationId"] = self._run_session_id()
        self._check_wired_user()
        return params

    def _check_wired_user(self) -> None:
        """A text wired to User ID binds the memory to a user: a blank one is refused rather
        than run in the conversations every user of the flow shares (an empty, unwired User
        ID is the flow's choice to bind no user)."""
        wired: Any = getattr(self, USER_ID.name, None)
        if hasattr(wired, "text") and not isinstance(wired, str) and not str(wired.text).strip():
            raise ConfigurationError(
                f"{USER_ID.label} ({wired.text!r}) is blank: the text wired to it names no user; "
                "wire the user's id, or unwire it to share the conversations of this flow"
            )

    def _run_session_id(self) -> str:
        graph = getattr(self, "graph", None)
        return getattr(graph, "session_id", None) or "default"

    def settings(self) -> MemoryNodeSettings:
        """The validated settings (our messages: a ConfigurationError naming the field)."""
        return memory_settings(self.definition(), self.parameters())

    def conversation_id(self) -> str:
        """The Conversation ID field, else the run's session id."""
        return self.settings().conversation_id or self._run_session_id()

    def memory(self) -> ChatMemory:
        """The :class:`ChatMemory` of this node's settings (shared per process: see
        :func:`shared_memory`), bound to the User ID when there is one."""
        settings = self.settings()
        return settings.bind(shared_memory(settings))

    def build_message_history(self) -> ChatMemoryHistory:
        """Our LangChain history of the conversation (for Message History or our agent)."""
        return ChatMemoryHistory(self.memory(), self.conversation_id())

    def build_window(self) -> Message:
        """The window the model would see, as one text message (role: text per line)."""
        history = self.build_message_history()
        lines = [f"{m.type}: {message_text(m)}" for m in history.messages]
        return Message(text="\n".join(lines))

    def build_search_tool(self) -> Any:
        """``conversation_search`` over this conversation, as a Tool for an agent."""
        return as_langchain_tool(self.memory().search_tool(self.conversation_id()))

    def update_build_config(
        self, build_config: Any, field_value: Any, field_name: str | None = None
    ) -> Any:
        """Show exactly the fields our ``showIf`` shows for the form's current values."""
        show_for_form(self.definition(), build_config, field_value, field_name)
        return build_config


__all__ = [
    "MEMORY_OUTPUTS",
    "ChatMemoryComponent",
    "memory_inputs",
    "shared_memory",
    "shared_store",
]
