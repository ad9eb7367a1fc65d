from chat_memory import ChatMemory, Event, MemoryConfig, open_store

memory = ChatMemory(open_store("memory://"), MemoryConfig(retention_seconds=30 * 86400))
alice = memory.for_user("alice", app="support")  # alice's "conv-1" is nobody else's: scoped in the key
alice.add("conv-1", [Event.user("I was charged twice."), Event.assistant("Refund issued.")])
alice.set_metadata("conv-1", title="Refund", tags=["billing"])
print([c.title for c in alice.conversations(tag="billing")])  # newest activity first, paged, by index
alice.fork("conv-1", "conv-1-retry", at=1)  # the window exactly as it was at seq 1
print([e.content for e in alice.window("conv-1-retry")])
print(memory.for_user("bob", app="support").conversations())  # bob sees none of alice's
print(memory.sweep().conversations)  # deletes (not hides) conversations idle past the retention
print(memory.forget(user="alice", app="support").conversations)  # every event, summary, record, note
