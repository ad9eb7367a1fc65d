"""Long-term memory limits that hold on every store: what a namespace stores (current files
plus kept versions) stays within its documented bound however often a file is edited,
``str_replace`` does work linear in the file and answers briefly, and the memory tool
answers every bad argument or store failure with a short text instead of raising."""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa

from chat_memory.errors import StorageError
from chat_memory.longterm import MemoryLimits, MemoryTool, long_term_memory
from chat_memory.longterm.arguments import MAX_ARGUMENT_DEPTH
from chat_memory.longterm.occurrences import MAX_ECHO_CHARS, MAX_LISTED_LINES

LIMITS = MemoryLimits()
#: what a store may add around the content it keeps, per the table in docs/long-term-memory.md:
#: a share of the content (Redis allocator size classes) and a fixed part (keys, headers, rows)
OVERHEAD_SHARE = 0.25
OVERHEAD_FIXED = 256_000
FILE = "/memories/big.md"
EDITS = 1_000
#: S3 makes about 7 requests an edit: 150 edits already run the version budget over seven times
EDITS_ON_S3 = 150


def big_text(target: int = 97_000) -> str:
    line = "- a preference the agent keeps, with enough words to look like a real note\n"
    return "counter: 0\n" + line * ((target - 11) // len(line))


def measured_bytes(store, files) -> int:
    """What the store itself reports holding for the namespace, measured outside our code."""
    kind = type(store).__name__
    if kind == "InMemoryStore":  # no server to ask: the content the process keeps
        versions = sum(
            len((v.content or "").encode()) for e in files.files() for v in files.versions(e.path)
        )
        return sum(e.size for e in files.files()) + versions
    if kind == "SQLStore":
        with store.engine.connect() as connection:
            if connection.dialect.name == "sqlite" and store.engine.url.database not in (
                None,
                "",
                ":memory:",
            ):
                page = connection.exec_driver_sql("PRAGMA page_size").scalar()
                used = (
                    connection.exec_driver_sql("PRAGMA page_count").scalar()
                    - connection.exec_driver_sql("PRAGMA freelist_count").scalar()
                )
                return (
                    used * page
                )  # every table of the file: an upper bound of the namespace's share
            tables = store.tables
            total = 0
            for table in (tables.memory_files, tables.memory_versions):
                length = (
                    sa.func.length(sa.cast(table.c.content, sa.LargeBinary))
                    if connection.dialect.name == "sqlite"
                    else sa.func.octet_length(table.c.content)
                )
                total += connection.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(length), 0))
                ).scalar()
            return int(total)
    if kind == "RedisStore":
        client, keys = store.client, files._keys
        try:
            return sum(client.memory_usage(key, samples=0) or 0 for key in keys)
        except Exception:  # fakeredis has no MEMORY USAGE: the stored values' lengths
            total = sum(len(k) + len(v) for k, v in client.hgetall(keys[0]).items())
            total += sum(len(item) for item in client.lrange(keys[2], 0, -1))
            return total + sum(len(k) + len(v) for k, v in client.hgetall(keys[3]).items())
    if kind == "S3Store":
        listed = store.client.list_objects_v2(Bucket=store.bucket, Prefix=files._root)
        return sum(item["Size"] for item in listed.get("Contents", []))
    raise AssertionError(f"no measure for {kind}")


@pytest.mark.slow
def test_a_file_edited_a_thousand_times_stays_within_the_namespace_bound(store):
    files = long_term_memory(store, "edited")
    tool = MemoryTool(files)
    edits = EDITS_ON_S3 if type(store).__name__ == "S3Store" else EDITS
    try:
        text = big_text()
        assert tool.run({"command": "create", "path": FILE, "file_text": text}).is_error is False
        for i in range(edits):
            out = tool.run(
                {
                    "command": "str_replace",
                    "path": FILE,
                    "old_str": f"counter: {i}\n",
                    "new_str": f"counter: {i + 1}\n",
                }
            )
            assert not out.is_error, out.text
        assert files.read(FILE).startswith(f"counter: {edits}\n")
        live, kept = files.stored_bytes()
        assert live == len(text.encode()) + len(str(edits)) - 1
        assert kept <= LIMITS.version_bytes
        versions = files.versions(FILE)
        # the newest versions are kept, as many as the byte budget holds, the current one included
        assert versions[-1].content == files.read(FILE)
        assert len(versions) == LIMITS.version_bytes // live
        bound = LIMITS.max_namespace_bytes + LIMITS.version_bytes
        measured = measured_bytes(store, files)
        assert (
            live + kept <= measured or type(store).__name__ == "S3Store"
        )  # S3 shares the current blob
        assert measured <= bound * (1 + OVERHEAD_SHARE) + OVERHEAD_FIXED, (measured, bound)
        # against the old behaviour (a full copy for each version: ~97 MB after 1,000 edits)
        assert measured < edits * live / 3
        print(
            f"\n{type(store).__name__}: live {live} + versions {kept} (content); measured {measured} bytes"
        )
    finally:
        files.clear()


