"""A throw-away ``redis-server`` for the tests (no persistence, loopback, a free port).

Shared by the store contract suite, the root-store chain tests and the scale-out tests.
``tests/`` is on pytest's ``pythonpath`` (pyproject.toml), so suites import this module by
name. Every wait is bounded; every server started here is killed by its owner or at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from loopback import free_port  # noqa: F401  (re-exported for the tests)

REDIS_SERVER = shutil.which("redis-server")


def wait_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout} s")


class RedisServer:
    """A throw-away ``redis-server`` (no persistence) that tests can stop and restart."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (run scripts/install-system-deps)")
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--save", "", "--appendonly", "no", "--port", str(self.port),
             "--bind", "127.0.0.1", "--dir", str(self.workdir), "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.workdir,
        )
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


_shared: list[RedisServer] = []


def shared_redis_url() -> str:
    """The URL of one redis-server for this test process, started on first use.

    Tests sharing it isolate themselves by key prefix.
    """
    if not _shared:
        server = RedisServer(Path(tempfile.mkdtemp(prefix="converge-redis-")))
        server.start()
        atexit.register(server.stop)
        _shared.append(server)
    return _shared[0].url
