"""Search the model cannot turn into a denial of service: the keyword's length and number of
words are capped (refused with a short message that quotes little of the keyword), every
keyword is matched where the store keeps the data (no store parses its whole history for one),
and a Redis search is many short script calls, so that another client of the same server is
answered within 100 ms while the worst allowed search runs over 20,000 events."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_memory import ChatMemory, Event, MemoryConfig
from chat_memory.backends import redis_io, redis_reads, redis_sansio
from chat_memory.backends.in_memory import InMemoryStore
from chat_memory.backends.redis import RedisStore
from chat_memory.errors import InvalidInputError, SearchError
from chat_memory.host.cli import main
from chat_memory.search import (
    MAX_KEYWORD_LENGTH,
    MAX_TERMS,
    MAX_TOOL_CALL_ID_LENGTH,
    QUOTED_CHARACTERS,
    SearchQuery,
)
from tests.reliability.test_hostile_input import SCALE
from tests.support.helpers import fixed_tokens

COMPACTING = MemoryConfig(compaction_strategy="turn_window", max_turns=2, compact_to_ratio=1.0)
WORDS = [f"w{i}" for i in range(MAX_TERMS + 1)]


def memory_on(store: Any, config: MemoryConfig = COMPACTING) -> ChatMemory:
    return ChatMemory(store, config, token_counter=fixed_tokens)


def refusal(call: Any) -> str:
    with pytest.raises(SearchError) as refused:
        call()
    return str(refused.value)


# -- the caps ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["phrase", "all", "any"])
def test_a_keyword_over_the_length_cap_is_refused_with_a_short_message_on_every_store(store, mode):
    memory = memory_on(store)
    memory.add("c", [Event.user("x" * 20_000), Event.assistant("ok")])
    keyword = "y" * 100_000
    message = refusal(lambda: memory.search("c", keyword, match_mode=mode))
    assert "keyword is 100,000 characters" in message and f"at most {MAX_KEYWORD_LENGTH}" in message
    assert "y" * (QUOTED_CHARACTERS + 1) not in message and len(message) < 160
    assert refusal(lambda: memory.search("c", "x" * (MAX_KEYWORD_LENGTH + 1))).startswith(
        "keyword is 501 characters"
    )


@pytest.mark.parametrize("mode", ["all", "any"])
def test_more_words_than_the_cap_are_refused_in_all_and_any_mode_on_every_store(store, mode):
    memory = memory_on(store)
    memory.add("c", [Event.user(" ".join(WORDS)), Event.assistant("ok")])
    message = refusal(lambda: memory.search("c", " ".join(WORDS), match_mode=mode))
    assert (
        f"keyword has {MAX_TERMS + 1} different words" in message
        and f"at most {MAX_TERMS}" in message
    )
    assert f"match_mode {mode!r}" in message and len(message) < 200
    # the cap counts different words, and a phrase is one term whatever its words
    assert memory.search("c", " ".join(WORDS[:MAX_TERMS] * 3), match_mode=mode).total == 1
    assert memory.search("c", " ".join(WORDS), match_mode="phrase").total == 1


def test_a_keyword_of_exactly_the_caps_is_searched_on_every_store(store):
    memory = memory_on(store)
    long_word = "ab" * (MAX_KEYWORD_LENGTH // 2)
    words = " ".join(f"t{i:02}" for i in range(MAX_TERMS))
    memory.add("c", [Event.user(f"<{long_word}>"), Event.assistant(words), Event.user("t07 only")])
    assert len(long_word) == MAX_KEYWORD_LENGTH
    assert [h.seq for h in memory.search("c", long_word.upper()).hits] == [1]
    assert [h.seq for h in memory.search("c", words, match_mode="all").hits] == [2]
    assert [h.seq for h in memory.search("c", words, match_mode="any").hits] == [2, 3]


def test_the_caps_hold_for_the_tool_and_the_command_line(capsys):
    memory = memory_on(InMemoryStore())
    memory.add("c", [Event.user("hello"), Event.assistant("ok")])
    answer = memory.search_tool("c")({"keyword": "z" * 129_000, "match_mode": "any"})
    assert (
        "at most 500" in answer
        and len(answer) < 300
        and "z" * (QUOTED_CHARACTERS + 1) not in answer
    )
    answer = memory.search_tool("c")({"keyword": " ".join(WORDS), "match_mode": "any"})
    assert f"at most {MAX_TERMS}" in answer and len(answer) < 300
    assert main(["--url", "memory://", "search", "q" * 5000]) == 2
    err = capsys.readouterr().err
    assert "keyword is 5,000 characters" in err and err.count("\n") == 1 and len(err) < 200


def test_messages_quote_few_characters_of_any_refused_value():
    huge_negative_page = -(10**5000)
    for call in (
        lambda: SearchQuery.build(" " * 50_000),
        lambda: SearchQuery.build("x", match_mode="m" * 50_000),
        lambda: SearchQuery.build("x", page=huge_negative_page),
        lambda: SearchQuery.build(["x"] * 50_000),
    ):
        message = refusal(call)
        assert len(message) < 120, message


def test_fetch_tool_result_refuses_an_id_over_the_cap_and_finds_one_at_the_cap(store):
    memory = memory_on(store)
    call_id = "c" * MAX_TOOL_CALL_ID_LENGTH
    call = Event.tool_call("lookup", {"q": 1}, call_id=call_id)
    memory.add(
        "c",
        [
            Event.user("go"),
            call,
            Event.tool_result(call_id, "the full output"),
            Event.assistant("done"),
        ],
    )
    for i in range(3):
        memory.add("c", [Event.user(f"later {i}"), Event.assistant("ok")])
    assert memory.fetch_tool_result("c", call_id).content == "the full output"
    with pytest.raises(InvalidInputError) as refused:
        memory.fetch_tool_result("c", call_id + "c" * 100_000)
    message = str(refused.value)
    assert (
        "tool_call_id is 101,024 characters" in message
        and "at most 1,024" in message
        and len(message) < 200
    )
    answer = memory.fetch_tool("c")({"tool_call_id": call_id * 50})  # what the model is shown
    assert "at most 1,024" in answer and len(answer) < 300


# -- matched in the store, never over the whole history in Python --------------------------------


@pytest.fixture
def parsed_events(monkeypatch):
    """How many events were parsed from stored text (every store parses with one of these)."""
    counts: Counter[str] = Counter()
    for name in ("from_json", "model_validate", "model_validate_json"):
        original = getattr(Event, name).__func__

        def counting(cls: type, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            counts["parsed"] += counts["depth"] == 0  # from_json calls model_validate_json
            counts["depth"] += 1
            try:
                return _original(cls, *args, **kwargs)
            finally:
                counts["depth"] -= 1

        monkeypatch.setattr(Event, name, classmethod(counting))
    return counts


ODD_KEYWORDS = [
    "\x00",
    "\ufffd",
    "a\x00b",
    "\ufffd\x00",
    "ß\x00",
    "SS\x00",
    "\ufffd" * MAX_KEYWORD_LENGTH,
]


@pytest.mark.parametrize(
    "keyword", ODD_KEYWORDS, ids=["nul", "fffd", "inner-nul", "both", "sharp-s", "ss", "long"]
)
def test_odd_keywords_are_matched_exactly_without_reading_the_history_on_every_store(
    store, keyword, parsed_events
):
    memory = memory_on(store)
    cid = f"odd-{uuid.uuid4().hex}"
    texts = ["a\x00b", "\ufffd", "\ufffd\x00", "ss\x00", "ß", "\ufffd" * MAX_KEYWORD_LENGTH]
    for i in range(60):
        memory.add(
            cid,
            [
                Event.user(f"plain {i}"),
                Event.assistant(texts[i % len(texts)] if i % 10 == 0 else "ok"),
            ],
        )
    reference = SearchQuery.build(keyword, page_size=3)
    expected = [
        e.seq
        for e in memory.history(cid)
        if e.type.value in ("user", "assistant") and reference.matches(e.content.casefold())
    ]
    window = len(memory.window(cid))
    parsed_events.clear()
    page = memory.search(cid, keyword, page_size=3)
    assert (page.total, [h.seq for h in page.hits]) == (len(expected), expected[:3])
    assert (
        parsed_events["parsed"] <= len(page.hits) + window
    )  # the page (and, on S3, the window's head)


def test_fetch_tool_result_reads_only_candidate_rows_on_sql_and_memory(store, parsed_events):
    if not any(kind in type(store).__name__ for kind in ("SQL", "InMemory")):
        pytest.skip(
            "Redis and S3 look a call up in the (capped) archive, as their find_tool_events does"
        )
    memory = memory_on(store)
    odd_id = "id-\ufffd-\x00-" + "é" * 900
    call = Event.tool_call("lookup", {}, call_id=odd_id)
    memory.add(
        "c", [Event.user("go"), call, Event.tool_result(odd_id, "found it"), Event.assistant("ok")]
    )
    for i in range(40):
        memory.add("c", [Event.user(f"later {i}"), Event.assistant("ok")])
    parsed_events.clear()
    assert memory.fetch_tool_result("c", odd_id).content == "found it"
    assert (
        parsed_events["parsed"] <= len(memory.window("c")) + 2
    )  # the window, the call and its result


ODD_ALPHABET = "aß SsẞS\x00\ufffd\x1f%_"


@settings(
    max_examples=15 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(st.text(alphabet=ODD_ALPHABET, max_size=8), min_size=1, max_size=8),
    keyword=st.text(alphabet=ODD_ALPHABET, min_size=1, max_size=4),
    mode=st.sampled_from(["phrase", "all", "any"]),
)
def test_nul_sharp_s_and_fffd_are_never_confused_on_every_store(store, texts, keyword, mode):
    cid = f"nul-{uuid.uuid4().hex}"
    tested, reference = memory_on(store), memory_on(InMemoryStore())
    for text in texts:
        for memory in (tested, reference):
            memory.add(cid, [Event.user(text), Event.assistant("ok")])
    try:
        expected = reference.search(cid, keyword, match_mode=mode, page_size=100)
    except SearchError:
        return
    got = tested.search(cid, keyword, match_mode=mode, page_size=100)
    assert (got.total, [h.seq for h in got.hits]) == (
        expected.total,
        [h.seq for h in expected.hits],
    )


@pytest.mark.parametrize(
    "url_name", ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
)
def test_sql_schema_3_rewrites_the_search_texts_that_version_2_wrote_with_u_fffd_for_nul(
    request, url_name
):
    import sqlalchemy as sa

    from chat_memory.backends.sql import SQLStore

    url = request.getfixturevalue(url_name)
    old = SQLStore.from_url(url)
    memory_on(old).add(
        "c",
        [
            Event.user("a\x00b"),
            Event.assistant("\ufffd"),
            Event.user("plain"),
            Event.assistant("SS\x00\ufffd"),
        ],
    )
    events, meta = old.tables.events, old.tables.meta
    with old.engine.begin() as connection:  # the rows as schema version 2 wrote them
        connection.execute(
            events.update().values(
                search_text=sa.func.replace(events.c.search_text, "\u00df", "\ufffd")
            )
        )
        connection.execute(meta.update().where(meta.c.name == "schema_version").values(value="2"))
    old.close()
    store = SQLStore.from_url(url)
    try:
        memory = memory_on(store)
        found = {
            keyword: [h.seq for h in memory.search("c", keyword).hits]
            for keyword in ("\x00", "\ufffd", "a\x00b", "ss\x00\ufffd")
        }
        assert found == {"\x00": [1, 4], "\ufffd": [2, 4], "a\x00b": [1], "ss\x00\ufffd": [4]}
        with store.engine.connect() as connection:
            recorded = dict(connection.execute(sa.select(meta.c.name, meta.c.value)).all())
        assert recorded["schema_version"] == "8" and "migrated_to_3" in recorded  # and on to 8
    finally:
        store.close()


# -- Redis: a search is many short script calls ---------------------------------------------------

REDIS_STORES = [
    "fakeredis_store",
    pytest.param("redis_store", marks=pytest.mark.redis),
    pytest.param("redis_cluster_store", marks=pytest.mark.redis_cluster),
]


class SearchCalls:
    """The search script calls a test saw, and what to do before each of the next ones."""

    def __init__(self) -> None:
        self.count = 0
        self.before_each: list[Any] = []  # one action per call, first call first


@pytest.fixture
def search_calls(monkeypatch):
    """Make every search script call stop at its first look at the clock (the smallest slices,
    so resuming is exercised at every event and every 8 KB of a long text)."""
    monkeypatch.setattr(redis_reads, "SEARCH_CALL_MICROSECONDS", 0)
    monkeypatch.setattr(redis_reads, "SEARCH_CHECK_BYTES", 1)
    calls = SearchCalls()
    original = redis_io.run_script

    def observed(client: Any, script: Any, keys: Any, args: Any) -> Any:
        if script is redis_sansio.lua("search"):
            calls.count += 1
            if calls.before_each:
                calls.before_each.pop(0)()
        return original(client, script, keys, args)

    monkeypatch.setattr(redis_io, "run_script", observed)
    return calls


def long_history(memory: ChatMemory, cid: str) -> None:
    # matches at slice boundaries (8 KB) of long texts, in the archive and in the window
    for start in (1, 8191, 8192, 8193, 16385):
        memory.add(
            cid,
            [
                Event.user("x" * (start - 1) + "needle " + "y" * 20_000),
                Event.assistant(f"reply {start} needle"),
            ],
        )
    for i in range(6):
        memory.add(cid, [Event.user(f"short {i}"), Event.assistant("needle" if i % 2 else "hay")])


@pytest.mark.parametrize("store_name", REDIS_STORES)
@pytest.mark.parametrize(
    "keyword,mode",
    [
        ("needle", "phrase"),
        ("yyyy needle", "all"),
        ("zzz hay needle", "any"),
        ("xneedle", "phrase"),
    ],
)
def test_a_search_resumed_at_every_step_finds_what_one_pass_finds(
    request, store_name, search_calls, keyword, mode
):
    memory = memory_on(request.getfixturevalue(store_name))
    reference = memory_on(InMemoryStore())
    for target in (memory, reference):
        long_history(target, "c")
    for page in range(3):
        search_calls.count = 0
        got = memory.search("c", keyword, match_mode=mode, page=page, page_size=3)
        expected = reference.search("c", keyword, match_mode=mode, page=page, page_size=3)
        shown = [(h.seq, h.content, h.archived) for h in got.hits]
        assert (got.total, shown) == (
            expected.total,
            [(h.seq, h.content, h.archived) for h in expected.hits],
        )
        assert search_calls.count > len(memory.history("c"))  # many calls, not one


@pytest.mark.parametrize("store_name", REDIS_STORES)
def test_a_search_stays_exact_when_compaction_and_appends_run_between_its_calls(
    request, store_name, search_calls
):
    store = request.getfixturevalue(store_name)
    memory = ChatMemory(
        store, MemoryConfig(), token_counter=fixed_tokens
    )  # compacted only when asked
    for i in range(12):
        memory.add("c", [Event.user(f"needle {i}"), Event.assistant("hay")])
    before = [(h.seq, h.content) for h in memory.search("c", "needle", page_size=100).hits]
    compacting = ChatMemory(
        store,
        MemoryConfig(compaction_strategy="turn_window", max_turns=1, compact_to_ratio=1.0),
        token_counter=fixed_tokens,
    )
    # the calls of this search after the first each see another append and compaction first
    search_calls.before_each = [lambda: None] + [
        lambda i=i: compacting.add("c", [Event.user(f"needle late {i}"), Event.assistant("hay")])
        for i in range(8)
    ]
    page = memory.search("c", "needle", page_size=100)
    assert not search_calls.before_each and memory.stats("c").archived_events > 0
    assert [(h.seq, h.content) for h in page.hits] == before and page.total == len(before)
    assert memory.search("c", "needle", page_size=100).total == len(before) + 8


@pytest.mark.parametrize("store_name", REDIS_STORES)
def test_a_search_starts_over_when_its_conversation_is_cleared_under_it(
    request, store_name, search_calls
):
    memory = memory_on(request.getfixturevalue(store_name))
    for i in range(10):
        memory.add("c", [Event.user(f"old needle {i}"), Event.assistant("hay")])

    def replace_conversation() -> None:
        memory.clear("c")
        memory.add("c", [Event.user("new needle"), Event.assistant("hay")])

    search_calls.before_each = [lambda: None, lambda: None, replace_conversation]
    page = memory.search("c", "needle")
    assert [h.content for h in page.hits] == ["new needle"] and page.total == 1


# -- Redis: another client is answered within 100 ms while the worst allowed search runs ---------

#: A separate process (not a thread of this one: the GIL would stall it while this process
#: parses replies) that PINGs every port given until told to stop on stdin, then prints how
#: many PINGs it sent and the slowest answer, in seconds.
PINGER = """
import select, socket, sys, time
sockets = [socket.create_connection(("127.0.0.1", int(port))) for port in sys.argv[1:]]
print("ready", flush=True)
waits = []
while not select.select([sys.stdin], [], [], 0.002)[0]:
    for sock in sockets:
        started = time.perf_counter()
        sock.sendall(b"PING\\r\\n")
        assert sock.recv(16) == b"+PONG\\r\\n"
        waits.append(time.perf_counter() - started)
