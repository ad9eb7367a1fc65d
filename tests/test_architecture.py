"""The shape of the package: no import cycles, the core imports nothing of the host, the host
uses only the public API, and ``import chat_memory`` needs no optional driver or model SDK."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

from chat_memory import (
    AsyncChatMemory,
    AsyncStore,
    ChatMemory,
    ThreadedStore,
    open_store,
    steps,
)
from chat_memory.integrations.memory import (
    MemoryCall,
    add_to,
    clear_conversation,
    history_of,
    model_window_of,
    retract_from,
    window_of,
)
from tests.support.imports import graph, imports_in

#: Sub-packages built on the core (the core must not import them).
OUTSIDE_THE_CORE = ("host", "testing", "integrations", "inspector")
#: What the host may import from chat_memory: the top-level public names and these
#: public sub-packages/modules.
PUBLIC_MODULES = {
    "chat_memory",
    "chat_memory.backends",
    "chat_memory.components",
    "chat_memory.components.definitions",
    "chat_memory.inspector",  # chat-memory ui: docs/inspector.md
    "chat_memory.integrations.langflow.export",  # export_langflow, docs/langflow.md
    "chat_memory.longterm",
    "chat_memory.safe_json",
    "chat_memory.search",
    "chat_memory.strategies",
    "chat_memory.templates",
    "chat_memory.testing.scripted_model",
    "chat_memory.tools",
    "chat_memory.transfer",  # export_store, import_store, copy_store: docs/moving-stores.md
}
OPTIONAL = (
    "anthropic",
    "redis",
    "boto3",
    "botocore",
    "psycopg",
    "httpx2",
    "moto",
    "langchain_core",
    "agents",
    "lfx",
    "aiosqlite",
    "greenlet",
)


def test_the_import_graph_sees_imports_inside_functions_but_not_type_checking_blocks():
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import steps, Store\n"
        "if TYPE_CHECKING:\n"
        "    from .aio import AsyncChatMemory\n"
        "else:\n"
        "    import json\n"
        "def driver():\n"
        "    from .engine import ChatMemory\n"
        "    class Local:\n"
        "        import chat_memory.backends.registry\n"
    )
    modules = {"chat_memory", "chat_memory.steps", "chat_memory.engine", "chat_memory.aio"}
    assert imports_in(source, "chat_memory", modules) == {
        "typing",
        "json",
        "chat_memory",  # for the name Store
        "chat_memory.steps",
        "chat_memory.engine",
        "chat_memory.backends.registry",
    }


def test_no_import_cycles_between_modules():
    edges = graph()

    # a package's __init__ importing its own submodules is how packages work; count the rest
    def real(source: str, target: str) -> bool:
        return not (target.startswith(source + ".") and edges.get(source) is not None)

    state: dict[str, int] = {}
    cycle: list[str] = []

    def walk(node: str, path: list[str]) -> bool:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if target not in edges or not real(node, target):
                continue
            if state.get(target) == 1:
                cycle.extend([*path, node, target])
                return True
            if state.get(target) is None and walk(target, [*path, node]):
                return True
        state[node] = 2
        return False

    for start in sorted(edges):
        if state.get(start) is None and walk(start, []):
            break
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_core_imports_nothing_outside_it():
    for source, targets in graph().items():
        if source.split(".")[1:2] and source.split(".")[1] in OUTSIDE_THE_CORE:
            continue
        bad = {t for t in targets if t.split(".")[1:2] and t.split(".")[1] in OUTSIDE_THE_CORE}
        assert not bad, f"{source} imports {sorted(bad)}"


def test_the_host_uses_only_the_public_api():
    for source, targets in graph().items():
        if not source.startswith("chat_memory.host"):
            continue
        private = {
            t for t in targets if not t.startswith("chat_memory.host") and t not in PUBLIC_MODULES
        }
        assert not private, f"{source} imports {sorted(private)}, which are not public API"


def test_import_chat_memory_loads_no_optional_driver_and_no_host():
    code = (
        "import sys, chat_memory, chat_memory.engine;"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(OPTIONAL)!r}));"
        "print(sorted(m for m in sys.modules if m.startswith(('chat_memory.host', 'chat_memory.testing'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["[]", "[]"], out


def test_demo_without_the_anthropic_extra_exits_2_naming_it(tmp_path):
    code = (
        "import sys; sys.modules['anthropic'] = None\n"
        "from chat_memory.host.cli import main\n"
        "sys.exit(main(['--url', 'memory://', 'demo']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'chat-memory[anthropic]'" in lines[0], result.stderr


def test_the_core_works_without_any_extra(tmp_path):
    """As after ``pip install chat-memory`` alone: every optional package unimportable."""
    code = (
        "import sys\n"
        f"for name in {OPTIONAL!r}: sys.modules[name] = None\n"
        "from chat_memory import ChatMemory, ConfigurationError, Event, MemoryConfig, open_store\n"
        "for url in ('memory://', 'sqlite:///' + sys.argv[1]):\n"
        "    m = ChatMemory(open_store(url), MemoryConfig(compaction_strategy='turn_window', max_turns=1))\n"
        "    m.add('c', [Event.user('a'), Event.assistant('b')]); m.add('c', Event.user('c'))\n"
        "    assert [e.content for e in m.window('c')] == ['c'] and m.search('c', 'a').total == 1\n"
        "for url, extra in (('redis://127.0.0.1:1', 'redis'), ('s3://bucket/p', 's3'), ('postgresql://u@h/d', 'postgres')):\n"
        "    try:\n"
        "        open_store(url)\n"
        "    except ConfigurationError as exc:\n"
        "        assert f\"pip install 'chat-memory[{extra}]'\" in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(url)\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "c.db")], capture_output=True, text=True
    )
    assert result.stdout.strip() == "ok", result.stderr


def _first_request(step_function: Any) -> Any:
    """What a typed step function yields first (built with placeholder arguments)."""
    arity = len(inspect.signature(step_function).parameters)
    return next(step_function(*[None] * arity))


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_every_store_step_names_a_coroutine_of_the_async_store_too():
    """A store step holds the sync protocol's method (``Store.load``); :func:`steps.arun`
    awaits the method of that name on an async store: the protocol declares it as a
    coroutine, or (an optional ability, found by name) the threaded store offers it as one."""
    threaded = ThreadedStore(open_store("memory://"))
    for step_function in steps.STORE_STEPS:
        request = _first_request(step_function)
        assert isinstance(request, steps.StoreCall), step_function
        declared = getattr(AsyncStore, request.name, None)
        target = declared if declared is not None else getattr(threaded, request.name)
        assert inspect.iscoroutinefunction(target), request.name
        if declared is not None:
            assert _parameters(declared) == _parameters(request.method), request.name


def test_every_memory_step_names_a_coroutine_of_the_async_memory_too():
    """An adapter's memory step names a ChatMemory method; :func:`arun_memory` awaits the
    AsyncChatMemory method of that name, which takes the same arguments."""
    for step_function in (
        window_of,
        model_window_of,
        history_of,
        add_to,
        retract_from,
        clear_conversation,
    ):
        request = next(step_function("c", []) if step_function is add_to else step_function("c"))
        assert isinstance(request, MemoryCall), step_function
        method, twin = getattr(ChatMemory, request.name), getattr(AsyncChatMemory, request.name)
        assert inspect.iscoroutinefunction(twin), request.name
        assert _parameters(twin) == _parameters(method), request.name
