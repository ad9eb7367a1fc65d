"""Secrets never shown: the URL redaction reads passwords as the drivers do (unencoded ``#``,
``?``, ``@``, ``%``, ``/``, ``:`` included); the command line on a real PostgreSQL with such a
password shows it nowhere, failing commands and DEBUG logs included; store reprs; S3
endpoint credentials kept out of errors, chained exceptions and botocore's DEBUG logs."""

from __future__ import annotations

import io
import logging
import sys
import traceback
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from hypothesis import assume, given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from chat_memory import ChatMemory, ChatMemoryError, Event, open_store
from chat_memory.backends.sql import SQLStore
from chat_memory.backends.urls import MASK, redact_message, redact_url, strip_userinfo, url_secrets
from chat_memory.host.cli import main

# every printable character, the ones drivers split URLs at among them
PASSWORDS = st.text(
    st.one_of(
        st.sampled_from("#?@%/:&=+;[] ~!$'()*,"),
        st.characters(codec="utf-8", categories=("L", "N", "P", "S")),
    ),
    min_size=1,
    max_size=24,
)
USERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
TAIL = "db.example:5432/app?sslmode=require"


class Everything(logging.Handler):
    """Every record of every logger, formatted (arguments included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def all_logs() -> Iterator[Everything]:
    """The root logger at DEBUG, everything captured (restored afterwards)."""
    root, handler = logging.getLogger(), Everything()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def chain(exc: BaseException) -> str:
    """The whole traceback as Python prints it, every chained exception included."""
    return "".join(traceback.format_exception(exc))


# -- the redaction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme", ["postgresql+psycopg", "mysql+pymysql", "redis", "rediss", "redis+cluster", "http"]
)
@given(user=USERS, password=PASSWORDS)
def test_any_password_is_masked_whole_and_the_rest_kept(scheme, user, password):
    assert redact_url(f"{scheme}://{user}:{password}@{TAIL}") == f"{scheme}://{user}:{MASK}@{TAIL}"
    assert redact_url(f"{scheme}://:{password}@{TAIL}") == f"{scheme}://:{MASK}@{TAIL}"


@given(user=USERS, password=PASSWORDS.filter(lambda p: "@" not in p))
def test_the_mask_covers_the_password_sqlalchemy_connects_with(user, password):
    url = f"postgresql+psycopg://{user}:{password}@{TAIL}"
    parsed = make_url(url)
    assert (parsed.username, parsed.host, parsed.port) == (user, "db.example", 5432)
    assert (
        parsed.password is not None
        and redact_url(url) == f"postgresql+psycopg://{user}:{MASK}@{TAIL}"
    )


@given(key=USERS, password=PASSWORDS.filter(lambda p: "&" not in p))
def test_an_s3_endpoint_with_credentials_is_masked_inside_the_store_url(key, password):
    url = f"s3://bucket/prefix?region=x&endpoint_url=http://{key}:{password}@127.0.0.1:9000"
    assert (
        redact_url(url)
        == f"s3://bucket/prefix?region=x&endpoint_url=http://{key}:{MASK}@127.0.0.1:9000"
    )
    assert strip_userinfo(f"http://{key}:{password}@127.0.0.1:9000") == (
        "http://127.0.0.1:9000",
        key,
        password,
    )


@given(
    value=PASSWORDS.filter(lambda p: "&" not in p),
    name=st.sampled_from(
        [
            "password",
            "PASSWORD",
            "passwd",
            "pwd",
            "sslpassword",
            "secret",
            "client_secret",
            "token",
            "aws_secret_access_key",
            "aws_session_token",
            "access_key",
            "api_key",
            "X-Amz-Security-Token",
        ]
    ),
)
def test_secret_query_options_are_masked_to_the_next_ampersand(value, name):
    url = f"postgresql+psycopg://u@h/db?sslmode=require&{name}={value}&application_name=app"
    assert (
        redact_url(url)
        == f"postgresql+psycopg://u@h/db?sslmode=require&{name}={MASK}&application_name=app"
    )


@given(password=PASSWORDS.filter(lambda p: len(p) >= 3 and "*" not in p))
def test_a_message_never_shows_a_password_or_a_piece_a_driver_cut_it_into(password):
    url = f"redis://:{password}@cache:6379/0"
    message = f"connecting to {url} failed: server said {password!s} is wrong"
    assume(password not in message.replace(password, ""))
    redacted = redact_message(message, [url])
    assert password not in redacted and "cache:6379/0" in redacted
    for piece in url_secrets(url):
        assert piece not in redacted


def test_malformed_urls_mask_everything_between_the_scheme_and_the_last_at():
    assert redact_url("postgresql://u:pw@h:notaport/db") == f"postgresql://{MASK}@h:notaport/db"


# -- the command line on PostgreSQL with a password full of URL syntax ------------------------

PG_PASSWORD = "Real#Pass?1%/x:y"
PG_PIECES = ["Real#Pass?1%/x:y", "Real", "Pass"]


@pytest.fixture
def secret_pg_url(postgres_server) -> Iterator[str]:
    """A role with a password holding # ? % / : (trust auth: the server takes any password,
    so the commands work and only what they show is under test)."""
    role = f"cm_secret_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_server.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        # DDL takes no bound parameters; "%%" is the driver's escape for "%"
        connection.exec_driver_sql(
            f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{PG_PASSWORD.replace('%', '%%')}'"
        )
    url = f"postgresql+psycopg://{role}:{PG_PASSWORD}@127.0.0.1:{postgres_server.port}/postgres?table_prefix=t{role}_"
    yield url
    with admin.connect() as connection:
        connection.exec_driver_sql(f"DROP OWNED BY {role}")
        connection.exec_driver_sql(f"DROP ROLE {role}")
    admin.dispose()


def run_cli(argv: list[str], capsys, stdin: str = "") -> tuple[int, str]:
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(argv)
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, out + err


def assert_no_secret(text: str) -> None:
    for piece in PG_PIECES:
        assert piece not in text, (piece, text)


@pytest.mark.postgres
def test_no_command_shows_the_password(secret_pg_url, capsys, all_logs):
    with open_store(secret_pg_url) as store:
        assert store.tables.prefix.startswith(
            "tcm_secret_"
        )  # table_prefix read past the "?" in the password
        ChatMemory(store).add(
            "conv", [Event.user("the deploy key is K-7781"), Event.assistant("noted")]
        )
    commands = [
        ["list"],
        ["list", "--json"],
        ["stats", "-c", "conv"],
        ["stats", "-c", "conv", "--json"],
        ["history", "-c", "conv"],
        ["window", "-c", "conv"],
        ["search", "deploy", "-c", "conv"],
        ["compact", "-c", "conv", "--strategy", "turn_window", "--max-turns", "1"],
    ]
    for command in commands:
        code, shown = run_cli(["--url", secret_pg_url, *command], capsys)
        assert code == 0, shown
        assert_no_secret(shown)
    code, shown = run_cli(
        ["--url", secret_pg_url, "chat", "-c", "conv", "--scripted"], capsys, stdin="hello\n/quit\n"
    )
    assert code == 0 and ":***@127.0.0.1" in shown
    assert_no_secret(shown)
    assert_no_secret(all_logs.text)


@pytest.mark.postgres
def test_failing_commands_do_not_show_the_password(
    secret_pg_url, postgres_server, capsys, all_logs
):
    port = str(postgres_server.port)
    failing = [
        (secret_pg_url, ["history", "-c", "nobody"]),  # unknown conversation
        (
            secret_pg_url.replace(f":{port}/", ":1/"),
            ["stats", "-c", "conv"],
        ),  # nothing listens there
        (secret_pg_url.replace("/postgres?", "/no_such_db?"), ["list"]),
        (
            secret_pg_url.replace("?table_prefix=", "?connect_timeout=x&table_prefix="),
            ["list"],
        ),  # the driver refuses
        (
            secret_pg_url.replace("Pass?1", "Pa@ss?1"),
            ["list"],
        ),  # an "@": SQLAlchemy reads host "ss?1%/x:y@127…"
        (secret_pg_url.replace("postgresql+psycopg", "postgresql+nosuchdriver"), ["list"]),
    ]
    for url, command in failing:
        code, shown = run_cli(["--url", url, *command], capsys)
        assert code in (1, 2) and "chat-memory: error: " in shown, shown
        assert_no_secret(shown)
        assert "Pa@ss" not in shown and "ss?1" not in shown
    assert_no_secret(all_logs.text)


def test_a_password_cut_by_redis_py_is_not_shown_in_the_error():
    # redis-py's urllib parsing ends the host at "#" and complains about the piece before it
    url = "redis://:Real#Pass?1@127.0.0.1:6379/0"
    with pytest.raises(ChatMemoryError) as info:
        open_store(url)
    assert "Real" not in chain(info.value) and "Pass" not in chain(info.value)
    assert "percent-encoded" in str(info.value)


# -- reprs ---------------------------------------------------------------------------------------


def test_sql_store_and_engine_reprs_show_no_password_nor_secret_option():
    url = f"postgresql+psycopg://u:{PG_PASSWORD}@127.0.0.1:1/db?password=OptSecret1&sslpassword=KeySecret2&table_prefix=t_"
    store = SQLStore.from_url(url)  # builds the engine; connects only when used
    shown = " ".join(
        [repr(store), repr(store.engine), repr(store.engine.url), str(store.engine.url)]
    )
    assert "OptSecret1" not in shown and "KeySecret2" not in shown
    assert_no_secret(shown)
    assert repr(store) == "SQLStore(postgresql+psycopg://u:***@127.0.0.1:1/db, table_prefix='t_')"
    store.close()


@pytest.mark.postgres
def test_secret_query_options_still_reach_the_driver(postgres_server):
    store = SQLStore.from_url(
        f"{postgres_server.url}?password=OptSecret1&table_prefix=t{uuid.uuid4().hex[:8]}_"
    )
    given: dict = {}
    sa.event.listen(
        store.engine, "do_connect", lambda dialect, record, cargs, cparams: given.update(cparams)
    )
    try:
        assert store.load("c").version == 0  # connects (trust auth takes the password)
    finally:
        store.close()
    assert given["password"] == "OptSecret1" and "OptSecret1" not in repr(store.engine)


def test_async_sql_store_repr_shows_no_password_nor_secret_option():
    from chat_memory.backends.sql.aio import AsyncSQLStore

    store = AsyncSQLStore.from_url(
        f"postgresql://u:{PG_PASSWORD}@127.0.0.1:1/db?password=OptSecret1&table_prefix=t_"
    )
    shown = repr(store) + repr(store.engine.sync_engine) + repr(store.engine.url)
    assert "OptSecret1" not in shown and repr(store).startswith(
        "AsyncSQLStore(postgresql+psycopg://u:***@127.0.0.1:1/db"
    )
    assert_no_secret(shown)


def test_a_caller_engine_with_a_query_password_is_shown_masked():
    engine = sa.create_engine("postgresql+psycopg://u@127.0.0.1:1/db?password=OptSecret1")
    assert "OptSecret1" in repr(engine)  # SQLAlchemy's own repr shows it...
    assert "OptSecret1" not in repr(SQLStore(engine))  # ...ours does not


@pytest.mark.redis
def test_redis_store_repr_shows_no_password(redis_url):
    url = redis_url.replace("redis://", "redis://:S3cret%23Value@", 1)
    store = open_store(url)
    try:
        assert "S3cret" not in repr(store) and "S3cret" not in repr(store.client)
    finally:
        store.close()


# -- S3 endpoint credentials --------------------------------------------------------------------

S3_SECRET = "Sup3r%23Secret"  # percent-encoded "#": the endpoint sits in the s3:// URL's query


def s3_url(endpoint: str, prefix: str) -> str:
    host = endpoint.split("://", 1)[1]
    return f"s3://chat-memory-secrets/{prefix}?endpoint_url=http://AKIDTEST:{S3_SECRET}@{host}&region=us-east-1&max_attempts=1"


@pytest.mark.s3
def test_endpoint_credentials_sign_the_requests_and_are_never_shown(moto_server, all_logs):
    store = open_store(s3_url(moto_server, uuid.uuid4().hex[:8]))
    try:
        credentials = store.client._request_signer._credentials
        assert (credentials.access_key, credentials.secret_key) == ("AKIDTEST", "Sup3r#Secret")
        assert store.client.meta.endpoint_url == moto_server
        memory = ChatMemory(store)
        memory.add("c", [Event.user("hi"), Event.assistant("hello")])
        assert [e.content for e in memory.window("c")] == ["hi", "hello"]
    finally:
        store.close()
    assert "botocore" in all_logs.text  # botocore did log at DEBUG...
    assert "Sup3r" not in all_logs.text  # ...never the secret


@pytest.mark.s3
def test_an_unreachable_endpoint_with_credentials_is_an_error_without_them(aws_env, all_logs):
    url = s3_url("http://127.0.0.1:1", "p")
    with pytest.raises(ChatMemoryError) as info:
        open_store(url)
    assert "127.0.0.1:1" in str(info.value)
    assert "Sup3r" not in chain(info.value) and "Sup3r" not in all_logs.text


def test_an_endpoint_with_a_key_id_but_no_secret_is_refused():
    with pytest.raises(ChatMemoryError, match="both the access key id and the secret"):
        open_store("s3://chat-memory-secrets/p?endpoint_url=http://AKIDONLY@127.0.0.1:1")
