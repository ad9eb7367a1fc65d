"""Long-term memory: the memory tool and its files on every store (chat_memory/longterm/)."""
