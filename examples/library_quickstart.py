from chat_memory import ChatMemory, MemoryConfig, Event, open_store, AnthropicSummarizer

store = open_store("sqlite:///chat.db")   # memory://  postgresql+psycopg://…  redis://…  redis+cluster://…  s3://bucket/prefix
memory = ChatMemory(store, MemoryConfig(compaction_strategy="turn_window", max_turns=3))

memory.add("conv-1", [Event.user("Our new service is code-named Bluefin."), Event.assistant("Noted.")])
call = Event.tool_call("get_order", {"id": 4512})   # call_id= the provider's id; else a fresh one
memory.add("conv-1", call)                          # every tool call needs its own id
memory.add("conv-1", Event.tool_result(call.tool_call_id, '{"status": "shipped"}'))

memory.window("conv-1")                    # what the model sees: pinned system events, summary, active turns
memory.history("conv-1")                   # everything, archived included, oldest first
memory.search("conv-1", "bluefin")         # SearchPage: literal, case-insensitive, oldest first, paged
memory.search("conv-1", "bluefin", page=1) # the SECOND page: here pages count from 0 (the tool and the
                                           # CLI count from 1); SearchPage.number is the 1-based one
memory.stats("conv-1")                     # active/archived events, turns, window tokens, version, last error
tool = memory.search_tool("conv-1")        # the conversation_search tool, Anthropic tool shape
tool({"keyword": "bluefin"})               # text for the model: hits with seq, time, role, "page X of Y"

from chat_memory import to_anthropic, to_openai
# always a valid request, with prompt-cache breakpoints (system is then a list of blocks)
system, messages = to_anthropic(memory.window("conv-1"), system_prompt="You are helpful.")
openai_messages = to_openai(memory.window("conv-1"), system_prompt="You are helpful.")  # Chat Completions
