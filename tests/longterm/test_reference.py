"""The memory tool answers as the SDK's reference does: the same command sequences run through
``anthropic.tools.BetaLocalFilesystemMemoryTool`` (a folder under ``tmp_path``) and through
``MemoryTool`` on every long-term store, comparing after every step the answer text, whether it
is an error, and the resulting tree of files.

Only what must differ is normalised (each one is listed, with its reason, under "Differences
from the SDK's reference" in docs/long-term-memory.md):

1. a directory's size: the reference prints its inode size (``4K`` on ext4), ours the total of
   the files under it;
2. empty directories are removed from the reference's folder after each command: a store has no
   directories, one exists while it holds a file;
3. a command the reference fails with a Python exception (not a ``ToolError``): only the
   error-ness is compared, our text is our own;
4. the reference note that ends our file views is checked, then removed;
5. a non-unique ``old_str``: the reference lists every line, ours the first 10 and
   ``and N more``;
6. a path form we refuse for safety (``.``/``..`` names, ``//``, ``/memoriesX``) is not sent
   to the reference: ours must refuse it and change nothing.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools._beta_functions import ToolError
from anthropic.tools import BetaLocalFilesystemMemoryTool

from chat_memory.longterm import MemoryPathError, MemoryTool, check_path, long_term_memory
from chat_memory.longterm.occurrences import MAX_LISTED_LINES
from chat_memory.longterm.tool import REFERENCE_NOTE

#: path forms a model writes: files, directories, nested ones, dot-files, the root, a trailing /
PATHS = [
    "/memories",
    "/memories/",
    "/memories/a",
    "/memories/a/",
    "/memories/a/b.md",
    "/memories/a/c",
    "/memories/a/c/d.md",
    "/memories/a/c/e/f.md",
    "/memories/a.md",
    "/memories/a/b.md/x",
    "/memories/a/c/e",
    "/memories/a/c/e/g/h.md",
    "/memories/notes",
    "/memories/notes/",
    "/memories/notes.md",
    "/memories/.h",
    "/memories/notes/x.md",
    "/memories/.hidden",
    "/memories/.h/x.md",
    "/memories/a/.z",
    "/memories/B.md",
]
#: forms the reference refuses or resolves, and ours refuses
ODD_PATHS = [
    "",
    "/etc",
    "/memoriesx",
    "/memories/..",
    "/memories/../etc",
    "/memories/a/..",
    "/memories/./a",
    "/memories//a",
]
TEXTS = ["", "x", "one\ntwo\n", "a\nb\nc\nd\ne\nf\n", "x\r\ny", "xx", "\n", "two\n"]
OLD = ["", "x", "two", "a", "\n", "zzz", "b\nc", "\r"]
NEW = ["", "y", "X\nY"]
INSERT_LINES = [-1, 0, 1, 2, 3, 7]
INSERT_TEXTS = ["", "new", "n1\nn2\n", "\n", "\r"]
VIEW_RANGES = [
    None,
    [0, 2],
    [1, -1],
    [2, 3],
    [3, 1],
    [-2, 2],
    [1, -3],
    [0, 0],
    [5, -1],
    [2, 2],
    [],
    [1],
    [1, 2, 3],
]
#: (sequences, commands each) per store: enough to meet every difference the alphabet allows,
#: within the time the slowest store (S3 over HTTP) has
SEQUENCES, STEPS = 12, 30

_DIRECTORY_SIZE = re.compile(r"^[0-9.]+[BKMG]\t(?=.*/$)")
_LINES = re.compile(
    r"(Multiple occurrences of old_str `.*` in lines: )([0-9, ]+)(\. Please ensure it is unique)",
    re.S,
)


def random_path(rng: random.Random, tree: dict[str, str], existing: float = 0.45) -> str:
    """Often (``existing``) a file that exists, so commands get past "does not exist", else a
    directory that exists or any form."""
    roll = rng.random()
    if tree and roll < existing:
        return "/memories/" + rng.choice(sorted(tree))
    directories = sorted({name.rsplit("/", 1)[0] for name in tree if "/" in name})
    if directories and roll < existing + 0.1:
        return "/memories/" + rng.choice(directories) + rng.choice(["", "/"])
    return rng.choice(ODD_PATHS) if roll > 0.92 else rng.choice(PATHS)


def random_command(rng: random.Random, tree: dict[str, str]) -> dict[str, Any]:
    """One command over a small alphabet; ``tree`` (relative path -> content) is what exists."""
    command = rng.choice(
        [
            "view",
            "view",
            "create",
            "create",
            "str_replace",
            "str_replace",
            "insert",
            "delete",
            "rename",
        ]
    )
    path = random_path(rng, tree, 0.75 if command in ("str_replace", "insert") else 0.45)
    if command == "view":
        call: dict[str, Any] = {"command": "view", "path": path}
        view_range = rng.choice(VIEW_RANGES)
        if view_range is not None:
            call["view_range"] = view_range
        return call
    if command == "create":
        return {"command": "create", "path": path, "file_text": rng.choice(TEXTS)}
    if command == "str_replace":
        content = tree.get(path[len("/memories/") :], "")
        old = rng.choice(OLD)
        if content and rng.random() < 0.5:  # a piece of the file: unique or not, as it falls
            at = rng.randrange(len(content))
            old = content[at : at + rng.randint(1, 4)]
        return {"command": "str_replace", "path": path, "old_str": old, "new_str": rng.choice(NEW)}
    if command == "insert":
        lines = tree.get(path[len("/memories/") :], "").count("\n")
        line = rng.choice(INSERT_LINES) if rng.random() < 0.4 else rng.randint(0, lines + 1)
        return {
            "command": "insert",
            "path": path,
            "insert_line": line,
            "insert_text": rng.choice(INSERT_TEXTS),
        }
    if command == "delete":
        return {"command": "delete", "path": path}
    return {"command": "rename", "old_path": path, "new_path": random_path(rng, tree)}


def reference_answer(
    reference: BetaLocalFilesystemMemoryTool, call: dict[str, Any]
) -> tuple[str | None, bool]:
    """(text, is_error) as the SDK's tool runner would send it; text None when the reference
    failed with a Python exception (normalisation 3)."""
    try:
        return str(reference.call(call)), False
    except ToolError as exc:
        return str(exc.content), True
    except Exception:
        return None, True
    finally:
        _remove_empty_directories(reference.memory_root)  # normalisation 2


def _remove_empty_directories(root: Path) -> None:
    for directory, _subdirectories, _files in os.walk(root, topdown=False):
        if Path(directory) != root and not os.listdir(directory):
            os.rmdir(directory)


def normalised(text: str) -> str:
    """Directory sizes out (normalisation 1), the line list cut as ours is (normalisation 5)."""
    if text.startswith("Here're the files and directories"):
        rows = text.split("\n")
        rows[1] = re.sub(r"^[0-9.]+[BKMG]\t", "<dir>\t", rows[1])
        text = "\n".join(rows[:2] + [_DIRECTORY_SIZE.sub("<dir>\t", row) for row in rows[2:]])

    def cut(match: re.Match[str]) -> str:
        lines = match.group(2).split(", ")
        more = len(lines) - MAX_LISTED_LINES
        listed = ", ".join(lines[:MAX_LISTED_LINES]) + (f" and {more} more" if more > 0 else "")
        return match.group(1) + listed + match.group(3)

    return _LINES.sub(cut, text)


def reference_tree(reference: BetaLocalFilesystemMemoryTool) -> dict[str, str]:
    root = reference.memory_root
    return {
        str(Path(directory, name).relative_to(root)): Path(directory, name)
        .read_bytes()
        .decode("utf-8")
        for directory, _subdirectories, names in os.walk(root)
        for name in names
    }


def our_tree(tool: MemoryTool) -> dict[str, str]:
    return {
        entry.path[len("/memories/") :]: tool.files.read(entry.path) for entry in tool.files.files()
    }


def refused_by_us_only(call: dict[str, Any]) -> str | None:
    """The refusal text when the call names a path form only we refuse (normalisation 6)."""
    for field in ("path", "old_path", "new_path"):
        if field in call:
            try:
                check_path(call[field], field=field)
            except MemoryPathError as exc:  # the first refused path decides, as in both tools
                text = str(exc)
                reference_too = text.startswith(
                    "Path must start with /memories, got:"
                ) or text.endswith("would escape /memories directory")
                return None if reference_too else text
    return None


def step(
    reference: BetaLocalFilesystemMemoryTool, tool: MemoryTool, call: dict[str, Any], where: str
) -> None:
    """Run one call through both and compare what the model sees and what is stored."""
    ours = tool.run(call)
    refusal = refused_by_us_only(call)
    if refusal is not None:
        assert ours.is_error and ours.text == refusal, (where, call, ours)
    else:
        text, is_error = reference_answer(reference, call)
        assert ours.is_error == is_error, (where, call, text, ours)
        our_text = ours.text
        if our_text.startswith("Here's the content of"):  # normalisation 4
            assert our_text.endswith("\n" + REFERENCE_NOTE), (where, call, our_text)
            our_text = our_text[: -len(REFERENCE_NOTE) - 1]
        if text is not None:
            assert normalised(our_text) == normalised(text), (where, call)
    assert our_tree(tool) == reference_tree(reference), (where, call)


@pytest.fixture
def pair(store, tmp_path):
    """A fresh (reference, ours) pair each time it is called."""
    made: list[MemoryTool] = []

    def make(name: str) -> tuple[BetaLocalFilesystemMemoryTool, MemoryTool]:
        tool = MemoryTool(long_term_memory(store, f"reference-{name}"))
        made.append(tool)
        return BetaLocalFilesystemMemoryTool(str(tmp_path / name)), tool

    yield make
    for tool in made:
        tool.files.clear()


def test_seeded_random_command_sequences_answer_as_the_reference(pair):
    for seed in range(SEQUENCES):
        rng = random.Random(seed)
        reference, tool = pair(f"seed-{seed}")
        for number in range(STEPS):
            step(
                reference,
                tool,
                random_command(rng, reference_tree(reference)),
                f"seed {seed}, step {number}",
            )


EDGE_CASES: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "a path outside is echoed unquoted",
        [{"command": "view", "path": "/etc"}, {"command": "delete", "path": ""}],
    ),
    (
        "escaping the root",
        [
            {"command": "view", "path": "/memories/../etc"},
            {"command": "create", "path": "/memories/..", "file_text": "x"},
        ],
    ),
    (
        "dot-files are not listed",
        [
            {"command": "create", "path": "/memories/.secret", "file_text": "x"},
            {"command": "create", "path": "/memories/.h/x.md", "file_text": "x"},
            {"command": "create", "path": "/memories/a/.z", "file_text": "x"},
            {"command": "view", "path": "/memories"},
            {"command": "view", "path": "/memories/.h"},
        ],
    ),
    (
        "a directory before the file that sorts after it",
        [
            {"command": "create", "path": "/memories/notes.md", "file_text": "x"},
            {"command": "create", "path": "/memories/notes/x.md", "file_text": "y"},
            {"command": "create", "path": "/memories/B.md", "file_text": "z"},
            {"command": "create", "path": "/memories/notes/deep/er/f.md", "file_text": "w"},
            {"command": "view", "path": "/memories"},
            {"command": "view", "path": "/memories/notes/"},
        ],
    ),
    (
        "view_range as the reference reads it",
        [
            {"command": "create", "path": "/memories/f.md", "file_text": "a\nb\nc\nd\n"},
            *(
                {"command": "view", "path": "/memories/f.md", "view_range": r}
                for r in VIEW_RANGES[1:]
            ),
            {"command": "view", "path": "/memories", "view_range": [0, 2]},
        ],
    ),
    (
        "create over a directory, the root, a file",
        [
            {"command": "create", "path": "/memories/a/b.md", "file_text": "x"},
            {"command": "create", "path": "/memories/a", "file_text": "x"},
            {"command": "create", "path": "/memories/a/", "file_text": "x"},
            {"command": "create", "path": "/memories", "file_text": "x"},
            {"command": "create", "path": "/memories/a/b.md", "file_text": "x"},
        ],
    ),
    (
        "rename onto itself, onto the root, a missing one onto an existing one",
        [
            {"command": "create", "path": "/memories/a.md", "file_text": "x"},
            {"command": "create", "path": "/memories/d/e.md", "file_text": "y"},
            {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/a.md"},
            {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/d"},
            {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories"},
            {"command": "rename", "old_path": "/memories/missing", "new_path": "/memories/a.md"},
            {"command": "rename", "old_path": "/memories/", "new_path": "/memories/x"},
            {"command": "rename", "old_path": "/memories/d/", "new_path": "/memories/n/m"},
            {"command": "view", "path": "/memories"},
        ],
    ),
    (
        "an empty old_str",
        [
            {"command": "create", "path": "/memories/empty.md", "file_text": ""},
            {
                "command": "str_replace",
                "path": "/memories/empty.md",
                "old_str": "",
                "new_str": "filled",
            },
            {
                "command": "str_replace",
                "path": "/memories/empty.md",
                "old_str": "",
                "new_str": "again",
            },
            {"command": "create", "path": "/memories/long.md", "file_text": "abc\ndefgh\nij\n"},
            {"command": "str_replace", "path": "/memories/long.md", "old_str": "", "new_str": "z"},
        ],
    ),
    (
        "str_replace and insert on the root, empty or not",
        [
            {"command": "str_replace", "path": "/memories", "old_str": "a", "new_str": "b"},
            {"command": "insert", "path": "/memories/", "insert_line": 0, "insert_text": "b"},
            {"command": "create", "path": "/memories/x.md", "file_text": "a"},
            {"command": "str_replace", "path": "/memories", "old_str": "a", "new_str": "b"},
            {"command": "delete", "path": "/memories/"},
        ],
    ),
    (
        "a path repeated as written: a trailing / on a file, non-ASCII names",
        [
            {"command": "create", "path": "/memories/x/", "file_text": "a\nb"},
            {"command": "str_replace", "path": "/memories/x/", "old_str": "a", "new_str": "c"},
            {"command": "insert", "path": "/memories/x/", "insert_line": 2, "insert_text": "d"},
            {"command": "rename", "old_path": "/memories/x/", "new_path": "/memories/y/z/"},
            {"command": "create", "path": "/memories/é/ü.md", "file_text": "ßß"},
            {"command": "view", "path": "/memories/"},
            {"command": "delete", "path": "/memories/y/z/"},
            {"command": "view", "path": "/memories/y"},
        ],
    ),
    (
        "carriage returns and trailing newlines on insert",
        [
            {"command": "create", "path": "/memories/cr.md", "file_text": "one\r\ntwo\r\n\n"},
            {"command": "insert", "path": "/memories/cr.md", "insert_line": 3, "insert_text": "\n"},
            {
                "command": "insert",
                "path": "/memories/cr.md",
                "insert_line": 1,
                "insert_text": "mid\r",
            },
            {"command": "view", "path": "/memories/cr.md"},
            {"command": "insert", "path": "/memories/cr.md", "insert_line": 9, "insert_text": "x"},
        ],
    ),
]


@pytest.mark.parametrize(("case", "calls"), EDGE_CASES, ids=[case for case, _ in EDGE_CASES])
def test_edge_cases_answer_as_the_reference(pair, case, calls):
    reference, tool = pair("edge")
    for number, call in enumerate(calls):
        step(reference, tool, call, f"{case}, call {number}")


def test_the_fixed_texts(memory_store):
    tool = MemoryTool(long_term_memory(memory_store, "texts"), reference_note=False)
    assert (
        tool.run({"command": "view", "path": "/etc"}).text
        == "Path must start with /memories, got: /etc"
    )
    tool({"command": "create", "path": "/memories/notes.md", "file_text": "1"})
    tool({"command": "create", "path": "/memories/notes/a.md", "file_text": "22"})
    tool({"command": "create", "path": "/memories/.env", "file_text": "333"})
    assert tool({"command": "view", "path": "/memories"}).split("\n")[1:] == [
        "6B\t/memories",
        "2B\t/memories/notes/",
        "2B\t/memories/notes/a.md",
        "1B\t/memories/notes.md",
    ]
    assert tool({"command": "view", "path": "/memories/notes.md", "view_range": [0, 2]}).endswith(
        "     1\t1"
    )
    assert (
        tool.run({"command": "create", "path": "/memories/notes", "file_text": "x"}).text
        == "File /memories/notes already exists"
    )
    same = tool.run(
        {"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/notes"}
    )
    assert same.is_error and same.text == "The destination /memories/notes already exists"
