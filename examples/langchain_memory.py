from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from chat_memory import ChatMemory, MemoryConfig, open_store
from chat_memory.integrations.langchain import ChatMemoryHistory, ChatMemoryMiddleware, search_tools

memory = ChatMemory(open_store("memory://"), MemoryConfig(compaction_strategy="turn_window", max_turns=3))

# any LangChain code that takes a chat history
history = ChatMemoryHistory(memory, "conv-1")
history.add_messages([HumanMessage("Our new service is code-named Bluefin."), AIMessage("Noted.")])
for i in range(5):
    history.add_messages([HumanMessage(f"Question {i}"), AIMessage(f"Answer {i}")])
print(len(history.messages))  # 4: the newest 2 turns (over 3 it compacts to half, never below 2 turns)
search, fetch = search_tools(memory, "conv-1")  # StructuredTools for create_agent(tools=...)
print(search.invoke({"keyword": "bluefin"}))  # found in the archive

# create_agent: every step is stored, the model sees the window (use your own chat model)
model = GenericFakeChatModel(messages=iter([AIMessage("It is code-named Bluefin.")]))
agent = create_agent(model, tools=[], middleware=[ChatMemoryMiddleware(memory, conversation_id="conv-1")])
agent.invoke({"messages": [HumanMessage("What is the service called?")]})
print(memory.stats("conv-1").archived_events)  # 8
