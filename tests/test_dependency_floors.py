"""The floors in pyproject.toml and the pins in constraints/lowest.txt (the lowest-versions
run of ``scripts/test-lowest``) are the same versions, so what CI proves is what we declare."""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
#: The extras a user installs; ``all``, ``dev`` and ``bench`` only combine them or add tools.
#: (The framework adapters' extras are not here: their floors are the versions the newest run
#: and tests/langflow test them on, and their packages need a newer pydantic than the core.)
USER_EXTRAS = ("postgres", "redis", "s3", "anthropic", "asyncio")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_floors() -> dict[str, str]:
    """Every core and user-extra requirement's ``>=`` version, by normalised name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in USER_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    floors = {}
    for line in requirements:
        requirement = Requirement(line)
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(lower) == 1, f"{line!r} needs exactly one '>=' floor"
        floors[_name(requirement.name)] = lower[0]
    return floors


def lowest_pins() -> dict[str, str]:
    pins = {}
    for raw in (ROOT / "constraints" / "lowest.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints/lowest.txt: {raw!r} is not a name==version pin"
            pins[_name(name)] = version.strip()
    return pins


def test_every_floor_is_pinned_at_exactly_that_version_for_the_lowest_run():
    pins = lowest_pins()
    for name, floor in declared_floors().items():
        pinned = pins.get(name)
        assert pinned is not None and Version(pinned) == Version(floor), (
            f"pyproject.toml says {name}>={floor}; constraints/lowest.txt pins {pinned}"
        )


@pytest.mark.skipif(
    not os.environ.get("CHAT_MEMORY_LOWEST"),
    reason="only in the lowest-versions run (scripts/test-lowest)",
)
def test_the_lowest_run_has_the_pinned_versions_installed():
    installed = {name: metadata.version(name) for name in lowest_pins()}
    assert installed == lowest_pins()
