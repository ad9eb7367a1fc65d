"""open_store, open_async_store and long_term_memory: what a store class declares for them
(its scheme, its async twin, its long-term memory), and the store protocol's shared
guarantees."""

from __future__ import annotations

import inspect
import logging

import pytest

from chat_memory import ConfigurationError, open_async_store, open_store
from chat_memory.backends import default_url, registry
from chat_memory.backends.aio import native_store_class
from chat_memory.backends.base import ChecksToolPairs, CompactsWhileAppending, Store
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.longterm import long_term_memory
from chat_memory.longterm.in_memory import InMemoryFiles


def test_memory_scheme():
    assert isinstance(open_store("memory://"), InMemoryStore)


@pytest.mark.parametrize("url", ["ftp://x", "nonsense", "mongodb://localhost"])
def test_unknown_schemes_are_named(url):
    with pytest.raises(ConfigurationError, match="scheme"):
        open_store(url)


def test_default_url_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAT_MEMORY_URL", "memory://")
    assert default_url() == "memory://"
    monkeypatch.delenv("CHAT_MEMORY_URL")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_url() == f"sqlite:///{tmp_path}/chat-memory/chat-memory.db"
    assert not (tmp_path / "chat-memory").exists()  # naming the store creates nothing


def test_every_backend_exposes_the_same_public_methods():
    import importlib

    public = {n for n, _ in inspect.getmembers(Store, inspect.isfunction) if not n.startswith("_")}
    for module_name, class_name in [
        ("chat_memory.backends.in_memory", "InMemoryStore"),
        ("chat_memory.backends.sql", "SQLStore"),
        ("chat_memory.backends.redis", "RedisStore"),
        ("chat_memory.backends.s3", "S3Store"),
    ]:
        cls = getattr(importlib.import_module(module_name), class_name)
        assert issubclass(cls, Store)
        assert not inspect.isabstract(cls), f"{class_name} leaves abstract methods"
        for name in public:
            # same parameters as the protocol (the error wrapper keeps the signature visible)
            ours = list(inspect.signature(getattr(cls, name)).parameters)
            protocol = list(inspect.signature(getattr(Store, name)).parameters)
            assert ours[: len(protocol)] == protocol, (
                f"{class_name}.{name}{ours} differs from Store.{name}{protocol}"
            )
        if issubclass(cls, CompactsWhileAppending):
            # a store that checks tool pairs inside its append takes the check as well
            check = ["check"] if issubclass(cls, ChecksToolPairs) else []
            assert list(inspect.signature(cls.append_compacting).parameters) == [
                *inspect.signature(CompactsWhileAppending.append_compacting).parameters,
                *check,
            ]


def test_the_async_twin_is_declared_on_the_sync_store():
    assert native_store_class("postgresql+psycopg").__name__ == "AsyncSQLStore"
    assert native_store_class("mysql") is None  # the twin serves the schemes it lists
    assert native_store_class("redis+cluster").__name__ == "AsyncRedisStore"
    assert native_store_class("memory") is None and native_store_class("nosuchscheme") is None


def test_a_bad_async_twin_declaration_is_named(caplog):
    class NotATwin(InMemoryStore):
        schemes = ("notatwin",)
        async_twin = "chat_memory.backends.in_memory:InMemoryStore"

    class DriverMissing(InMemoryStore):
        schemes = ("drivermissing",)
        async_twin = "no_such_module_for_chat_memory.aio:Twin"

    try:
        with pytest.raises(
            ConfigurationError,
            match=r"NotATwin.async_twin \(chat_memory.backends.in_memory:InMemoryStore\) must be "
            "an AsyncStore subclass",
        ):
            open_async_store("notatwin://")
        # the twin's module cannot be imported: threads, said in the log; insisting names it
        with caplog.at_level(logging.WARNING, logger="chat_memory.backends.aio"):
            assert not open_async_store("drivermissing://").native
        assert "no_such_module_for_chat_memory" in caplog.text
        with pytest.raises(
            ConfigurationError,
            match=r"async driver for drivermissing:// is missing \(no_such_module_for_chat_memory\)",
        ):
            open_async_store("drivermissing://", threads=False)
    finally:
        registry.unregister(NotATwin)
        registry.unregister(DriverMissing)


def test_long_term_memory_follows_the_store_class_declaration():
    class Subclass(InMemoryStore):
        pass

    assert type(long_term_memory(Subclass(), "ns")) is InMemoryFiles  # inherited

    class Forgetful(InMemoryStore):
        long_term = None

    class Misspelt(InMemoryStore):
        long_term = "chat_memory.longterm.in_memory.InMemoryFiles"

    class Missing(InMemoryStore):
        long_term = "chat_memory.longterm.in_memory:NoSuchFiles"

    with pytest.raises(
        ConfigurationError,
        match=r"store \(Forgetful\) has no long-term memory implementation; stores that have "
        r"one: .*InMemoryStore, .*RedisStore, S3Store, SQLStore",
    ):
        long_term_memory(Forgetful(), "ns")
    with pytest.raises(
        ConfigurationError,
        match=r"Misspelt.long_term \('chat_memory.longterm.in_memory.InMemoryFiles'\) must look "
        "like 'package.module:Class'",
    ):
        long_term_memory(Misspelt(), "ns")
    with pytest.raises(ConfigurationError, match="in_memory has no class NoSuchFiles"):
        long_term_memory(Missing(), "ns")
