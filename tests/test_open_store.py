"""open_store and the store protocol's shared guarantees."""

from __future__ import annotations

import inspect

import pytest

from chat_memory import ConfigurationError, StorageError, open_store
from chat_memory.backends import default_url
from chat_memory.backends.base import CompactsWhileAppending, Store
from chat_memory.backends.in_memory import InMemoryStore


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


def test_driver_errors_become_storage_errors():
    class Broken(InMemoryStore):
        def load(self, conversation_id):
            raise OSError("disk on fire")

    with pytest.raises(StorageError, match="disk on fire") as info:
        Broken().load("c")
    assert isinstance(info.value.__cause__, OSError)


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
            assert list(inspect.signature(cls.append_compacting).parameters) == list(
                inspect.signature(CompactsWhileAppending.append_compacting).parameters
            )
