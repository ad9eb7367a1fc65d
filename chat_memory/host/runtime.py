"""Running a chat workflow: per message, the trigger's outputs feed the agent (its model and
memory sub-nodes resolved from their parameters), and the reply node's text is the answer."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .. import (
    AnthropicSummarizer,
    ChatMemory,
    ConfigurationError,
    Event,
    InvalidInputError,
    Store,
)
from ..backends import check_conversation_id, open_store
from ..components import (
    SAME_AS_CHAT_MEMORY,
    USER_ID,
    MemoryNodeSettings,
    memory_settings,
    memory_tool_store_target,
)
from ..components.definitions import ACTION, AGENT, TRIGGER, is_expression
from ..longterm import MemoryLimits, MemoryTool, long_term_memory
from .agent import Agent, TurnResult
from .expressions import resolve
from .workflow import Workflow, WorkflowError, WorkflowNode, model_name

#: Memories one runner keeps (one per store, config and summarizer model; a config only
#: varies when expressions feed its fields), the least recently used dropped beyond it.
_MEMORIES_KEPT = 32
#: Which store a memory node names: its URL and options (None: the runner's own store).
_StoreKey: TypeAlias = tuple[str | None, tuple[tuple[str, Any], ...]] | None


@dataclass(frozen=True)
class ChatRun:
    """The outcome of one message through the workflow."""

    reply: str
    turn: TurnResult
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def anthropic_client() -> Any:
    """A real ``anthropic.Anthropic()`` client (API key from ``ANTHROPIC_API_KEY``)."""
    try:
        import anthropic
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            "the anthropic driver is missing; pip install 'chat-memory[anthropic]'"
        ) from exc
    return anthropic.Anthropic()


class ChatWorkflow:
    """Runs a workflow made of a New Chat Request trigger, an AI Agent with a model and a
    Chat Memory sub-node, and Reply nodes.

    ``client`` is the Anthropic client used for the agent and the summarizer (default: a
    real one). ``store`` replaces the storage every memory node names (the command line's
    ``--url``); otherwise stores are opened from the nodes and closed by :meth:`close`.

    The runner builds one :class:`ChatMemory` per (store, config, summarizer model) and reuses
    it message after message. Nothing depends on that reuse for correctness: what a memory
    must remember between messages (the summarizer's failures in a row) is kept in the store.
    """

    def __init__(self, workflow: Workflow, client: Any = None, store: Store | None = None) -> None:
        triggers, agents = workflow.of_kind(TRIGGER), workflow.of_kind(AGENT)
        if len(triggers) != 1 or len(agents) != 1:
            raise WorkflowError(
                f"workflow {workflow.name!r} must have one trigger and one agent to run as a chat "
                f"(has {len(triggers)} and {len(agents)})"
            )
        self.workflow = workflow
        self.trigger, self.agent_node = triggers[0], agents[0]
        memory_node = self.agent_node.element("memory")
        if memory_node is None:
            raise WorkflowError(
                f"node {self.agent_node.name!r} needs a Chat Memory sub-node in its 'memory' slot"
            )
        self.memory_node: WorkflowNode = memory_node
        self._client = client
        self._store_override = store
        self._stores: dict[tuple[str | None, tuple[tuple[str, Any], ...]], Store] = {}
        self._memories: OrderedDict[tuple[_StoreKey, str, str | None], ChatMemory] = OrderedDict()

    @property
    def client(self) -> Any:
        """The Anthropic client, created on first use."""
        if self._client is None:
            self._client = anthropic_client()
        return self._client

    def send(self, conversation_id: str, message: str, user_id: str | None = None) -> ChatRun:
        """Run the workflow for one chat message and return the reply. ``user_id`` is the
        trigger's ``userId`` output (what an Auto Memory Tool's namespace usually names)."""
        check_conversation_id(conversation_id)
        outputs: dict[str, dict[str, Any]] = {
            self.trigger.name: {
                "conversationId": conversation_id,
                "message": message,
                "userId": user_id or "",
            }
        }
        turn: TurnResult | None = None
        for node in self.workflow.order():
            if node is self.trigger:
                continue
            if node is self.agent_node:
                turn = self._run_agent(outputs)
                outputs[node.name] = {
                    "text": turn.text,
                    "conversationId": turn.conversation_id,
                    "toolCalls": [
                        {"name": c.name, "arguments": c.arguments} for c in turn.tool_calls
                    ],
                }
            elif node.definition.kind == ACTION:
                params = node.definition.check_parameters(_resolved(node, outputs))
                outputs[node.name] = {"text": str(params.get("text", ""))}
        assert turn is not None
        replies = [
            outputs[n.name]["text"] for n in self.workflow.of_kind(ACTION) if n.name in outputs
        ]
        return ChatRun(replies[-1] if replies else turn.text, turn, outputs)

    def memory_settings(
        self, conversation_id: str, user_id: str | None = None
    ) -> MemoryNodeSettings:
        """The memory node's settings for a conversation (as the trigger would feed them)."""
        outputs = {
            self.trigger.name: {
                "conversationId": conversation_id,
                "message": "",
                "userId": user_id or "",
            }
        }
        return self._settings(outputs)

    def memory(self, conversation_id: str, user_id: str | None = None) -> ChatMemory:
        """The :class:`ChatMemory` the agent uses for a conversation of ``user_id`` (bound to
        that user when the memory node has a User ID)."""
        return self._memory(self.memory_settings(conversation_id, user_id))

    def fork(
        self,
        conversation_id: str,
        new_conversation_id: str,
        at: int | None = None,
        user_id: str | None = None,
    ) -> list[Event]:
        """Fork a conversation the way this workflow's memory node sees it (its store, its
        config, the user it binds): ``new_conversation_id`` starts as the conversation was
        right after seq ``at`` (None: as it is now), and the next message sent to it continues
        from there ("edit and resend", "try another answer"). Returns the fork's window. See
        ``ChatMemory.fork`` (docs/lifecycle.md, "Fork") for what is refused."""
        check_conversation_id(new_conversation_id)
        return self.memory(conversation_id, user_id).fork(conversation_id, new_conversation_id, at)

    def close(self) -> None:
        """Close the stores this runner opened (never a store passed in)."""
        self._memories.clear()
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    def __enter__(self) -> ChatWorkflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _run_agent(self, outputs: dict[str, dict[str, Any]]) -> TurnResult:
        node = self.agent_node
        params = _checked(node, _resolved(node, outputs))
        model_node = node.element("model")
        assert model_node is not None  # a required slot, checked at import
        model = _checked(model_node, _resolved(model_node, outputs))
        settings = self._settings(outputs)
        agent = Agent(
            self.client,
            self._memory(settings),
            model=model["model"],
            system_prompt=params.get("systemPrompt") or "",
            max_tokens=model["maxTokens"],
            max_tool_rounds=params["maxToolRounds"],
            tools=self._tools(outputs, settings),
        )
        assert settings.conversation_id is not None
        return agent.run_turn(settings.conversation_id, str(params["userMessage"]))

    def _tools(self, outputs: dict[str, dict[str, Any]], settings: MemoryNodeSettings) -> list[Any]:
        """The agent's extra tools: the Auto Memory Tool in its tools slot, if any."""
        node = self.agent_node.element("tools")
        if node is None:
            return []
        params = _checked(node, _resolved(node, outputs))
        namespace = params.get("namespace")
        if not isinstance(namespace, str) or not namespace.strip():
            raise WorkflowError(
                f"node {node.name!r} ({node.type}): Namespace ({namespace!r}) is blank; "
                "send a user id (the trigger's userId) or set a namespace"
            )
        try:
            storage, url, options = memory_tool_store_target(params)
            if storage == SAME_AS_CHAT_MEMORY:
                store = self._store(settings)
            else:
                key = (f"memory-tool:{storage}:{url}", tuple(sorted(options.items())))
                if key not in self._stores:
                    self._stores[key] = open_store(url, **options)
                store = self._stores[key]
            limits = MemoryLimits(
                max_file_bytes=params["maxFileBytes"], max_files=params["maxFiles"]
            )
            # a memory bound to a user keeps the user's notes in the user's scope too, so that
            # forgetting the user erases them (docs/lifecycle.md, "Erasure")
            scope = settings.scope
            files = long_term_memory(
                store,
                namespace,
                user=scope.user if scope else None,
                app=scope.app if scope else None,
                limits=limits,
            )
            return [MemoryTool(files)]
        except ConfigurationError as exc:
            raise WorkflowError(f"node {node.name!r} ({node.type}): {exc}") from None

    def _settings(self, outputs: dict[str, dict[str, Any]]) -> MemoryNodeSettings:
        node = self.memory_node
        summarizer = node.element("summarizerModel")
        if summarizer is not None:
            summarizer = WorkflowNode(
                summarizer.name, summarizer.definition, _resolved(summarizer, outputs)
            )
        try:
            parameters = _resolved(node, outputs)
            settings = memory_settings(node.definition, parameters, model_name(summarizer))
            check_conversation_id(settings.conversation_id)
            _check_user_bound(node, parameters, settings)
        except ConfigurationError as exc:
            raise WorkflowError(f"node {node.name!r} ({node.type}): {exc}") from None
        except InvalidInputError as exc:
            raise WorkflowError(
                f"node {node.name!r} ({node.type}): Conversation ID: {exc}"
            ) from None
        return settings

    def _memory(self, settings: MemoryNodeSettings) -> ChatMemory:
        """The memory of these settings (bound to their user, if any): the unbound memory is
        built on first use, then reused (see the class)."""
        model = settings.summarizer_model if settings.summarizes else None
        key = (self._store_key(settings), settings.config.model_dump_json(), model)
        memory = self._memories.get(key)
        if memory is not None:
            self._memories.move_to_end(key)
            return settings.bind(memory)
        # Only a summarizing strategy calls the summarizer; building it needs the client (and its key).
        summarizer = None
        if settings.summarizes:
            assert settings.summarizer_model  # memory_settings refuses summarization without one
            summarizer = AnthropicSummarizer(model=settings.summarizer_model, client=self.client)
        memory = ChatMemory(self._store(settings), settings.config, summarizer=summarizer)
        self._memories[key] = memory
        while len(self._memories) > _MEMORIES_KEPT:
            self._memories.popitem(last=False)
        return settings.bind(memory)

    def _store_key(self, settings: MemoryNodeSettings) -> _StoreKey:
        if self._store_override is not None:
            return None
        url, options = settings.store_target()
        return (url, tuple(sorted(options.items())))

    def _store(self, settings: MemoryNodeSettings) -> Store:
        key = self._store_key(settings)
        if key is None:
            assert self._store_override is not None
            return self._store_override
        if key not in self._stores:
            self._stores[key] = settings.open_store()
        return self._stores[key]


def _check_user_bound(
    node: WorkflowNode, resolved: dict[str, Any], settings: MemoryNodeSettings
) -> None:
    """A User ID given as an expression binds the memory to a user: a message whose user id is
    blank is refused, rather than run in the conversations shared by every user of the flow
    (where another user's history under the same Conversation ID would show)."""
    given = node.parameters.get(USER_ID.name)
    if settings.user_id is None and is_expression(given):
        raise ConfigurationError(
            f"{USER_ID.label} ({resolved.get(USER_ID.name)!r}, from {given}) is blank: this memory "
            "is bound to a user; send the user's id (the trigger's userId)"
        )


def _resolved(node: WorkflowNode, outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    try:
        return dict(resolve(node.parameters, outputs))
    except ConfigurationError as exc:
        raise WorkflowError(f"node {node.name!r} ({node.type}): {exc}") from None


def _checked(node: WorkflowNode, parameters: dict[str, Any]) -> dict[str, Any]:
    try:
        return node.definition.check_parameters(parameters)
    except ConfigurationError as exc:
        raise WorkflowError(f"node {node.name!r} ({node.type}): {exc}") from None
