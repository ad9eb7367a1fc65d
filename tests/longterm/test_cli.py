"""``chat-memory memory list|show|versions|delete``."""

from __future__ import annotations

from chat_memory.host.cli import main
from chat_memory.longterm import long_term_memory


def test_list_show_versions_and_delete(tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path}/m.db"
    files = long_term_memory(url, "ada")
    files.create("/memories/preferences.md", "- tea\n")
    files.str_replace("/memories/preferences.md", "tea", "coffee")
    long_term_memory(url, "grace").create("/memories/other.md", "not ada's")

    assert main(["--url", url, "memory", "list", "--namespace", "ada"]) == 0
    listed = capsys.readouterr().out
    assert "/memories/preferences.md" in listed and "other.md" not in listed
    assert (
        main(["--url", url, "memory", "show", "/memories/preferences.md", "--namespace", "ada"])
        == 0
    )
    assert capsys.readouterr().out == "- coffee\n"
    assert main(["--url", url, "memory", "versions", "/memories/preferences.md", "-n", "ada"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["--url", url, "memory", "delete", "/memories/preferences.md", "-n", "ada"]) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert main(["--url", url, "memory", "show", "/memories/../etc", "-n", "ada"]) == 2
    assert "would escape /memories" in capsys.readouterr().err
    assert (
        main(["--url", url, "memory", "delete", "/memories/preferences.md", "-n", "ada", "--yes"])
        == 0
    )
    assert (
        files.files() == []
        and long_term_memory(url, "grace").read("/memories/other.md") == "not ada's"
    )
    assert main(["--url", url, "memory", "show", "/memories/preferences.md", "-n", "ada"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_missing_store_is_not_created(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/none.db"
    assert main(["--url", url, "memory", "list", "-n", "ada"]) == 1
    assert not (tmp_path / "none.db").exists()
