"""Rendering windows as Anthropic and OpenAI requests, and the validators that check them (chat_memory/render/)."""
