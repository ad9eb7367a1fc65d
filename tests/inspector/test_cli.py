"""``chat-memory ui`` as a user starts it: the console command serves the store it is given
on a free loopback port, says where (and never the token), and answers over HTTP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request

from chat_memory import ChatMemory, Event, open_store

TOKEN = "a-token-of-the-cli-test-0123456789"


def test_chat_memory_ui_serves_the_store_it_is_given(tmp_path):
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    store = open_store(url)
    ChatMemory(store).add("support-42", [Event.user("Hi"), Event.assistant("Hello")])
    store.close()
    env = {**os.environ, "CHAT_MEMORY_UI_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "chat_memory.host.cli", "ui", "--url", url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = process.stdout.readline()
        second = process.stdout.readline()
        served = re.search(r"at (http://127\.0\.0\.1:\d+)/ \(read-only\)", first)
        assert served, first
        assert TOKEN not in first + second and "?token=" in second
        request = urllib.request.Request(
            served.group(1) + "/conversation?id=support-42",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(request) as response:
            assert response.status == 200 and "support-42" in response.read().decode()
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert TOKEN not in out + err
