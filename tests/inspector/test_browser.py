"""The inspector in headless Chromium (Playwright driving the system's Chromium: Debian's
``chromium``, never a downloaded browser), on SQLite and Redis, over a seeded 500-turn
conversation: every page renders at 1280x800 and on a phone without horizontal scrolling, no
request leaves the machine, the keyboard reaches the links, and the request page's JSON is
``to_anthropic``'s. Without Chromium or Playwright the tests skip, except on CI (CI=true),
where they fail."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

import pytest

from tests.inspector.conftest import STORES, running, seeded_on
from tests.inspector.seed import APP, USER, Seeded

VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def _chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    missing = None
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        missing = f"no Chromium at {path} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install playwright)"
    if missing is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser tests must run on CI: {missing}")
        pytest.skip(missing)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module", params=STORES)
def long_seeded(request, tmp_path_factory) -> Iterator[Seeded]:
    """500 turns, added 50 turns a batch, seeded once for the module's tests on each store."""
    yield from seeded_on(request, tmp_path_factory.mktemp("inspector"), 500, 50)


def _pages(seeded: Seeded) -> dict[str, str]:
    conv = {"id": seeded.conversation, "user": USER, "app": APP}
    return {
        "conversations": "/?" + urlencode({"user": USER, "app": APP}),
        "conversation": "/conversation?" + urlencode(conv),
        "request": "/request?" + urlencode(conv),
        "search": "/search?" + urlencode({**conv, "q": "bluefin-499"}),
        "memory": "/memory/file?"
        + urlencode({"ns": "~scope/support/alice/notes", "path": "/memories/customer.md"}),
        "compare": "/compare?"
        + urlencode({"a": seeded.conversation, "b": seeded.fork, "user": USER, "app": APP}),
    }


def test_every_page_renders_offline_on_desktop_and_phone(browser, long_seeded):
    for server in running(long_seeded):
        outside: list[str] = []
        origin = urlsplit(server.url).netloc
        for name, size in VIEWPORTS.items():
            page = browser.new_page(viewport=size)

            def guard(route, request):  # every request is routed: only the server's own pass
                if urlsplit(request.url).netloc == origin:
                    route.continue_()
                else:
                    outside.append(request.url)
                    route.abort()

            page.route("**/*", guard)
            for label, path in _pages(long_seeded).items():
                response = page.goto(server.url + path)
                assert response is not None and response.status == 200, (name, label)
                assert page.locator("h1").first.is_visible(), (name, label)
                overflow = page.evaluate(
                    "() => document.documentElement.scrollWidth - window.innerWidth"
                )
                assert overflow <= 1, (name, label, overflow)
            page.goto(server.url + _pages(long_seeded)["conversation"])
            assert page.locator("svg.chart rect").count() > 10
            assert page.get_by_text("Answer (edited): order 4512 is out for delivery.").count() == 1
            page.close()
        assert outside == []


def test_the_request_json_in_the_browser_is_to_anthropics(browser, long_seeded):
    for server in running(long_seeded):
        page = browser.new_page()
        conv = {"id": long_seeded.conversation, "user": USER, "app": APP, "raw": 1}
        response = page.goto(server.url + "/request?" + urlencode(conv))
        system, messages = long_seeded.memory.to_anthropic(long_seeded.conversation)
        assert response is not None and response.json() == {"system": system, "messages": messages}
        page.close()


def test_the_keyboard_reaches_the_links(browser, long_seeded):
    for server in running(long_seeded):
        page = browser.new_page(viewport=VIEWPORTS["desktop"])
        page.goto(server.url + _pages(long_seeded)["conversation"])
        reached: list[str] = []
        for _ in range(12):
            page.keyboard.press("Tab")
            focused = page.evaluate(
                "() => { const e = document.activeElement;"
                " return [e.textContent.trim(), getComputedStyle(e).outlineStyle]; }"
            )
            reached.append(focused[0])
            assert focused[1] != "none", focused  # a visible focus ring
            if focused[0] == "Request (Anthropic)":
                break
        assert "Conversations" in reached and reached[-1] == "Request (Anthropic)", reached
        page.keyboard.press("Enter")
        page.wait_for_url("**/request?**")
        assert "Request for" in page.locator("h1").inner_text()
        page.close()
