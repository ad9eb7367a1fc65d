"""The inspector over real HTTP (urllib against the server on a free loopback port), on SQLite
and Redis: every page renders the seeded conversation, the request page's JSON is the
library's own rendering, the token gate, read-only mode, CSRF and the same-origin rule."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest

from chat_memory import ConfigurationError, open_store
from chat_memory.host.cli import main
from chat_memory.inspector import serve
from tests.inspector.conftest import running
from tests.inspector.seed import APP, CONFIG, USER

TOKEN = "s3cret-token-for-tests-0123456789"


class Answer:
    def __init__(self, status: int, body: str, headers: dict[str, str]) -> None:
        self.status, self.body, self.headers = status, body, headers


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def fetch(
    url: str, data: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> Answer:
    body = None if data is None else urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request) as response:
            return Answer(response.status, response.read().decode(), dict(response.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read().decode(), dict(exc.headers))


def conv_query(seeded, **more: object) -> str:
    return urlencode({"id": seeded.conversation, "user": USER, "app": APP, **more})


def pages(seeded) -> dict[str, str]:
    scope = urlencode({"user": USER, "app": APP})
    return {
        "conversations": f"/?{scope}",
        "user search": f"/search/user?{scope}&q=bluefin",
        "conversation": f"/conversation?{conv_query(seeded)}",
        "older turns": f"/conversation?{conv_query(seeded, tpage=1)}",
        "request": f"/request?{conv_query(seeded)}",
        "request openai": f"/request?{conv_query(seeded, format='openai')}",
        "search": f"/search?{conv_query(seeded, q='bluefin', page=2)}",
        "compare": "/compare?"
        + urlencode({"a": seeded.conversation, "b": seeded.fork, "user": USER, "app": APP}),
        "memory": "/memory",
        "namespace": "/memory/namespace?ns=" + "~scope/support/alice/notes",
        "file": "/memory/file?"
        + urlencode({"ns": "~scope/support/alice/notes", "path": "/memories/customer.md"}),
    }


def test_every_page_renders_the_seeded_conversation(seeded, reader):
    for name, path in pages(seeded).items():
        answer = fetch(reader.url + path)
        assert answer.status == 200, (name, answer.body[:500])
        assert '<meta name="viewport"' in answer.body, name
    listing = fetch(reader.url + pages(seeded)["conversations"]).body
    assert seeded.conversation in listing and seeded.fork in listing
    assert 'class="error"' in listing  # the failing summarizer's conversation is flagged
    page = fetch(reader.url + pages(seeded)["conversation"]).body
    for mark in (
        "b-summary",
        "b-archived",
        "b-window",
        "b-retracted",
        "tool call + result",
        "<svg",
    ):
        assert mark in page, mark
    assert "recursive_summarization" in page  # a compaction record
    assert "Prefers email." in fetch(reader.url + pages(seeded)["file"]).body
    compare = fetch(reader.url + pages(seeded)["compare"]).body
    assert "Cancel it instead" in compare and "they part after that" in compare
    assert "Question 1:" not in compare  # the shared part is not repeated
    search = fetch(reader.url + pages(seeded)["search"]).body
    agent_sees = seeded.memory.search_tool(seeded.conversation)(
        {"keyword": "bluefin", "page": 2, "match_mode": "phrase"}
    )
    assert agent_sees.splitlines()[0] in search.replace("&quot;", '"').replace("&#x27;", "'")


def test_the_request_json_is_the_librarys_rendering(seeded, reader):
    answer = fetch(reader.url + f"/request?{conv_query(seeded, raw=1)}")
    system, messages = seeded.memory.to_anthropic(seeded.conversation)
    assert json.loads(answer.body) == {"system": system, "messages": messages}
    answer = fetch(reader.url + f"/request?{conv_query(seeded, format='openai', raw=1)}")
    assert json.loads(answer.body) == {"messages": seeded.memory.to_openai(seeded.conversation)}
    page = fetch(reader.url + f"/request?{conv_query(seeded)}").body
    assert page.count('class="badge b-stub"') >= 2  # the legend's and a compressed result's
    assert "[Output shortened" in page
    assert page.count("cache breakpoint") - 1 == json.dumps(messages).count("cache_control") + (
        json.dumps(system).count("cache_control")
    )


def test_every_page_references_only_its_own_origin(seeded, reader):
    for name, path in pages(seeded).items():
        body = fetch(reader.url + path).body
        for ref in re.findall(r'(?:href|src|action)="([^"]*)"', body):
            assert ref.startswith(("/", "#")) and not ref.startswith("//"), (name, ref)
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", ""), name
        assert "https://" not in body, name


def test_read_only_mode_has_no_write_actions(seeded, reader):
    for path in pages(seeded).values():
        body = fetch(reader.url + path).body
        assert 'method="post"' not in body and "/confirm" not in body
    assert fetch(reader.url + f"/confirm?{conv_query(seeded, action='forget')}").status == 403
    refused = fetch(
        reader.url + "/action",
        {"action": "forget", "id": seeded.conversation, "user": USER, "app": APP},
    )
    assert refused.status == 403
    assert seeded.memory.stats(seeded.conversation).version > 0


def test_writes_need_the_csrf_token_and_the_same_origin(fresh_seeded, writer):
    seeded = fresh_seeded
    confirm = fetch(writer.url + f"/confirm?{conv_query(seeded, action='compact')}").body
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm).group(1)
    form = {"action": "compact", "id": seeded.conversation, "user": USER, "app": APP}
    before = seeded.memory.stats(seeded.conversation)
    assert fetch(writer.url + "/action", form).status == 403
    assert fetch(writer.url + "/action", {**form, "csrf": "0" * 64}).status == 403
    other = {"Origin": "http://evil.example"}
    assert fetch(writer.url + "/action", {**form, "csrf": csrf}, other).status == 403
    cross = {"Sec-Fetch-Site": "cross-site"}
    assert fetch(writer.url + "/action", {**form, "csrf": csrf}, cross).status == 403
    assert seeded.memory.stats(seeded.conversation).version == before.version
    done = fetch(writer.url + "/action", {**form, "csrf": csrf}, {"Origin": writer.url})
    assert done.status == 200 and "archived" in done.body
    assert seeded.memory.stats(seeded.conversation).archived_events > before.archived_events


def test_restore_and_forget_in_write_mode(fresh_seeded, writer):
    seeded = fresh_seeded
    ns, path = "~scope/support/alice/notes", "/memories/customer.md"
    page = fetch(writer.url + "/memory/file?" + urlencode({"ns": ns, "path": path})).body
    assert "Restore this version" in page
    confirm = fetch(
        writer.url
        + "/confirm?"
        + urlencode({"action": "restore", "ns": ns, "path": path, "revision": 1})
    ).body
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm).group(1)
    restored = fetch(
        writer.url + "/action",
        {"action": "restore", "ns": ns, "path": path, "revision": "1", "csrf": csrf},
    )
    assert restored.status == 200, restored.body
    from chat_memory.longterm import long_term_memory

    assert (
        long_term_memory(seeded.store, "notes", user=USER, app=APP).read(path) == "Prefers email.\n"
    )
    form = {"action": "forget", "id": seeded.fork, "user": USER, "app": APP, "csrf": csrf}
    assert fetch(writer.url + "/action", form).status == 200
    assert seeded.memory.stats(seeded.fork).version == 0


def test_the_token_gate(seeded):
    server = next(running_gated := running(seeded, token=TOKEN))
    try:
        home = server.url + "/conversation?" + conv_query(seeded)
        refused = fetch(home)
        assert refused.status == 401 and TOKEN not in refused.body
        assert fetch(home + "&token=wrong-token-wrong-token").status == 401
        first = fetch(home + "&token=" + TOKEN)
        assert first.status == 303 and "token" not in first.headers["Location"]
        cookie = first.headers["Set-Cookie"].split(";")[0]
        assert TOKEN not in cookie and "HttpOnly" in first.headers["Set-Cookie"]
        assert fetch(home, headers={"Cookie": cookie}).status == 200
        assert fetch(home, headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
        assert fetch(home, headers={"Cookie": "chat_memory_ui=" + "0" * 64}).status == 401
    finally:
        running_gated.close()


def test_a_foreign_host_header_is_refused(seeded, reader):
    assert fetch(reader.url + "/", headers={"Host": "evil.example:80"}).status == 421


def test_a_non_loopback_bind_needs_a_token(tmp_path, capsys):
    store = open_store("memory://")
    with pytest.raises(ConfigurationError, match="0.0.0.0"):
        serve(store, CONFIG, host="0.0.0.0", port=0)
    with pytest.raises(ConfigurationError, match="at least 16"):
        serve(store, CONFIG, port=0, token="short")
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    assert main(["ui", "--url", url, "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "needs a token" in capsys.readouterr().err


def test_bad_input_is_refused_naming_the_field(seeded, reader):
    bad_page = fetch(reader.url + f"/conversation?{conv_query(seeded, tpage='²')}")
    assert bad_page.status == 400 and "tpage (&#x27;²&#x27;)" in bad_page.body
    bad_format = fetch(reader.url + f"/request?{conv_query(seeded, format='xml')}")
    assert bad_format.status == 400 and "format" in bad_format.body
    unknown = fetch(reader.url + "/conversation?" + urlencode({"id": "nope", "user": USER}))
    assert unknown.status == 404 and "nope" in unknown.body
    assert fetch(reader.url + "/no-such-page").status == 404