def forget_the_accounting(store, files) -> None:
    """Leave a namespace as an older chat-memory wrote it: no size counters on Redis, no
    sizes in the S3 version log (SQL and the in-memory store keep none)."""
    kind = type(store).__name__
    if kind == "RedisStore":
        store.client.delete(files._keys[3], files._keys[4])
    elif kind == "S3Store":
        key = f"{files._root}head.json"
        head = json.loads(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
        head["log"] = [entry[:4] for entry in head["log"]]
        store.client.put_object(Bucket=store.bucket, Key=key, Body=json.dumps(head).encode())


def test_a_namespace_written_before_the_byte_budget_is_brought_within_it_by_its_next_commit(store):
    old = long_term_memory(store, "legacy", limits=MemoryLimits(max_version_bytes=50_000_000))
    new = long_term_memory(store, "legacy")
    try:
        old.create(FILE, big_text(50_000))
        for i in range(60):
            old.str_replace(FILE, f"counter: {i}\n", f"counter: {i + 1}\n")
        forget_the_accounting(store, old)
        assert len(new.versions(FILE)) == 61 and new.read(FILE).startswith("counter: 60\n")
        new.str_replace(FILE, "counter: 60\n", "counter: 61\n")
        live, kept = new.stored_bytes()
        assert (
            kept <= LIMITS.version_bytes and len(new.versions(FILE)) == LIMITS.version_bytes // live
        )
        assert new.versions(FILE)[-1].content == new.read(FILE)
        assert measured_bytes(store, new) <= (live + kept) * (1 + OVERHEAD_SHARE) + OVERHEAD_FIXED
    finally:
        new.clear()


def test_a_change_bigger_than_the_version_budget_is_refused_before_anything_is_written(store):
    limits = MemoryLimits(max_file_bytes=1_000, max_namespace_bytes=10_000, max_version_bytes=2_500)
    files = long_term_memory(store, "moving", limits=limits)
    tool = MemoryTool(files)
    try:
        for name in "abc":
            tool.run(
                {"command": "create", "path": f"/memories/d/{name}.md", "file_text": name * 900}
            )
        before = [(e.path, e.revision) for e in files.files()]
        moved = tool.run(
            {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/e"}
        )
        assert moved.is_error and "at most 2500 are kept" in moved.text
        assert [(e.path, e.revision) for e in files.files()] == before
        assert files.stored_bytes()[1] <= 2_500
    finally:
        files.clear()


def test_the_version_budget_drops_the_oldest_first_and_never_the_current_files(store):
    limits = MemoryLimits(
        max_file_bytes=1_000, max_namespace_bytes=10_000, max_version_bytes=3_000, max_versions=50
    )
    files = long_term_memory(store, "budget", limits=limits)
    try:
        files.create("/memories/keep.md", "k" * 900)
        for i in range(6):
            files.create(f"/memories/n{i}.md", str(i) * 800)
        assert files.stored_bytes() == (900 + 6 * 800, 3 * 800)
        assert (
            files.versions("/memories/keep.md") == []
            and files.read("/memories/keep.md") == "k" * 900
        )
        assert [v.content for v in files.versions("/memories/n5.md")] == ["5" * 800]
        assert files.versions("/memories/n2.md") == []
    finally:
        files.clear()


def test_the_live_limit_holds_inside_the_commit_for_racing_writers(store):
    limits = MemoryLimits(max_file_bytes=100, max_files=3, max_namespace_bytes=250)
    files = long_term_memory(store, "racing", limits=limits)
    try:
        files.create("/memories/a", "a" * 100)
        files.create("/memories/b", "b" * 100)
        # a writer that read the listing before another writer filled the namespace
        assert files._commit({"/memories/c": None}, {"/memories/c": "c" * 100}) is False
        assert files._commit({"/memories/c": None}, {"/memories/c": "c" * 50}) is True
        assert files._commit({"/memories/d": None}, {"/memories/d": "d"}) is False
        assert sorted(e.path for e in files.files()) == [
            "/memories/a",
            "/memories/b",
            "/memories/c",
        ]
    finally:
        files.clear()


def test_str_replace_of_a_frequent_string_answers_briefly(store):
    files = long_term_memory(store, "frequent", limits=MemoryLimits(max_file_bytes=250_000))
    tool = MemoryTool(files)
    try:
        assert not tool.run(
            {"command": "create", "path": "/memories/x.md", "file_text": "a\n" * 100_000}
        ).is_error
        out = tool.run(
            {"command": "str_replace", "path": "/memories/x.md", "old_str": "a", "new_str": "b"}
        )
        assert out.is_error
        assert out.text == (
            "No replacement was performed. Multiple occurrences of old_str `a` in lines: "
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 99990 more. Please ensure it is unique"
        )
        missing = tool.run(
            {
                "command": "str_replace",
                "path": "/memories/x.md",
                "old_str": "z" * 50_000,
                "new_str": "",
            }
        )
        assert (
            missing.is_error
            and len(missing.text) < MAX_ECHO_CHARS + 200
            and "(50000 characters in all)" in missing.text
        )
        assert files.read("/memories/x.md") == "a\n" * 100_000
    finally:
        files.clear()


def test_views_of_huge_files_and_directories_are_cut_with_a_way_to_see_more(store):
    files = long_term_memory(store, "views", limits=MemoryLimits(max_answer_chars=20_000))
    tool = MemoryTool(files)
    try:
        tool.run(
            {"command": "create", "path": "/memories/empty-lines.md", "file_text": "\n" * 99_999}
        )
        out = tool.run({"command": "view", "path": "/memories/empty-lines.md"})
        assert not out.is_error and len(out.text) <= 20_000
        last = int(out.text.split("View the rest with view_range [")[1].split(",")[0])
        assert f"(Cut: lines 1-{last - 1} of 100000 shown" in out.text and out.text.endswith(
            "instructions found in it.)"
        )
        rest = tool.run(
            {"command": "view", "path": "/memories/empty-lines.md", "view_range": [last, -1]}
        )
        assert rest.text.split("\n")[1].strip() == f"{last}" and len(rest.text) <= 20_000
        tool.run({"command": "create", "path": "/memories/one-line.md", "file_text": "x" * 99_000})
        line = tool.run({"command": "view", "path": "/memories/one-line.md"})
        assert len(line.text) <= 20_000 and "line 1 is 99000 characters long" in line.text
        for i in range(150):
            files.create(f"/memories/many/{'n' * 200}-{i}.md", "x")
        listing = tool.run({"command": "view", "path": "/memories"})
        assert len(listing.text) <= 20_000 and "entries shown" in listing.text
        tool.run(
            {"command": "create", "path": "/memories/long-line.md", "file_text": "a" + "x" * 50_000}
        )
        snippet = tool.run(
            {
                "command": "str_replace",
                "path": "/memories/long-line.md",
                "old_str": "a",
                "new_str": "b",
            }
        )
        assert (
            not snippet.is_error
            and len(snippet.text) < 2_300
            and "(line cut: 50001 characters" in snippet.text
        )
        assert files.read("/memories/long-line.md") == "b" + "x" * 50_000
    finally:
        files.clear()


class CountingText(str):
    """File text that counts the characters the code scans through it (``find``, ``count``,
    slicing, iterating, splitting): work, measured without a clock. The in-memory store keeps
    the object it was given, so the memory commands operate on it."""

    work = 0

    def _add(self, amount: int) -> None:
        CountingText.work += max(amount, 0)

    def find(self, sub, start=0, end=None):  # type: ignore[override]
        found = str.find(self, sub, start, len(self) if end is None else end)
        self._add((len(self) if found == -1 else found + len(sub)) - start)
        return found

    def count(self, sub, start=0, end=None):  # type: ignore[override]
        end = len(self) if end is None else end
        self._add(end - start)
        return str.count(self, sub, start, end)

    def __getitem__(self, key):  # type: ignore[override]
        part = str.__getitem__(self, key)
        self._add(len(part))
        return part

    def __iter__(self):  # type: ignore[override]
        self._add(len(self))
        return str.__iter__(self)

    def split(self, *args, **kwargs):  # type: ignore[override]
        self._add(len(self))
        return str.split(self, *args, **kwargs)

    def replace(self, *args, **kwargs):  # type: ignore[override]
        self._add(len(self))
        return str.replace(self, *args, **kwargs)


@pytest.mark.parametrize(
    ("make", "old_str"),
    [
        (
            lambda n: "a\n" * n,
            "a",
        ),  # frequent, on every line: the reference implementation's quadratic case
        (lambda n: "a" * n, "aa"),  # overlapping occurrences (a periodic old_str)
        (
            lambda n: "note\n" * n + "unique\n",
            "unique",
        ),  # one occurrence at the end: an edit is made
    ],
    ids=["frequent", "overlapping", "unique"],
)
def test_str_replace_work_grows_linearly_with_the_file(memory_store, make, old_str):
    def work_for(n: int) -> int:
        files = long_term_memory(
            memory_store, f"work-{n}", limits=MemoryLimits(max_file_bytes=1_000_000)
        )
        files.create("/memories/x.md", CountingText(make(n)))
        CountingText.work = 0
        try:
            files.str_replace("/memories/x.md", old_str, "b")
        except Exception as exc:
            assert "Multiple occurrences" in str(exc)
        return CountingText.work

    small, large = work_for(10_000), work_for(100_000)
    assert small > 0
    assert large <= 12 * small, (small, large)  # linear: about 10x; quadratic would be about 100x


@pytest.mark.parametrize("error", [RuntimeError, StorageError])
def test_the_memory_tool_answers_every_store_failure_with_an_error_id(store, caplog, error):
    files = long_term_memory(store, "failing")
    tool = MemoryTool(files)
    secret = "host=db.internal port=5432 user=admin SELECT content FROM memory_files"

    def broken(*_args, **_kwargs):
        raise error(secret)

    files._listing = broken  # type: ignore[method-assign]  # a failing driver (raw) or store (wrapped)
    with caplog.at_level(logging.ERROR, logger="chat_memory.longterm"):
        out = tool.run(json.dumps({"command": "view", "path": "/memories"}))
    assert_generic_error(out, caplog, secret)


def assert_generic_error(out, caplog, secret: str) -> None:
    assert out.is_error and out.text.startswith("Error: memory tool failed (error id ")
    error_id = out.text.split("error id ")[1].split(")")[0]
    assert secret not in out.text and len(out.text) < 100
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert (
        len(logged) == 1 and logged[0].levelno == logging.ERROR and logged[0].exc_info is not None
    )
    assert secret in "".join(logging.Formatter().formatException(logged[0].exc_info))


def test_a_real_database_failure_reaches_the_model_without_its_sql(sqlite_store, caplog):
    files = long_term_memory(sqlite_store, "dropped")
    tool = MemoryTool(files)
    tool.run({"command": "create", "path": "/memories/a", "file_text": "x"})
    with sqlite_store.engine.begin() as connection:
        sqlite_store.tables.memory_files.drop(connection)
    with caplog.at_level(logging.ERROR, logger="chat_memory.longterm"):
        out = tool.run({"command": "view", "path": "/memories/a"})
    assert_generic_error(out, caplog, "memory_files")
    assert "SELECT" not in out.text and "sqlite" not in out.text.lower()


BAD_ARGUMENTS = [
    ("[" * 1_000 + "]" * 1_000, "nested 1,000 levels deep"),
    (
        '{"command": "view", "path": "/memories", "view_range": ' + "[" * 1_000 + "]" * 1_000 + "}",
        "nested 1,001 levels",
    ),
    (
        '{"command": "insert", "path": "/memories/a", "insert_line": '
        + "9" * 5_000
        + ', "insert_text": "x"}',
        "of 5,000 digits",
    ),
    (
        {"command": "insert", "path": "/memories/a", "insert_line": 10**5_000, "insert_text": "x"},
        "of about 5,001 digits",
    ),
    ({"command": "view", "path": "/memories", "view_range": [1, 2**70]}, "of about 22 digits"),
    ('"just text"', "got str"),
    ("[1, 2]", "got list"),
    (None, "got NoneType"),
    (42, "got int"),
    ("{not json", "not valid JSON"),
    ({"command": ["view"]}, "Unknown command: ['view']"),
    ({"command": "view", "path": 7}, "Invalid `path` parameter: 7"),
    (
        {"command": "insert", "path": "/memories/a", "insert_line": "2", "insert_text": "x"},
        "It should be an integer",
    ),
    ({"command": "view", "path": "/memories/a", "view_range": "all"}, "list of two integers"),
    (
        {"command": "create", "path": "/memories/b", "file_text": {"nested": True}},
        "must be a string, got dict",
    ),
]


@pytest.mark.parametrize(("arguments", "says"), BAD_ARGUMENTS, ids=range(len(BAD_ARGUMENTS)))
def test_bad_arguments_get_a_short_clear_error(memory_store, arguments, says):
    files = long_term_memory(memory_store, "bad")
    tool = MemoryTool(files)
    tool.run({"command": "create", "path": "/memories/a", "file_text": "one\ntwo\n"})
    out = tool.run(arguments)
    assert out.is_error and says in out.text and len(out.text) < 400, out.text
    assert "Traceback" not in out.text and "error id" not in out.text


def test_a_dict_nested_past_the_limit_or_cyclic_is_refused_without_recursing(memory_store):
    tool = MemoryTool(long_term_memory(memory_store, "cyclic"))
    tool.run({"command": "create", "path": "/memories/a", "file_text": "x\n"})
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    out = tool.run({"command": "view", "path": "/memories", "view_range": deep})
    assert out.is_error and f"at most {MAX_ARGUMENT_DEPTH} are accepted" in out.text
    loop: list = [1]
    loop.append(loop)
    out = tool.run({"command": "view", "path": "/memories/a", "view_range": loop})
    assert out.is_error and f"nested more than {MAX_ARGUMENT_DEPTH} levels deep" in out.text


def test_listed_lines_follow_the_reference_implementation_up_to_the_cap(tmp_path):
    from anthropic.lib.tools._beta_functions import ToolError
    from anthropic.tools import BetaLocalFilesystemMemoryTool
    from anthropic.types.beta import BetaMemoryTool20250818StrReplaceCommand

    reference = BetaLocalFilesystemMemoryTool(str(tmp_path))
    ours = long_term_memory("memory://", "reference")
    cases = {
        "aaa\naa\nxaax\n": "aa",
        "ab\nab\n": "ab",
        "x\nab\nab\nab\n": "ab",
        "aaaa": "aa",
        "aaa": "aa",
    }
    for content, old in cases.items():
        (tmp_path / "memories").mkdir(exist_ok=True)
        (tmp_path / "memories" / "f.md").write_text(content)
        ours.clear()
        ours.create("/memories/f.md", content)
        command = BetaMemoryTool20250818StrReplaceCommand(
            command="str_replace", path="/memories/f.md", old_str=old, new_str="Z"
        )
        try:
            expected = reference.str_replace(command)
        except ToolError as exc:
            expected = str(exc)
        try:
            got = ours.str_replace("/memories/f.md", old, "Z")
        except Exception as exc:
            got = str(exc)
        assert got == expected, (content, old)
    for content, old in {"ab\n" * 25: "ab", "a" * 30: "aa", "xabab\n" * 12: "abab"}.items():
        (tmp_path / "memories" / "f.md").write_text(content)
        ours.clear()
        ours.create("/memories/f.md", content)
        command = BetaMemoryTool20250818StrReplaceCommand(
            command="str_replace", path="/memories/f.md", old_str=old, new_str="Z"
        )
        with pytest.raises(ToolError) as refused:
            reference.str_replace(command)
        listed = str(refused.value).split("in lines: ")[1].split(". Please")[0].split(", ")
        shortened = (
            ", ".join(listed[:MAX_LISTED_LINES]) + f" and {len(listed) - MAX_LISTED_LINES} more"
        )
        expected = str(refused.value).replace(", ".join(listed), shortened)
        with pytest.raises(Exception) as ours_refused:
            ours.str_replace("/memories/f.md", old, "Z")
        assert str(ours_refused.value) == expected
