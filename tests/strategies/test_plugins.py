"""Strategies from outside chat-memory: the "A strategy" section of docs/extending.md run as
written (one module defining a strategy with a setting of its own, installed with an entry
point, nothing edited inside chat-memory), and the registry rules around it: discovery of the
built-in modules, listing order, lazy and fault-tolerant plugin loading, and each setting
declared once."""

from __future__ import annotations

import logging
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

import chat_memory.strategies as strategies_package
from chat_memory import ChatMemory, ConfigurationError, Event, MemoryConfig, open_store
from chat_memory.components import memory_node, memory_settings
from chat_memory.events import Window
from chat_memory.strategies import Cut, Strategy, StrategySettings, registry, strategy_names
from tests.support.extending_doc import DOC, doc_section, install, named_blocks

STRATEGY_BLOCKS = named_blocks(doc_section("A strategy"))
PLUGIN = "acme_keep_newest_turns"


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The documented module and entry point, installed as ``pip install`` would."""
    install(
        tmp_path,
        "acme-strategy",
        "acme_strategy",
        STRATEGY_BLOCKS["acme_strategy.py"],
        STRATEGY_BLOCKS["pyproject.toml"],
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # as in a new process: the registry has not read the installed entry points yet
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield
    module = sys.modules.pop("acme_strategy", None)
    if module is not None:
        registry.unregister(module.KeepNewestTurns)


def test_the_document_shows_a_strategy_module_its_entry_point_and_a_session() -> None:
    assert {"acme_strategy.py", "pyproject.toml", "session.py"} <= set(STRATEGY_BLOCKS)
    assert "extra_settings = KeepNewestTurnsSettings" in STRATEGY_BLOCKS["acme_strategy.py"]


def test_a_third_party_strategy_with_a_new_setting_works_as_documented(
    acme_installed: None,
) -> None:
    assert "acme_strategy" not in sys.modules  # the session's first config loads it
    exec(compile(STRATEGY_BLOCKS["session.py"], f"{DOC}:session.py", "exec"), {})
    assert "acme_strategy" in sys.modules


def test_its_setting_is_validated_with_the_label_and_the_bounds(acme_installed: None) -> None:
    for value, message in [
        (51, "Turns to keep (51) must be greater than 0 and at most 50"),
        ("three", "Turns to keep ('three') must be a whole number"),
        (2.5, "Turns to keep (2.5) must be a whole number"),
    ]:
        with pytest.raises(ConfigurationError) as refused:
            MemoryConfig(compactionStrategy=PLUGIN, keepNewestTurns=value)
        assert str(refused.value) == message
    assert MemoryConfig(compaction_strategy=PLUGIN, keep_newest_turns=" 4 ").keep_newest_turns == 4
    with pytest.raises(
        ConfigurationError, match=r"Unknown setting 'keep_newest_turnz' \(value 3\)"
    ):
        MemoryConfig(compaction_strategy=PLUGIN, keep_newest_turnz=3)


def test_its_setting_with_another_strategy_is_validated_and_warned_about(
    acme_installed: None,
) -> None:
    with pytest.warns(UserWarning) as warned:
        config = MemoryConfig(compaction_strategy="turn_window", keep_newest_turns=3)
    assert [str(w.message) for w in warned] == [
        "keep_newest_turns (3) has no effect with compaction_strategy 'turn_window'; "
        f"set compaction_strategy={PLUGIN!r}"
    ]
    assert config.max_turns == 10
    with pytest.raises(ConfigurationError, match=r"^Turns to keep \(0\) must be greater than 0"):
        MemoryConfig(compaction_strategy="turn_window", keep_newest_turns=0)


def test_the_canvas_shows_its_setting_for_it_only_and_validates_it_the_same_way(
    acme_installed: None,
) -> None:
    node = memory_node("memory")
    spec = node.field("keepNewestTurns")
    assert spec is not None
    assert spec.schema == {"type": "integer", "minimum": 1, "maximum": 50, "default": 2}
    assert spec.show_if == {"compactionStrategy": [PLUGIN]}
    for strategy in strategy_names():
        shown = "keepNewestTurns" in node.visible_fields({"compactionStrategy": strategy})
        assert shown == (strategy == PLUGIN), strategy
    # it stands after the strategies' limits, before the connection fields move
    names = [f.name for f in sorted(node.fields, key=lambda f: f.order)]
    assert names.index("keepNewestTurns") == names.index("compactToRatio") + 1
    params = {"conversationId": "c", "compactionStrategy": PLUGIN, "keepNewestTurns": 4}
    assert memory_settings(node, params).config.keep_newest_turns == 4
    with pytest.raises(ConfigurationError) as refused:
        memory_settings(node, {**params, "keepNewestTurns": 0})
    assert str(refused.value) == "Turns to keep (0) must be greater than 0 and at most 50"
    # another strategy's node config does not carry the plugin's default along
    other = memory_settings(node, {"conversationId": "c", "compactionStrategy": "turn_window"})
    assert other.config == MemoryConfig(compaction_strategy="turn_window")


# -- the registry --------------------------------------------------------------------------


def test_every_module_of_the_package_that_defines_a_strategy_is_registered() -> None:
    names = strategy_names()  # the first look-up imports every module of the package
    defined = {
        value.name
        for module in pkgutil.iter_modules(strategies_package.__path__)
        for value in vars(sys.modules[f"chat_memory.strategies.{module.name}"]).values()
        if isinstance(value, type) and issubclass(value, Strategy) and "name" in vars(value)
    }
    assert defined <= set(names)
    assert names[:6] == [
        "none",
        "sliding_window",
        "turn_window",
        "token_count",
        "recursive_summarization",
        "auto_compact",
    ]


class _Nothing(Strategy):
    """Never compacts (a strategy for the registry tests only)."""

    def plan(self, window: Window) -> Cut | None:
        return None


@pytest.fixture
def defined() -> Iterator[list[type[Strategy]]]:
    """Strategies a test defines, unregistered afterwards (other tests list the strategies)."""
    classes: list[type[Strategy]] = []
    yield classes
    for cls in classes:
        registry.unregister(cls)


def test_order_places_a_strategy_in_the_list_and_ties_keep_registration_order(
    defined: list[type[Strategy]],
) -> None:
    early = type("Early", (_Nothing,), {"name": "test_early", "label": "Early", "order": 15})
    late = type("Late", (_Nothing,), {"name": "test_late", "label": "Late"})
    defined += [early, late]
    names = strategy_names()
    assert names.index("none") < names.index("test_early") < names.index("sliding_window")
    assert names[-1] == "test_late"
    assert memory_node("memory").field("compactionStrategy").schema["enum"] == names


def test_a_plugin_that_fails_to_import_is_logged_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    install(
        tmp_path,
        "broken-strategy",
        "broken_strategy",
        "raise RuntimeError('no luck')\n",
        '[project.entry-points."chat_memory.strategies"]\nbroken = "broken_strategy:Broken"\n',
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    with caplog.at_level(logging.WARNING, logger=registry.__name__):
        with pytest.raises(ConfigurationError, match=r"^Compaction strategy \('broken'\)"):
            MemoryConfig(compaction_strategy="broken")
    assert "'broken_strategy:Broken' could not be loaded: RuntimeError: no luck" in caplog.text
    assert MemoryConfig(compaction_strategy="turn_window").compaction_strategy == "turn_window"
    sys.modules.pop("broken_strategy", None)


class _Limit(StrategySettings):
    limit: int = Field(3, title="Limit", description="A limit.", gt=0)


def test_a_setting_is_declared_once(defined: list[type[Strategy]]) -> None:
    defined.append(
        type("Owner", (_Nothing,), {"name": "test_owner", "label": "O", "extra_settings": _Limit})
    )
    with pytest.raises(ConfigurationError, match=r"'limit' of .*Copy is already declared by"):
        type("Copy", (_Nothing,), {"name": "test_copy", "label": "C", "extra_settings": _Limit})
    # reading it is listing it: the canvas then shows it for both
    defined.append(
        type("Reader", (_Nothing,), {"name": "test_reader", "label": "R", "settings": ("limit",)})
    )
    spec = memory_node("memory").field("limit")
    assert spec is not None and spec.show_if == {
        "compactionStrategy": ["test_owner", "test_reader"]
    }
    assert MemoryConfig(compaction_strategy="test_owner", limit=5).limit == 5


def test_a_setting_without_a_default_is_refused_when_the_strategy_is_defined() -> None:
    class NoDefault(StrategySettings):
        size: int = Field(title="Size", gt=0)

    with pytest.raises(ConfigurationError, match=r"setting 'size' of .* needs a default"):
        type("Bare", (_Nothing,), {"name": "test_bare", "label": "B", "extra_settings": NoDefault})


def test_a_setting_memory_config_already_has_is_refused_naming_it(
    defined: list[type[Strategy]],
) -> None:
    class Again(StrategySettings):
        max_turns: int = Field(4, gt=0)

    defined.append(
        type("Twice", (_Nothing,), {"name": "test_again", "label": "A", "extra_settings": Again})
    )
    with pytest.raises(ConfigurationError, match=r"declares 'max_turns', which MemoryConfig"):
        MemoryConfig(compaction_strategy="test_again")


def test_the_chosen_strategy_checks_its_own_settings_with_the_others() -> None:
    # a strategy's check_config sees the config with its own settings filled in
    seen: list[MemoryConfig] = []

    class Checked(_Nothing):
        name = "test_checked"
        label = "Checked"
        extra_settings = _CheckedSettings

        @classmethod
        def check_config(cls, config: MemoryConfig) -> None:
            seen.append(config)
            if config.floor > config.max_events:
                raise ConfigurationError(
                    f"Floor ({config.floor}) must be at most max events ({config.max_events})"
                )

    try:
        assert MemoryConfig(compaction_strategy="test_checked").floor == 1 and seen
        with pytest.raises(ConfigurationError, match=r"^Floor \(30\) must be at most max events"):
            MemoryConfig(compaction_strategy="test_checked", floor=30)
        memory = ChatMemory(open_store("memory://"), {"compactionStrategy": "test_checked"})
        memory.add("c", Event.user("hello"))
    finally:
        registry.unregister(Checked)


class _CheckedSettings(StrategySettings):
    floor: int = Field(1, ge=1)
