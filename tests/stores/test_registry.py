"""Stores and strategies register themselves: a store or strategy written outside chat-memory
becomes usable (open_store, MemoryConfig, the canvas nodes) without an edit inside it."""

from __future__ import annotations

import logging
import sys
import textwrap
from typing import Any
from urllib.parse import urlsplit

import pytest

from chat_memory import (
    ChatMemory,
    ConfigurationError,
    Event,
    MemoryConfig,
    open_async_store,
    open_store,
)
from chat_memory.backends import (
    ConnectionField,
    StoreNode,
    StoreOption,
    registry,
    schemes,
    store_classes,
)
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.components import memory_definitions, memory_settings
from chat_memory.events import turn_starts
from chat_memory.strategies import Cut, Strategy, choose_cut, strategy_names
from chat_memory.strategies import base as strategy_base
from tests.support.imports import graph


class ShelfStore(InMemoryStore):
    """What a third-party store declares: schemes, options, its canvas node."""

    schemes = ("shelf",)
    url_options = (
        StoreOption("shelf"),
        StoreOption("max_archived_events", int, minimum=0, nullable=True),
    )
    node = StoreNode(
        "shelfChatMemory",
        "Shelf Chat Memory",
        "Chat memory on a shelf.",
        "shelf",
        fields=(ConnectionField("shelf", "Shelf", "Which shelf.", required=True),),
        order=50,
    )

    def __init__(self, shelf: str = "top", max_archived_events: int | None = 1000) -> None:
        super().__init__(max_archived_events)
        self.shelf = shelf

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ShelfStore:
        settings, _ = cls.url_settings(urlsplit(url).query, options)
        return cls(**settings)

    @classmethod
    def node_target(cls, connection: Any) -> tuple[str, dict[str, Any]]:
        return f"shelf://?shelf={connection['shelf']}", {}


@pytest.fixture
def shelf_store_registered():
    registry.register(
        ShelfStore
    )  # a module reload would do the same; registering twice is harmless
    yield ShelfStore
    registry.unregister(ShelfStore)


def test_a_store_outside_the_package_opens_by_its_scheme(shelf_store_registered):
    store = open_store("shelf://?shelf=left&max_archived_events=none")
    assert (
        isinstance(store, ShelfStore)
        and store.shelf == "left"
        and store.default_max_archived_events is None
    )
    assert "shelf" in schemes()
    memory = ChatMemory(store)
    memory.add("c", Event.user("hello"))
    assert [e.content for e in memory.window("c")] == ["hello"]


def test_a_store_outside_the_package_gets_its_canvas_node(shelf_store_registered):
    definitions = {d.type: d for d in memory_definitions()}
    node = definitions["shelfChatMemory/v2"]
    assert node.field("shelf").required and node.field("compactionStrategy") is not None
    assert "shelfChatMemory/v1" in definitions
    settings = memory_settings(node, {"conversationId": "c", "shelf": "bottom"})
    assert settings.store_target() == ("shelf://?shelf=bottom", {})
    assert settings.open_store().shelf == "bottom"


def test_unregistered_store_is_gone(shelf_store_registered):
    registry.unregister(ShelfStore)
    with pytest.raises(
        ConfigurationError, match=r"scheme \('shelf'\) is not supported; known schemes: .*memory"
    ):
        open_store("shelf://")
    registry.register(ShelfStore)


def test_a_scheme_cannot_be_taken_twice():
    class Impostor(InMemoryStore):
        pass

    Impostor.schemes = ("memory",)
    with pytest.raises(
        ConfigurationError,
        match=r"scheme 'memory' .* already registered by chat_memory.backends.in_memory.InMemoryStore",
    ):
        registry.register(Impostor)
    assert type(open_store("memory://")) is InMemoryStore


def test_installed_plugins_register_through_the_entry_point_group(tmp_path, monkeypatch, caplog):
    (tmp_path / "toy_plugin.py").write_text(
        textwrap.dedent(
            """
            from chat_memory.backends.in_memory import InMemoryStore

            class PluginStore(InMemoryStore):
                schemes = ("plugin",)
            """
        )
    )
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('plugin on fire')\n")
    dist = tmp_path / "toy_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[chat_memory.stores]\nplugin = toy_plugin:PluginStore\nbroken = broken_plugin:Store\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    with caplog.at_level(logging.WARNING, logger="chat_memory.backends.registry"):
        store = open_store("plugin://")
    try:
        assert type(store).__name__ == "PluginStore"
        assert any(
            "broken_plugin:Store" in r.getMessage() and "plugin on fire" in r.getMessage()
            for r in caplog.records
        )
    finally:
        registry.unregister(type(store))
        sys.modules.pop("toy_plugin", None)


def test_an_installed_async_store_is_found_without_importing_it_first(
    tmp_path, monkeypatch, caplog
):
    (tmp_path / "async_plugin.py").write_text(
        textwrap.dedent(
            """
            from chat_memory.backends.aio import ThreadedStore
            from chat_memory.backends.in_memory import InMemoryStore

            class PluginAsyncStore(ThreadedStore):
                schemes = ("asyncplugin",)
                native = True

                @classmethod
                def from_url(cls, url, **options):
                    return cls(InMemoryStore(), max_workers=1)

            NOT_A_STORE = object
            """
        )
    )
    dist = tmp_path / "async_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: async-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[chat_memory.stores]\n"
        "asyncplugin = async_plugin:PluginAsyncStore\n"
        "junk = async_plugin:NOT_A_STORE\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    assert "async_plugin" not in sys.modules
    with caplog.at_level(logging.WARNING, logger="chat_memory.backends.registry"):
        store = open_async_store("asyncplugin://")
    plugin = sys.modules.pop("async_plugin")
    try:
        assert type(store) is plugin.PluginAsyncStore and store.native
        assert plugin.PluginAsyncStore in registry.async_store_classes()
        assert any(
            "async_plugin:NOT_A_STORE" in r.getMessage()
            and "not a Store or AsyncStore" in r.getMessage()
            for r in caplog.records
        )
    finally:
        registry.unregister(plugin.PluginAsyncStore)


