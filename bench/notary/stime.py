"""The local TLS target (``openssl s_server``) and its raw handshake rate (``openssl s_time``).

``s_time -new`` makes one full handshake after another from a single client; its own
"real seconds" figure is whole seconds, so the rate here divides its connection count by the
wall-clock time of the run measured around it.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, replace

from bench.notary.certs import CertFiles
from bench.notary.procs import BenchError

_CONNS = re.compile(r"^(\d+) connections in ([\d.]+)s;", re.MULTILINE)
_BYTES = re.compile(r"connections in \d+ real seconds, (\d+) bytes read per connection")


@dataclass(frozen=True)
class HandshakeRate:
    connections: int
    seconds: float
    rate: float  # full handshakes per second
    user_seconds: float  # client CPU time as s_time reports it
    client_cpu_seconds: float | None = None  # s_time's user + system CPU (rusage)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def openssl_path() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise BenchError("openssl is not installed")
    return path


def s_server_argv(cert: CertFiles, host: str, port: int) -> list[str]:
    return [
        openssl_path(), "s_server",
        "-accept", f"{host}:{port}",
        "-cert", str(cert.cert),
        "-key", str(cert.key),
        "-www", "-quiet",
        *(["-cert_chain", str(cert.chain)] if cert.chain is not None else []),
    ]


def parse_s_time(text: str, wall_seconds: float) -> HandshakeRate:
    m = _CONNS.search(text)
    if m is None:
        raise BenchError(f"cannot read s_time output:\n{text[-2000:]}")
    n = int(m.group(1))
    return HandshakeRate(n, wall_seconds, n / wall_seconds if wall_seconds > 0 else 0.0,
                         float(m.group(2)))


@dataclass(frozen=True)
class FetchRate:
    """Parallel ``s_time -new -www PATH`` clients: one full handshake per request."""

    connections: int
    seconds: float
    rate: float
    clients: int
    bytes_per_connection: int  # the smallest any client saw (answers all of one size)
    mean_ms: float  # time per request including the handshake (clients / rate)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def s_time_fetch(host: str, port: int, path: str, seconds: int = 5,
                 clients: int = 4) -> FetchRate:
    """``clients`` concurrent ``s_time -new -www path`` runs (HTTP/1.0 GET, full handshake
    for every request, no session reuse) for about ``seconds`` seconds."""
    if seconds < 1 or not 1 <= clients <= 64:
        raise ValueError("s_time_fetch needs seconds >= 1 and 1..64 clients")
    if not path.startswith("/") or any(c.isspace() for c in path):
        raise ValueError(f"bad path {path!r}")
    argv = [openssl_path(), "s_time", "-connect", f"{host}:{port}", "-new", "-www", path,
            "-time", str(seconds)]
    t0 = time.monotonic()
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(clients)]
    outs: list[str] = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=seconds + 30)
            if proc.returncode != 0:
                raise BenchError(f"s_time failed ({proc.returncode}): {err[-2000:]}")
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.monotonic() - t0
    total = 0
    sizes: list[int] = []
    for out in outs:
        m = _CONNS.search(out)
        b = _BYTES.search(out)
        if m is None or b is None:
            raise BenchError(f"cannot read s_time output:\n{out[-2000:]}")
        total += int(m.group(1))
        sizes.append(int(b.group(1)))
    rate = total / wall if wall > 0 else 0.0
    return FetchRate(total, wall, rate, clients, min(sizes),
                     clients / rate * 1000 if rate > 0 else 0.0)


def s_time(host: str, port: int, seconds: int = 5) -> HandshakeRate:
    """Full (``-new``) handshakes against ``host:port`` for about ``seconds`` seconds."""
    if seconds < 1:
        raise ValueError("s_time needs at least one second")
    argv = [openssl_path(), "s_time", "-connect", f"{host}:{port}", "-new",
            "-time", str(seconds)]
    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # s_time is the one child reaped
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise BenchError(f"s_time failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rate = parse_s_time(proc.stdout, wall)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return replace(rate, client_cpu_seconds=cpu)
