"""Throwaway ``redis-server`` processes: one standalone server, or a 3-node Redis Cluster
(``--cluster-enabled yes`` plus ``redis-cli --cluster create``), on free loopback ports in a
temp folder, no persistence. Used by the test fixtures and by ``bench/bench_redis.py``."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 15.0


class RedisUnavailable(RuntimeError):
    """redis-server / redis-cli are missing, or a server or the cluster did not come up."""


def binary(name: str) -> str:
    """Path of a Redis binary, or a clear failure naming how to install it."""
    path = shutil.which(name)
    if path is None:
        raise RedisUnavailable(
            f"{name} is not installed; run scripts/install-system-packages (Debian: redis-server, redis-tools)"
        )
    return path


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free loopback port whose cluster-bus port (port + 10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 50000)
        if _port_free(port) and _port_free(port + 10000):
            return port
    raise RedisUnavailable("found no free loopback port pair for redis-server")


def _ping(port: int) -> str | None:
    """The reply to PING on a raw socket (no driver needed), or None when nobody answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).decode("latin-1").strip()
    except OSError:
        return None


@dataclass
class RedisServer:
    """One running redis-server; :meth:`stop` kills it and removes its folder."""

    port: int
    root: Path
    process: subprocess.Popen[bytes]
    owns_root: bool = True

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def start_redis(*extra: str, root: Path | None = None, port: int | None = None) -> RedisServer:
    """Start redis-server on 127.0.0.1 and wait until it answers PING."""
    server_binary = binary("redis-server")
    owns_root = root is None
    root = Path(tempfile.mkdtemp(prefix="chat-memory-redis-")) if root is None else root
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [
        server_binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(root),
        "--logfile",
        str(root / "redis.log"),
        *extra,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisServer(port, root, process, owns_root)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _ping(port) == "+PONG":
            return server
        time.sleep(0.05)
    log = server.log()
    server.stop()
    raise RedisUnavailable(f"redis-server on port {port} did not start:\n{log}")


@dataclass
class RedisClusterServers:
    """A running Redis Cluster of primaries; :meth:`stop` stops every node."""

    nodes: list[RedisServer] = field(default_factory=list)
    root: Path | None = None

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def _cluster_ok(port: int) -> bool:
    result = subprocess.run(
        [binary("redis-cli"), "-p", str(port), "cluster", "info"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return "cluster_state:ok" in result.stdout


def start_cluster(*extra: str, size: int = 3) -> RedisClusterServers:
    """Start ``size`` cluster-enabled servers (``extra``: more redis-server arguments for each),
    join them with ``redis-cli --cluster create`` (no replicas) and wait until every node
    reports ``cluster_state:ok``."""
    binary("redis-cli")
    root = Path(tempfile.mkdtemp(prefix="chat-memory-redis-cluster-"))
    cluster = RedisClusterServers(root=root)
    try:
        for i in range(size):
            folder = root / f"node{i}"
            cluster.nodes.append(
                start_redis(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(folder / "nodes.conf"),
                    "--cluster-node-timeout",
                    "2000",
                    *extra,
                    root=folder,
                )
            )
        for node in cluster.nodes:
            node.owns_root = False
        addresses = [f"127.0.0.1:{node.port}" for node in cluster.nodes]
        created = subprocess.run(
            [
                binary("redis-cli"),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            raise RedisUnavailable(
                f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}"
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not all(_cluster_ok(node.port) for node in cluster.nodes):
            if time.monotonic() > deadline:
                raise RedisUnavailable("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        return cluster
    except BaseException:
        cluster.stop()
        raise
