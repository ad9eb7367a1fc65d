"""The stores: the conformance suites on every backend and what each store alone promises (chat_memory/backends/)."""
