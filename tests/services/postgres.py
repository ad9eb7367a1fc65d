"""A throwaway PostgreSQL server: ``initdb`` as the ``postgres`` user in a /tmp folder,
``pg_ctl start`` on a free loopback port with its socket in that folder, ``fsync=off``.
Used by the test fixtures and by ``bench/bench_sql.py``."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """PostgreSQL binaries or the ``postgres`` user are missing, or the server did not start."""


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin folder (Debian keeps them off PATH)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name)
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); run scripts/install-system-packages"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """A running server; :meth:`stop` shuts it down and removes its folder."""

    root: Path
    port: int
    bin: Path

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database (psycopg 3)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    def stop(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"
        )
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(max_connections: int = 300) -> PostgresServer:
    """Create a cluster in a fresh temp folder and start it; raises :class:`PostgresUnavailable`
    with the server's log when that fails."""
    bin_dir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="chat-memory-pg-", dir="/tmp"))
    (root / "sock").mkdir()
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "user 'postgres' is missing; run scripts/install-system-packages"
            ) from None
        for path in (root, root / "sock"):
            os.chown(path, user.pw_uid, user.pw_gid)
    server = PostgresServer(root=root, port=free_port(), bin=bin_dir)
    init = server._as_postgres(
        str(bin_dir / "initdb"),
        "-D",
        str(root / "data"),
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {init.stderr or init.stdout}")
    options = (
        f"-p {server.port} -k {root / 'sock'} -c listen_addresses=127.0.0.1 -c fsync=off "
        f"-c synchronous_commit=off -c full_page_writes=off -c max_connections={max_connections}"
    )
    started = server._as_postgres(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(root / "data"),
        "-l",
        str(root / "log"),
        "-w",
        "start",
        "-o",
        options,
    )
    if started.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailable(f"pg_ctl start failed: {started.stderr or started.stdout}\n{log}")
    return server
