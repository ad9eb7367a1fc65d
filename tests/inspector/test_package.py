"""The inspector is a client of the library, like the host: it imports only the public API
(and, for ``chat-memory ui``, the host's store handling), and nothing outside the standard
library, so the ``ui`` extra needs no dependency."""

from __future__ import annotations

import sys

from tests.support.imports import PACKAGE, graph, imports_in, module_name
from tests.test_architecture import PUBLIC_MODULES


def test_the_inspector_uses_only_the_public_api():
    for source, targets in graph().items():
        if not source.startswith("chat_memory.inspector"):
            continue
        private = {
            t
            for t in targets
            if not t.startswith(("chat_memory.inspector", "chat_memory.host"))
            and t not in PUBLIC_MODULES | {"chat_memory.lifecycle"}
        }
        assert not private, f"{source} imports {sorted(private)}, which are not public API"


def test_the_inspector_needs_only_the_standard_library():
    for path in (PACKAGE / "inspector").glob("*.py"):
        name = module_name(path)
        found = imports_in(path.read_text(encoding="utf-8"), name.rpartition(".")[0], set())
        outside = {
            m.split(".")[0]
            for m in found
            if not m.startswith("chat_memory") and m.split(".")[0] not in sys.stdlib_module_names
        }
        assert not outside, f"{name} imports {sorted(outside)}"