def test_the_registry_imports_no_store_module():
    """Stores import the registry (their base classes register them); the registry imports
    none of them, not even inside a function, so there is no cycle to break lazily."""
    ours = graph()["chat_memory.backends.registry"]
    # errors and the plugin finder, which imports nothing of chat_memory
    assert ours == {"chat_memory.errors", "chat_memory.plugins"}, ours


@pytest.mark.parametrize("store_class", store_classes(), ids=lambda c: c.__name__)
def test_every_store_parses_its_options_alike(store_class):
    declared = {o.name: o for o in store_class.url_options}
    if "max_archived_events" in declared:
        option = declared["max_archived_events"]
        assert [option.parse(v, "S") for v in ("none", "", " None ", "0", "12", 12, None)] == [
            None,
            None,
            None,
            0,
            12,
            12,
            None,
        ]
        with pytest.raises(
            ConfigurationError,
            match=r"S option max_archived_events \('-1'\) must be a whole number, 0 or more",
        ):
            option.parse("-1", "S")
        with pytest.raises(
            ConfigurationError, match=r"max_archived_events \('unbounded'\) must be a whole number"
        ):
            option.parse("unbounded", "S")
    if not store_class.passes_query_to_driver:
        with pytest.raises(
            ConfigurationError, match=r"URL option \('colour'\) is not supported; known options: "
        ):
            store_class.url_settings("colour=blue")


@pytest.mark.parametrize("url", ["memory://", "s3://bucket/p"])
def test_unknown_keyword_options_are_refused_by_name(url, aws_env):
    with pytest.raises(ConfigurationError, match="'colour'"):
        open_store(url, colour="blue")


def test_an_option_given_twice_in_the_url_is_refused():
    with pytest.raises(ConfigurationError, match="max_archived_events is given more than once"):
        open_store("memory://?max_archived_events=1&max_archived_events=2")


def test_bool_options():
    option = StoreOption("create_bucket", bool)
    assert [option.parse(v, "S") for v in ("true", "0", "Yes", "off", True)] == [
        True,
        False,
        True,
        False,
        True,
    ]
    with pytest.raises(
        ConfigurationError, match=r"create_bucket \('maybe'\) must be true or false"
    ):
        option.parse("maybe", "S")


@pytest.mark.parametrize(
    "url",
    [
        "postgres://u:pw@127.0.0.1:1/db",
        "postgresql://u@127.0.0.1:1/db",
        "postgres+psycopg://u@h/db",
    ],
)
def test_postgres_urls_without_a_driver_mean_psycopg(url):
    store = open_store(url)  # the engine connects lazily: nothing is reached here
    try:
        assert store.engine.url.drivername == "postgresql+psycopg"
    finally:
        store.close()


def test_a_missing_sql_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(
        ConfigurationError,
        match=r"driver for postgresql\+psycopg:// is missing \(psycopg\); pip install 'chat-memory\[postgres\]'",
    ):
        open_store("postgresql+psycopg://u@127.0.0.1:1/db")


# -- strategies -------------------------------------------------------------------------------


@pytest.fixture
def toy_strategy():
    """A third-party strategy: one module, nothing else edited. Defined in the fixture so that
    it is registered only while these tests run (other tests enumerate the strategies)."""

    class KeepOneTurn(Strategy):
        name = "toy_keep_one_turn"
        label = "Keep one turn (toy)"
        settings = ("max_events",)

        def plan(self, window):
            starts = turn_starts(window.active)
            return choose_cut(window.active, starts[-1]) if len(starts) > 1 else None

    yield KeepOneTurn
    del strategy_base._REGISTRY[KeepOneTurn.name]


def test_a_strategy_outside_the_package_is_selectable(toy_strategy):
    assert "toy_keep_one_turn" in strategy_names()
    memory = ChatMemory(
        open_store("memory://"), MemoryConfig(compactionStrategy="toy_keep_one_turn")
    )
    for i in range(3):
        memory.add("c", [Event.user(f"q{i}"), Event.assistant(f"a{i}")])
    assert [e.content for e in memory.window("c")] == ["q2", "a2"]
    assert memory.stats("c").archived_events == 4


def test_a_strategy_outside_the_package_gets_its_canvas_fields(toy_strategy):
    node = next(d for d in memory_definitions() if d.type == "inMemoryChatMemory/v2")
    strategy_field = node.field("compactionStrategy")
    assert "toy_keep_one_turn" in strategy_field.schema["enum"]
    assert strategy_field.extra_ui["options"]["toy_keep_one_turn"] == "Keep one turn (toy)"
    shown = node.visible_fields({"compactionStrategy": "toy_keep_one_turn"})
    assert "maxEvents" in shown and "maxTurns" not in shown and "maxArchivedEvents" in shown


def test_strategy_names_cannot_be_taken_twice():
    with pytest.raises(
        ConfigurationError,
        match="'turn_window' is taken by chat_memory.strategies.turn_window.TurnWindow",
    ):

        class Clash(Strategy):
            name = "turn_window"

            def plan(self, window) -> Cut | None:
                return None


def test_unknown_strategy_names_list_the_registered_ones():
    with pytest.raises(
        ConfigurationError,
        match=r"Compaction strategy \('fifo'\) must be one of 'none', 'sliding_window'",
    ):
        MemoryConfig(compaction_strategy="fifo")
