"""redact_url: credentials never shown, everything else kept as written; and the store errors
that echo a URL echo it redacted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat_memory import ConfigurationError, open_store
from chat_memory.backends.urls import redact_url


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql+psycopg://postgres:hunter2@h/db", "postgresql+psycopg://postgres:***@h/db"),
        ("redis://:secretpw@h", "redis://:***@h"),
        ("rediss://user:p%40ss@h:6380/0?prefix=cm", "rediss://user:***@h:6380/0?prefix=cm"),
        ("postgresql://u:pa/ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("mysql+pymysql://u:p@ss@h/db", "mysql+pymysql://u:***@h/db"),
        (
            "postgresql://u@h/db?password=hunter2&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (
            "s3://bucket/p?aws_secret_access_key=abc&aws_access_key_id=AK&region=eu-west-1",
            "s3://bucket/p?aws_secret_access_key=***&aws_access_key_id=***&region=eu-west-1",
        ),
        (
            "s3://b/p?X-Amz-Security-Token=t0k&endpoint_url=http://h:9000",
            "s3://b/p?X-Amz-Security-Token=***&endpoint_url=http://h:9000",
        ),
        # SQLAlchemy reads "#" as part of a query value: "x#frag" is the whole sslpassword
        (
            "redis://h?token=abc&api_key=k&sslpassword=x#frag",
            "redis://h?token=***&api_key=***&sslpassword=***",
        ),
        # nothing secret: unchanged, byte for byte
        (
            "sqlite:////home/me/.local/share/chat-memory/chat-memory.db",
            "sqlite:////home/me/.local/share/chat-memory/chat-memory.db",
        ),
        ("memory://", "memory://"),
        (
            "redis://user@h:6379/0?prefix=a&ttl_seconds=5",
            "redis://user@h:6379/0?prefix=a&ttl_seconds=5",
        ),
        ("redis://:@h", "redis://:@h"),
        ("s3://bucket/a:b@c", "s3://bucket/a:b@c"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


_PASSWORD = st.text(st.characters(codec="utf-8", exclude_characters="@?#"), min_size=1)


@given(user=st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), password=_PASSWORD)
def test_any_password_is_masked_and_the_rest_kept(user, password):
    url = f"postgresql+psycopg://{user}:{password}@db.example:5432/app?sslmode=require"
    assert redact_url(url) == f"postgresql+psycopg://{user}:***@db.example:5432/app?sslmode=require"


@given(value=st.text(st.characters(codec="utf-8", exclude_characters="&#"), min_size=1))
def test_any_secret_option_is_masked(value):
    assert redact_url(f"s3://bucket/p?region=x&aws_secret_access_key={value}") == (
        "s3://bucket/p?region=x&aws_secret_access_key=***"
    )


@pytest.mark.parametrize(
    "url",
    [
        "s3://u:hunter2@b/prefix",  # bucket 'b' too short
        "sqlite+nosuchdriver://u:hunter2@h/db",  # the driver's own complaint
        "redis://:hunter2@h?ttl_seconds=x",
        "redis://:hunter2@h?socket_timeout=nope",  # a driver option the driver refuses
    ],
)
def test_store_errors_do_not_echo_a_password(url):
    with pytest.raises(ConfigurationError) as info:
        open_store(url)
    assert "hunter2" not in str(info.value)
