"""The agent's turn: show the model the window, let it call ``conversation_search`` (a
bounded tool loop), and store every event of the turn as it happens.

Storage order is chosen so that a crash mid-turn loses nothing already answered: the user
message is stored before the first model call, and each model step (its text, its tool
calls and their results) is stored as one atomic list, so a tool call is never stored
without its result. Compaction runs inside :meth:`ChatMemory.add` after each write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import ChatMemory, Event, with_overflow_retry
from ..safe_json import ECHO_CHARS, JSONLimitError, check, describe
from ..tools import ToolOutput, failed


class Tool(Protocol):
    """A tool the agent can hand the model: ``name``, ``definition()`` (the Anthropic shape),
    ``run(input) -> ToolOutput``; an optional ``beta`` names the API beta it needs. The
    built-in ones: :class:`ConversationSearchTool`, :class:`FetchToolResultTool`,
    :class:`chat_memory.longterm.MemoryTool`."""

    @property
    def name(self) -> str: ...

    def definition(self) -> dict[str, Any]: ...

    def run(self, arguments: dict[str, Any] | str | None, /) -> ToolOutput: ...


#: Model calls in one turn that may use tools; one more call (tools disabled) must answer.
DEFAULT_MAX_TOOL_ROUNDS = 8
ROUND_LIMIT_MESSAGE = (
    "Error: the tool round limit of this turn was reached; answer with what you have."
)


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call the model made during a turn and what it got back."""

    name: str
    arguments: dict[str, Any]
    result: str
    is_error: bool = False


@dataclass(frozen=True)
class TurnResult:
    """What one turn did: the reply, the tool calls, the model calls and the stored events."""

    conversation_id: str
    text: str
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    model_calls: int = 0
    events: list[Event] = field(default_factory=list)
    stop_reason: str | None = None


