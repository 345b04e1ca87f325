"""Support code for the replay tests: free ports, a pcap writer, subprocess servers."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from loopback import free_port  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
NOTARY = BIN / "notary"
REPLAY = BIN / "replay"


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def tcp_packet(src: str, dst: str, sport: int, dport: int, flags: int, payload: bytes = b"",
               proto: int = 6) -> bytes:
    """An Ethernet/IPv4/TCP (or UDP when proto=17) frame built with struct."""
    if proto == 6:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 65535, 0, 0)
    else:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    l4 += payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, proto, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return b"\x00\x00\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x02" + b"\x08\x00" + ip + l4


def write_pcap(path: Path, flows: Sequence[tuple[float, str, str, int, int, int]]) -> None:
    """A classic pcap with one 4-packet TCP exchange (SYN, ACK, PSH+data, FIN) per flow.

    Each flow: ``(start epoch seconds, src, dst, sport, dport, proto)``; packets 10 ms apart.
    """
    packets = []
    for start, src, dst, sport, dport, proto in flows:
        if proto == 6:
            for i, (flags, data) in enumerate(((0x02, b""), (0x10, b""), (0x18, b"x" * 100),
                                               (0x11, b""))):
                packets.append((start + i * 0.01, tcp_packet(src, dst, sport, dport, flags,
                                                             data)))
        else:
            packets.append((start, tcp_packet(src, dst, sport, dport, 0, b"q" * 40, proto)))
    _write_pcap(path, packets)


def _write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> None:
    """A classic pcap file (microsecond times, Ethernet) of ``(time, frame)``, in time order."""
    packets.sort(key=lambda p: p[0])
    with path.open("wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for t, frame in packets:
            sec = int(t)
            usec = int(round((t - sec) * 1_000_000))
            fh.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)


def write_pcap_exchange(path: Path, conns: Sequence[tuple[float, str, str, int, int, int]],
                        ) -> None:
    """A classic pcap with a TCP exchange in both directions per connection ``(start, client,
    server, client port, server port, reply bytes)``: SYN, SYN+ACK, request (100 bytes),
    reply (``reply bytes``), FIN both ways; packets 10 ms apart. A one-way exporter such as
    nfpcapd writes two flows per connection."""
    packets = []
    for start, c, srv, cp, sp, reply in conns:
        steps = ((c, srv, cp, sp, 0x02, b""), (srv, c, sp, cp, 0x12, b""),
                 (c, srv, cp, sp, 0x18, b"q" * 100), (srv, c, sp, cp, 0x18, b"r" * reply),
                 (c, srv, cp, sp, 0x11, b""), (srv, c, sp, cp, 0x11, b""))
        for i, (a, b, ap, bp, flags, data) in enumerate(steps):
            packets.append((start + i * 0.01, tcp_packet(a, b, ap, bp, flags, data)))
    _write_pcap(path, packets)


def wait_http(url: str, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None,
              ) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            req = urllib.request.Request(url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(req, timeout=2) as resp:
                return dict(json.loads(resp.read().decode()))
        except (OSError, ValueError) as exc:
            last = exc
            time.sleep(0.1)
    raise TimeoutError(f"{url} not ready: {last}")


def wait_file(path: Path, timeout: float = 15.0,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not appear")


@contextlib.contextmanager
def running(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a subprocess for the duration of the block; stop it by its own id afterwards."""
    fh = log.open("wb")
    proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        fh.close()


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPLAY), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def python() -> str:
    return sys.executable
