"""The LangChain and OpenAI Agents SDK adapters against the real packages and their references, and the README's examples."""