waits.sort()
print(len(waits), waits[len(waits) * 9 // 10], waits[-1], flush=True)
"""
HISTORY_EVENTS = 20_000


def worst_allowed_keyword() -> str:
    # MAX_TERMS words that are never found (so every word is tried on every text), each
    # starting with the text's most frequent letter (so Lua's find stops most often)
    words = ["e" + "qzjx" * 8 for _ in range(MAX_TERMS)]
    words = [f"{word[: 29 - len(str(i))]}{i}" for i, word in enumerate(words)]
    words[-1] += "v" * (MAX_KEYWORD_LENGTH - len(" ".join(words)))
    return " ".join(words)


def fill(memory: ChatMemory, cid: str, needle: str) -> None:
    rng = __import__("random").Random(7)
    letters = "etaoinshrdlucmfwypvbgk"

    def text(words: int) -> str:
        return " ".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(words)
        )

    batch: list[Event] = []
    for i in range(HISTORY_EVENTS // 2):
        batch += [Event.user(text(20)), Event.assistant(needle if i == 7000 else text(120))]
        if len(batch) == 1000:
            memory.add(cid, batch)
            batch = []
    # two long tool outputs: each is matched 8 KB at a time, never in one step
    call = Event.tool_call("fetch_page", {"url": "https://example.com"}, call_id="page")
    memory.add(
        cid,
        [
            Event.user("read it"),
            call,
            Event.tool_result("page", text(170_000)),
            Event.assistant(text(900_000 // 6)),
        ],
    )


def check_search_never_blocks(
    memory: ChatMemory, admin_clients: list[Any], ports: list[int]
) -> None:
    import subprocess
    import sys
    import time

    keyword = worst_allowed_keyword()
    assert len(keyword) == MAX_KEYWORD_LENGTH and len(set(keyword.split())) == MAX_TERMS
    sha = redis_sansio.lua("search").sha.encode()
    saved = [client.config_get("slowlog-*") for client in admin_clients]
    for client in admin_clients:
        client.config_set(
            "slowlog-log-slower-than", 0
        )  # log every command, with its duration in µs
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()
    pinger = subprocess.Popen(
        [sys.executable, "-c", PINGER, *map(str, ports)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert pinger.stdout.readline().strip() == "ready"
        # searched again and again for a second, so that the pinger has run meanwhile however
        # the machine schedules it
        pages, started = [], time.monotonic()
        while len(pages) < 2 or time.monotonic() - started < 1.0:
            pages.append(memory.search("c", keyword, match_mode="any"))
        out, _ = pinger.communicate("stop\n", timeout=60)
        durations = [
            e["duration"]
            for client in admin_clients
            for e in client.slowlog_get(100_000)
            if sha in e["command"]
        ]
    finally:
        if pinger.poll() is None:
            pinger.kill()
        for client, config in zip(admin_clients, saved):
            for name, value in config.items():
                client.config_set(name, value)
    assert all(
        page.total == 1 and page.hits[0].content.endswith(keyword.split()[-1]) for page in pages
    )
    pings, ping_p90, worst_ping = int(out.split()[0]), float(out.split()[1]), float(out.split()[2])
    # Each call stops after 5 ms of server time (SEARCH_CALL_MICROSECONDS) plus at most one
    # step (an 8 KB slice against the pending terms, about 1 ms at worst): the design bound
    # is about 6 ms. What is asserted is the 90th percentile, not the maximum: on a loaded
    # 2-core machine the kernel may preempt redis-server in the middle of any one call (or
    # the pinger between send and receive) for tens of milliseconds, which says nothing about
    # the script; a search that did not split its work would make most calls, and most pings
    # taken during them, as slow as the whole search (hundreds of milliseconds).
    durations.sort()
    call_p90 = durations[len(durations) * 9 // 10]
    assert len(durations) >= 10 * len(pages), "each search ran as many short calls"
    assert call_p90 < 20_000, f"90% of search calls under {call_p90} µs (slowest {durations[-1]})"
    assert pings >= 20, "the pinger ran during the searches"
    assert ping_p90 < 0.05, (
        f"90% of PINGs under {ping_p90 * 1000:.1f} ms (slowest {worst_ping * 1000:.1f} ms)"
    )


@pytest.mark.redis
@pytest.mark.slow
def test_pings_are_answered_promptly_while_the_worst_allowed_search_runs_on_redis():
    import redis

    from tests.services.redis import start_redis

    server = start_redis()
    try:
        store = RedisStore.from_url(f"{server.url}?max_archived_events=")
        memory = memory_on(store)
        fill(memory, "c", "the one match: " + worst_allowed_keyword().split()[-1])
        assert memory.stats("c").archived_events >= HISTORY_EVENTS - 10
        check_search_never_blocks(memory, [redis.Redis(port=server.port)], [server.port])
        store.close()
    finally:
        server.stop()


@pytest.mark.redis_cluster
@pytest.mark.slow
def test_pings_are_answered_promptly_while_the_worst_allowed_search_runs_on_a_redis_cluster(
    redis_cluster_url, redis_cluster
):
    import redis

    store = RedisStore.from_url(f"{redis_cluster_url}&max_archived_events=")
    memory = memory_on(store)
    fill(memory, "c", "the one match: " + worst_allowed_keyword().split()[-1])
    nodes = [node.port for node in redis_cluster.nodes]
    try:
        check_search_never_blocks(memory, [redis.Redis(port=port) for port in nodes], nodes)
    finally:
        memory.clear("c")
        store.close()
