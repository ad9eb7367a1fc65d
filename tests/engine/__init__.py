"""The engine: ChatMemory and AsyncChatMemory, on every memory kind (chat_memory/engine.py, aio.py, decisions.py, compaction.py)."""
