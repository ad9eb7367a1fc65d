"""The scripted stand-in model as a LangChain chat model, for flows run without an API key:
it turns LangChain messages into an Anthropic Messages request and asks
:class:`~chat_memory.testing.scripted_model.ScriptedModel` (the same canned answers as the
demo: acknowledges facts, calls ``conversation_search`` when asked about earlier turns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from ...testing.scripted_model import ScriptedModel
from ..langchain.convert import message_text


def _blocks(message: BaseMessage) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, ToolMessage):
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message_text(message),
            }
        ]
    if isinstance(message, AIMessage):
        text = message_text(message)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]}
            for c in message.tool_calls
        ]
        return "assistant", blocks
    return "user", [{"type": "text", "text": message_text(message)}]


def anthropic_request(
    messages: Sequence[BaseMessage], tools: list[dict[str, Any]], model: str
) -> dict[str, Any]:
    """The Messages API body for these LangChain messages (adjacent same-role turns merged)."""
    system = "\n\n".join(message_text(m) for m in messages if isinstance(m, SystemMessage))
    turns: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        role, blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model, "max_tokens": 1024, "messages": turns, "tools": tools}
    if system:
        body["system"] = system
    return body


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model with the scripted stand-in's canned answers (not Claude)."""

    model_name: str = "scripted-stand-in"
    tool_specs: list[dict[str, Any]] = []

    @property
    def _llm_type(self) -> str:
        return "chat-memory-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """This model with ``tools`` offered to it (Anthropic tool format)."""
        specs = []
        for tool in tools:
            function = convert_to_openai_tool(tool)["function"]
            specs.append(
                {
                    "name": function["name"],
                    "description": function.get("description", ""),
                    "input_schema": function.get("parameters", {}),
                }
            )
        return self.model_copy(update={"tool_specs": specs})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        content, _ = ScriptedModel().answer(
            anthropic_request(messages, self.tool_specs, self.model_name)
        )
        text = " ".join(b["text"] for b in content if b["type"] == "text")
        calls = [
            {"name": b["name"], "args": b["input"], "id": b["id"], "type": "tool_call"}
            for b in content
            if b["type"] == "tool_use"
        ]
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(content=text, tool_calls=calls))]
        )
