import asyncio

from chat_memory import ChatMemory, MemoryConfig, open_store
from chat_memory.integrations.openai_agents import ChatMemorySession, search_tool

memory = ChatMemory(open_store("memory://"), MemoryConfig(compaction_strategy="turn_window", max_turns=3))
session = ChatMemorySession(memory, "conv-1")
# with an agent: Agent(..., tools=[search_tool(memory, "conv-1")]) and
# await Runner.run(agent, "Hi", session=session)  (the Runner calls add_items and get_items)


async def main() -> None:
    await session.add_items([
        {"role": "user", "content": "Where is order 4512?"},
        {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": '{"id": 4512}'},
        {"type": "function_call_output", "call_id": "c1", "output": '{"status": "shipped"}'},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It has shipped."}]},
    ])
    print(await session.get_items(limit=2))  # [the answer]: never a call without its output
    tool = search_tool(memory, "conv-1")  # an SDK FunctionTool
    print(tool.name)


asyncio.run(main())
