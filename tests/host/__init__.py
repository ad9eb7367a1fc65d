"""The workflow host: the command line, the runtime, the template (chat_memory/host/, templates/)."""
