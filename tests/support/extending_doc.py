"""docs/extending.md as tests read it: its sections and the fenced blocks that name a file
(```` ```python toy_store.py ````), and what ``pip install`` of a one-module plugin leaves on
``sys.path`` (the module and a ``*.dist-info`` folder with its entry points)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
#: a fenced block whose info string names a file: ```python toy_store.py
_NAMED_BLOCK = re.compile(r"^```\w+ (?P<name>\S+)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def doc_section(heading: str) -> str:
    """The text of the ``## heading`` section of docs/extending.md (up to the next ``## ``)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def named_blocks(section: str) -> dict[str, str]:
    """The section's fenced blocks that name a file, by that name."""
    return {m["name"]: m["code"] for m in _NAMED_BLOCK.finditer(section)}


def commented_block(section: str, first_line: str) -> str:
    """The section's fenced block whose first line is ``first_line`` (``# tests/x.py``)."""
    for match in re.finditer(r"^```\w+\n(?P<code>.*?)^```$", section, re.MULTILINE | re.DOTALL):
        if match["code"].startswith(first_line + "\n"):
            return match["code"]
    raise AssertionError(f"no block starting with {first_line!r} in docs/extending.md")


def install(folder: Path, distribution: str, module: str, code: str, pyproject: str) -> None:
    """What ``pip install`` of a one-module package leaves on ``sys.path``: the module and a
    ``*.dist-info`` folder whose ``entry_points.txt`` importlib.metadata reads (taken from the
    ``[project.entry-points]`` tables of ``pyproject``)."""
    (folder / f"{module}.py").write_text(code, encoding="utf-8")
    dist_info = folder / f"{distribution}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist_info / "entry_points.txt").write_text(entry_points_txt(pyproject), encoding="utf-8")


def entry_points_txt(pyproject: str) -> str:
    """The ``entry_points.txt`` of a ``pyproject.toml``'s ``[project.entry-points."group"]``
    tables of ``name = "module:attr"`` lines (all a plugin needs; tomllib is 3.11+)."""
    lines = []
    for line in pyproject.splitlines():
        group = re.fullmatch(r'\[project\.entry-points\."([^"]+)"\]', line.strip())
        point = re.fullmatch(r'([\w.-]+)\s*=\s*"([^"]+)"', line.strip())
        if group:
            lines.append(f"[{group[1]}]")
        elif point and lines:
            lines.append(f"{point[1]} = {point[2]}")
    assert lines, f"no entry point in {pyproject!r}"
    return "\n".join(lines) + "\n"
