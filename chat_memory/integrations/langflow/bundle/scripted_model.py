"""Scripted Model: the stand-in LanguageModel for flows run without an API key (canned replies, not Claude)."""

from __future__ import annotations

from typing import Any

from lfx.custom.custom_component.component import Component
from lfx.io import Output

from chat_memory.integrations.langflow.scripted import ScriptedChatModel


class ChatMemoryScriptedModelComponent(Component):
    name = "ChatMemoryScriptedModel"
    display_name = "Scripted Model (no API key)"
    description = "chat-memory's scripted stand-in model: acknowledges facts and searches the conversation when asked about earlier turns."
    icon = "bot"
    inputs: list[Any] = []
    outputs = [
        Output(
            display_name="Language Model",
            name="model_output",
            method="build_model",
            types=["LanguageModel"],
        )
    ]

    def build_model(self) -> ScriptedChatModel:
        return ScriptedChatModel()
