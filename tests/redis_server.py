"""A real ``redis-server`` for tests: a free port on loopback, a temp dir, no outside state."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def redis_server_available() -> bool:
    """Whether the ``redis-server`` binary is on PATH."""
    return shutil.which("redis-server") is not None


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process owned by a test.

    Args:
        directory: where Redis keeps its files (AOF, RDB) and its log.
        port: a port, or None to pick a free one.
        appendonly: turn on the append-only file.
        appendfsync: ``always``, ``everysec`` or ``no`` (with ``appendonly``).
        extra_args: more ``redis-server`` arguments, e.g. ``["--requirepass", "pw"]``.

    After :meth:`kill` or :meth:`stop`, :meth:`start` runs the server again on the same port
    and directory (so an append-only file is loaded back).
    """

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra_args: list[str] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", str(self.directory / "redis.log"),
            "--daemonize", "no",
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    # -NOAUTH also means the server is up (it was started with a password).
                    if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, no final save."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel but never answered."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server politely (SIGTERM), killing it if it lingers."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


def start_cluster(directory: Path, nodes: int = 3, timeout: float = 20.0) -> list[RedisServer]:
    """Start a Redis Cluster of *nodes* primaries (no replicas) on free ports; all slots covered.

    Needs ``redis-cli`` (``--cluster create``). Stop every returned server when done.
    """
    servers = [
        RedisServer(
            Path(directory) / f"node{i}",
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                # An explicit bus port: the default (port + 10000) may not exist or be free.
                "--cluster-port",
                str(free_port()),
            ],  # fmt: skip
        )
        for i in range(nodes)
    ]
    try:
        for server in servers:
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in servers]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-yes"],
            check=True, capture_output=True, timeout=timeout,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        pending = list(servers)
        while pending and time.monotonic() < deadline:
            out = subprocess.run(
                ["redis-cli", "-p", str(pending[0].port), "cluster", "info"],
                capture_output=True, text=True, timeout=timeout,
            ).stdout  # fmt: skip
            if "cluster_state:ok" in out:
                pending.pop(0)
            else:
                time.sleep(0.1)
        if pending:
            raise RuntimeError(f"the cluster did not reach state ok within {timeout}s")
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers
