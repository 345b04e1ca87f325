"""Processes of one benchmark run: start them, wait until they answer, stop them by pid."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType


class BenchError(RuntimeError):
    """A benchmark step failed (a process did not start, a tool is missing, bad output)."""


_GIVEN_PORTS: set[tuple[str, int]] = set()


def xdist_share(port: int) -> bool:
    """Under pytest-xdist, worker N of W hands out only ports with ``(port // 2) % W == N``,
    so two workers never both hand out one just-closed port (each process's memory of the
    ports it gave does not reach the other workers). Not ``port % W``: Linux gives ``bind``
    to port 0 odd ports while it can."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()
            and int(count) > 1):
        return True
    return port // 2 % int(count) == int(worker[2:]) % int(count)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``, never one handed out before in this
    process (the kernel may give a just-closed port again; two servers would then collide)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if (host, port) not in _GIVEN_PORTS and xdist_share(port):
            _GIVEN_PORTS.add((host, port))
            return port


def insecure_client_context() -> ssl.SSLContext:
    """TLS client context for talking to our own self-signed local servers."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def http_request(
    host: str,
    port: int,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    tls: bool = False,
    timeout: float = 5.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request on a new connection: (status, headers, body)."""
    conn: http.client.HTTPConnection
    if tls:
        conn = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=insecure_client_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None:
            hdrs.setdefault("Content-Type", "application/x-www-form-urlencoded")
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read(1024 * 1024)
        return resp.status, {k: v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid`` (children, their children, ...)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parent[int(entry.name)] = int(fields[1])
    out: list[int] = []
    frontier = [pid]
    while frontier and len(out) < 1000:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def cpu_seconds(pid: int, *, with_children: bool = False) -> float | None:
    """User + system CPU time so far of a process (all its threads), or None if unknown.

    ``with_children`` adds its live descendants (worker processes of a supervisor).
    """
    pids = [pid] + (descendants(pid) if with_children else [])
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for i, p in enumerate(pids):
        fields = _stat(p)
        if fields is None:
            if i == 0:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def thread_cpu_seconds(pid: int) -> float | None:
    """CPU seconds so far of a process's live threads, to the nanosecond (Linux
    ``/proc/PID/task/*/schedstat``); else :func:`cpu_seconds`, whose 10 ms clock ticks read
    a short step's few milliseconds as none. Threads that have exited are not counted: for
    a process whose threads come and go, use :func:`cpu_seconds`."""
    total = 0
    found = False
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
            found = True
        except (OSError, ValueError, IndexError):  # a thread that has just exited
            continue
    return total / 1e9 if found else cpu_seconds(pid)


class Processes:
    """The processes of one run; every one is stopped (by its own pid) on exit."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("wb")
        try:
            proc = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise BenchError(f"cannot start {name} ({argv[0]}): {exc}") from exc
        finally:
            log.close()
        self._procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_http(
        self, name: str, host: str, port: int, *, tls: bool = False, timeout: float = 30.0
    ) -> None:
        """Poll ``GET /`` until it answers (any status)."""
        self._wait(name, timeout, lambda: http_request(host, port, "GET", "/", tls=tls,
                                                        timeout=1.0))

    def wait_tcp(self, name: str, host: str, port: int, *, timeout: float = 30.0) -> None:
        def attempt() -> None:
            with socket.create_connection((host, port), timeout=1.0):
                pass

        self._wait(name, timeout, attempt)

    def _wait(self, name: str, timeout: float, attempt: object) -> None:
        proc = self._find(name)
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BenchError(
                    f"{name} exited with code {proc.returncode}:\n{self.log_tail(name)}"
                )
            try:
                attempt()  # type: ignore[operator]
                return
            except (OSError, http.client.HTTPException) as exc:
                last = exc
                time.sleep(0.1)
        raise BenchError(f"{name} did not answer within {timeout:g} s ({last})")

    def pid(self, name: str) -> int:
        return self._find(name).pid

    def _find(self, name: str) -> subprocess.Popen[bytes]:
        for n, p in self._procs:
            if n == name:
                return p
        raise KeyError(name)

    def stop_all(self) -> None:
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self._procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._procs.clear()

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()