class Agent:
    """A Claude agent over a :class:`ChatMemory`, driven through an ``anthropic.Anthropic``
    client (any object with ``messages.create`` of the same shape works)."""

    def __init__(
        self,
        client: Any,
        memory: ChatMemory,
        model: str,
        system_prompt: str = "",
        max_tokens: int = 1024,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
        tools: list[Tool] | None = None,
    ) -> None:
        self.client = client
        self.memory = memory
        self.model = model
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.max_tool_rounds = max_tool_rounds
        #: tools beyond the memory's own (e.g. a long-term ``MemoryTool``), in every conversation
        self.extra_tools: list[Tool] = list(tools or [])

    def tools(self, conversation_id: str) -> dict[str, Tool]:
        """The tools the model gets in this conversation, by name: ``conversation_search``
        when enabled, ``fetch_tool_result`` when tool results are compressed, then the extra tools."""
        tools: list[Tool] = []
        if self.memory.config.enable_conversation_search_tool:
            tools.append(self.memory.search_tool(conversation_id))
        if self.memory.config.compress_tool_results:
            tools.append(self.memory.fetch_tool(conversation_id))
        tools += self.extra_tools
        return {tool.name: tool for tool in tools}

    def run_turn(self, conversation_id: str, message: str) -> TurnResult:
        """Answer one user message; every event of the turn ends up stored."""
        stored = self.memory.add(conversation_id, Event.user(message))
        tools = self.tools(conversation_id)
        records: list[ToolCallRecord] = []
        texts: list[str] = []
        stop_reason: str | None = None
        calls = 0
        for round_number in range(1, self.max_tool_rounds + 2):
            last_round = round_number > self.max_tool_rounds
            response = self._call_model(conversation_id, tools, last_round)
            calls += 1
            stop_reason = getattr(response, "stop_reason", None)
            text = "".join(b.text for b in response.content if getattr(b, "type", None) == "text")
            uses = [b for b in response.content if getattr(b, "type", None) == "tool_use"]
            step: list[Event] = []
            if text.strip():
                texts.append(text)
                step.append(
                    Event.assistant(
                        text, metadata={"model": getattr(response, "model", self.model)}
                    )
                )
            refusals = [self._refuse_input(use) for use in uses]
            # a refused input is stored as {} (it could not be stored as given: the event
            # envelope refuses such nesting), its result explains why, and the turn goes on
            arguments = [
                {} if refusal else dict(use.input or {}) for use, refusal in zip(uses, refusals)
            ]
            step += [
                Event.tool_call(use.name, args, call_id=use.id)
                for use, args in zip(uses, arguments)
            ]
            for use, args, refusal in zip(uses, arguments, refusals):
                if last_round:
                    output = ToolOutput(ROUND_LIMIT_MESSAGE, True)
                else:
                    output = refusal or self._run_tool(tools, use)
                step.append(
                    Event.tool_result(use.id, output.text, name=use.name, is_error=output.is_error)
                )
                records.append(ToolCallRecord(use.name, args, output.text, output.is_error))
            if step:
                stored += self.memory.add(conversation_id, step)
            if not uses or last_round:
                break
        reply = texts[-1] if texts else ""
        return TurnResult(conversation_id, reply, records, calls, stored, stop_reason)

    def _call_model(self, conversation_id: str, tools: dict[str, Tool], last_round: bool) -> Any:
        """One model call. When the model answers that the prompt is too long, compact the
        conversation by force (everything but the newest turn) and send the same step once
        more; a second overflow is a :class:`ContextOverflowError` naming the conversation
        and the sizes."""
        return with_overflow_retry(
            self.memory,
            conversation_id,
            lambda: self._send(self._request(conversation_id, tools, last_round), tools),
        )

    def _request(
        self, conversation_id: str, tools: dict[str, Tool], last_round: bool
    ) -> dict[str, Any]:
        # cache breakpoints on (the default): the system prompt, the summary and the growing tail
        # are served from the prompt cache on the next call (``system`` is then a list of blocks)
        system, messages = self.memory.to_anthropic(conversation_id, self.system_prompt)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [tool.definition() for tool in tools.values()]
            if last_round:
                request["tool_choice"] = {"type": "none"}
        return request

    def _send(self, request: dict[str, Any], tools: dict[str, Tool]) -> Any:
        betas = sorted({beta for tool in tools.values() if (beta := getattr(tool, "beta", None))})
        if betas:  # e.g. the memory tool: sent through the SDK's beta namespace with its header
            return self.client.beta.messages.create(**request, betas=betas)
        return self.client.messages.create(**request)

    @staticmethod
    def _refuse_input(use: Any) -> ToolOutput | None:
        """The error answer for a tool input that is no object, is nested deeper than
        :data:`~chat_memory.safe_json.MAX_ARGUMENT_DEPTH` or holds a huge integer (checked
        without recursing); None for an input that can be run and stored."""
        if use.input is not None and not isinstance(use.input, dict):
            return ToolOutput(
                f"Error: the tool input ({describe(use.input)}) must be an object.", True
            )
        try:
            check(use.input or {}, "the tool input")
        except JSONLimitError as exc:
            return ToolOutput(f"Error: {exc}; call the tool again with a flatter input.", True)
        return None

    @staticmethod
    def _run_tool(tools: dict[str, Tool], use: Any) -> ToolOutput:
        """Run one tool call; failures go back to the model as a short error result (an
        unexpected one generic, with an error id, logged in full), never up the stack."""
        tool = tools.get(use.name)
        if tool is None:
            return ToolOutput(
                f"Error: there is no tool named {_short(use.name)!r}; available: {', '.join(tools) or 'none'}.",
                True,
            )
        try:
            return tool.run(use.input)
        except Exception as exc:  # the memory tool or a host's own: none may end the turn
            return failed(str(use.name), exc)


def _short(name: Any) -> str:
    """A tool name the model gave, cut to ECHO_CHARS characters for an answer."""
    text = str(name)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "…"
