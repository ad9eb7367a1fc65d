"""The Chat Memory node definitions (chat_memory/components/)."""
