"""The Redis stores' tuning settings are read where their methods live (redis_base,
redis_reads); set on redis_sansio, as docs once said, they still take effect there."""

from __future__ import annotations

import pytest

from chat_memory.backends import redis_base, redis_reads, redis_sansio


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("WINDOWS_KEPT", redis_base),
        ("REDIS_LAYOUT", redis_base),
        ("MIGRATION_LOCK_SECONDS", redis_base),
        ("SEARCH_CALL_MICROSECONDS", redis_reads),
        ("SEARCH_CHECK_BYTES", redis_reads),
        ("SEARCH_RESTARTS", redis_reads),
    ],
)
def test_a_setting_set_on_redis_sansio_is_set_where_it_is_read(monkeypatch, name, home):
    before = getattr(home, name)
    changed = before + 1 if isinstance(before, int) else f"{before}x"
    monkeypatch.setattr(redis_sansio, name, changed)
    assert getattr(home, name) == changed and getattr(redis_sansio, name) == changed
    monkeypatch.undo()
    assert getattr(home, name) == before and getattr(redis_sansio, name) == before


def test_other_names_are_set_on_redis_sansio_alone(monkeypatch):
    monkeypatch.setattr(redis_sansio, "DEFAULT_PREFIX", "other:")
    assert redis_base.DEFAULT_PREFIX == "chat-memory:"
