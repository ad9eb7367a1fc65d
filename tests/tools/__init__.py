"""What the model sees of the recall tools: conversation_search and fetch_tool_result (chat_memory/tools.py)."""
