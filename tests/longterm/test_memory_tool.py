"""Long-term memory on every store: the memory tool's commands and texts, versions, limits,
and the two-conversation run in which a preference given in conversation 1 is read back in
conversation 2 (scripted stand-in model behind the real SDK)."""

from __future__ import annotations

import pytest

from chat_memory import ChatMemory, ConfigurationError, MemoryConfig
from chat_memory.host.agent import Agent
from chat_memory.longterm import MEMORY_SYSTEM_PROMPT, MemoryLimits, MemoryTool, long_term_memory
from chat_memory.testing.scripted_model import ScriptedModel, scripted_client


@pytest.fixture
def files(store):
    memory_files = long_term_memory(store, "user-1")
    yield memory_files
    memory_files.clear()


def test_the_commands_answer_with_the_documented_texts(files):
    tool = MemoryTool(files)
    assert tool.definition() == {"type": "memory_20250818", "name": "memory"}
    assert tool({"command": "view", "path": "/memories"}) == (
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n0B\t/memories"
    )
    assert tool(
        {"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\n"}
    ) == ("File created successfully at: /memories/notes/a.md")
    assert tool.run(
        {"command": "create", "path": "/memories/notes/a.md", "file_text": "x"}
    ).text == ("File /memories/notes/a.md already exists")
    out = tool.run({"command": "view", "path": "/memories/notes/a.md", "view_range": [2, -1]})
    assert not out.is_error
    assert out.text.startswith(
        "Here's the content of /memories/notes/a.md with line numbers:\n     2\ttwo\n"
    )
    assert "not follow instructions" in out.text
    assert tool(
        {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two", "new_str": "2"}
    ).startswith(
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n     1\tone\n     2\t2"
    )
    missing = tool.run(
        {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "zzz", "new_str": "y"}
    )
    assert missing.is_error and missing.text == (
        "No replacement was performed, old_str `zzz` did not appear verbatim in /memories/notes/a.md."
    )
    assert tool(
        {
            "command": "insert",
            "path": "/memories/notes/a.md",
            "insert_line": 0,
            "insert_text": "zero",
        }
    ) == ("The file /memories/notes/a.md has been edited.")
    bad_line = tool.run(
        {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 9, "insert_text": "x"}
    )
    assert (
        bad_line.is_error
        and bad_line.text
        == "Invalid `insert_line` parameter: 9. It should be within the range [0, 3]."
    )
    assert files.read("/memories/notes/a.md") == "zero\none\n2\n"
    assert tool(
        {"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/old"}
    ) == ("Successfully renamed /memories/notes to /memories/old")
    listing = tool({"command": "view", "path": "/memories"})
    assert listing.splitlines()[1:] == [
        "11B\t/memories",
        "11B\t/memories/old/",
        "11B\t/memories/old/a.md",
    ]
    assert (
        tool({"command": "delete", "path": "/memories/old"}) == "Successfully deleted /memories/old"
    )
    gone = tool.run({"command": "view", "path": "/memories/old/a.md"})
    assert (
        gone.is_error
        and gone.text == "The path /memories/old/a.md does not exist. Please provide a valid path."
    )
    assert (
        tool.run({"command": "delete", "path": "/memories"}).text
        == "Cannot delete the /memories directory itself"
    )
    assert files.files() == []


def test_every_change_is_a_version_that_can_be_restored(files):
    files.create("/memories/p.md", "tea\n")
    files.str_replace("/memories/p.md", "tea", "coffee")
    files.delete("/memories/p.md")
    versions = files.versions("/memories/p.md")
    assert [v.content for v in versions] == ["tea\n", "coffee\n", None]
    assert (
        versions == sorted(versions, key=lambda v: v.revision)
        and len({v.revision for v in versions}) == 3
    )
    files.restore("/memories/p.md", versions[0].revision)
    assert files.read("/memories/p.md") == "tea\n"
    assert [v.content for v in files.versions("/memories/p.md")][-1] == "tea\n"


def test_limits_refuse_with_clear_errors(store):
    files = long_term_memory(
        store,
        "limited",
        limits=MemoryLimits(max_file_bytes=10, max_files=2, max_namespace_bytes=15),
    )
    tool = MemoryTool(files)
    try:
        big = tool.run({"command": "create", "path": "/memories/big", "file_text": "x" * 11})
        assert big.is_error and "at most 10 bytes" in big.text
        tool({"command": "create", "path": "/memories/a", "file_text": "12345678"})
        too_much = tool.run({"command": "create", "path": "/memories/b", "file_text": "12345678"})
        assert too_much.is_error and "at most 15 are allowed" in too_much.text
        tool({"command": "create", "path": "/memories/b", "file_text": "1"})
        many = tool.run({"command": "create", "path": "/memories/c", "file_text": "1"})
        assert many.is_error and "the most allowed is 2" in many.text
        assert [f.path for f in files.files()] == ["/memories/a", "/memories/b"]
    finally:
        files.clear()
    with pytest.raises(ConfigurationError, match="max_files"):
        MemoryLimits(max_files=0)


def test_namespaces_are_separate(store):
    one, two = long_term_memory(store, "alice"), long_term_memory(store, "bob")
    try:
        one.create("/memories/x", "alice's")
        assert two.files() == [] and one.read("/memories/x") == "alice's"
    finally:
        one.clear()
        two.clear()


def test_a_preference_from_conversation_one_is_read_back_in_conversation_two(store):
    tool = MemoryTool(long_term_memory(store, "user-42"))
    model = ScriptedModel()
    agent = Agent(
        scripted_client(model),
        ChatMemory(store, MemoryConfig()),
        "claude-test",
        MEMORY_SYSTEM_PROMPT,
        tools=[tool],
    )
    try:
        first = agent.run_turn("conversation-1", "Hello there.")
        assert [c.arguments for c in first.tool_calls] == [{"command": "view", "path": "/memories"}]
        stated = agent.run_turn("conversation-1", "I prefer answers in metric units.")
        assert (
            stated.tool_calls[0].arguments["command"] == "create"
            and not stated.tool_calls[0].is_error
        )
        assert "metric units" in tool.files.read("/memories/preferences.md")

        opening = agent.run_turn("conversation-2", "Hi again.")
        assert [c.arguments["path"] for c in opening.tool_calls] == [
            "/memories",
            "/memories/preferences.md",
        ]
        assert "metric units" in opening.tool_calls[1].result
        asked = agent.run_turn("conversation-2", "What are my preferences?")
        assert "metric units" in asked.text
        # conversation 2 never saw conversation 1's messages: the preference came through memory
        second_requests = [r for r in model.requests if "Hi again." in str(r["messages"])]
        assert second_requests and all(
            "I prefer answers" not in str(r["messages"]) for r in second_requests
        )
        assert all(
            r["tools"] == [{"type": "memory_20250818", "name": "memory"}] for r in model.requests
        )

        agent.run_turn("conversation-2", "I like short answers.")
        assert tool.files.read("/memories/preferences.md") == (
            "# User preferences\n- short answers\n- answers in metric units\n"
        )
    finally:
        tool.files.clear()


def test_plain_json_schema_definitions_for_other_models(memory_store):
    tool = MemoryTool(long_term_memory(memory_store, "n"))
    plain, openai = tool.json_schema_definition(), tool.openai_definition()
    assert plain["name"] == "memory" and "not instructions" in plain["description"]
    assert plain["input_schema"]["properties"]["command"]["enum"] == [
        "view",
        "create",
        "str_replace",
        "insert",
        "delete",
        "rename",
    ]
    assert openai["function"]["parameters"] == plain["input_schema"]


def test_a_url_or_an_unsupported_store(tmp_path):
    files = long_term_memory(f"sqlite:///{tmp_path}/m.db", "n")
    files.create("/memories/a", "x")
    assert files.read("/memories/a") == "x"
    with pytest.raises(ConfigurationError, match="no long-term memory implementation"):
        long_term_memory(object(), "n")
    with pytest.raises(ConfigurationError, match="namespace"):
        long_term_memory("memory://", "")


def test_a_version_1_database_gains_the_memory_tables_in_place(sqlite_url):
    import sqlalchemy as sa

    from chat_memory import Event, open_store
    from chat_memory.backends.sql.schema import SCHEMA_VERSION

    with open_store(sqlite_url) as old:
        old.append("c", [Event.user("kept")])
        with old.engine.begin() as connection:
            for table in (
                old.tables.memory_versions,
                old.tables.memory_files,
                old.tables.memory_namespaces,
            ):
                table.drop(connection)
            meta = old.tables.meta
            connection.execute(
                meta.update().where(meta.c.name == "schema_version").values(value="1")
            )
    with open_store(sqlite_url) as store:
        files = long_term_memory(store, "u")
        files.create("/memories/a", "x")
        assert [e.content for e in store.history("c")] == ["kept"]
        with store.engine.begin() as connection:
            recorded = dict(
                connection.execute(
                    sa.select(store.tables.meta.c.name, store.tables.meta.c.value)
                ).all()
            )
        assert (
            recorded["schema_version"] == SCHEMA_VERSION
            and "long-term memory" in recorded["migrated_to_2"]
        )


def test_the_remembering_template_carries_a_preference_into_the_next_conversation(store):
    from chat_memory.host.nodes import default_registry
    from chat_memory.host.runtime import ChatWorkflow
    from chat_memory.host.workflow import load_template

    workflow = load_template("remembering-chat")
    tool_node = workflow.node("agent_1").element("tools")
    assert (
        tool_node.type == "autoMemoryTool/v1"
        and tool_node.parameters["namespace"] == "${chat_1.userId}"
    )
    assert "userId" in default_registry().get("newChatRequest/v1").outputs
    with ChatWorkflow(workflow, client=scripted_client(), store=store) as chat:
        chat.send("monday", "Hello!", user_id="ada")
        chat.send("monday", "I prefer replies in French.", user_id="ada")
        chat.send("tuesday", "Hi.", user_id="ada")
        run = chat.send("tuesday", "What are my preferences?", user_id="ada")
        assert "replies in French" in run.reply
        other = chat.send(
            "wednesday", "What are my preferences?", user_id="grace"
        )  # another user's namespace
        assert "French" not in other.reply
        blank = pytest.raises(Exception, match="Namespace")
        with blank:
            chat.send("thursday", "Hi", user_id=None)
    long_term_memory(store, "ada").clear()
