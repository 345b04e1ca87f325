"""Client addresses behind a real haproxy (``send-proxy-v2``) and ``--trusted-proxy``.

Each client is charged by the address haproxy announces: with a rate limit of 2 requests, a
client at 127.0.0.2 that used its two is refused (429) while one at 127.0.0.3 is still
served. The twin (haproxy without the header, the notary without the trust setting) charges
every client to haproxy's own address, so the second client is refused too. A trusted peer
without a header and an untrusted peer with one are both refused, each with its twin.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port
from redis_testing import wait_port

NOTARY = str(Path(sys.executable).parent / "notary")
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
pytestmark = pytest.mark.skipif(not Path(HAPROXY).exists(), reason="haproxy not installed "
                                "(scripts/install-system-deps installs it)")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started, stopped at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def notary_factory(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> object:
    def start(*extra: str) -> int:
        port = free_port()
        with open(tmp_path / f"notary-{port}.log", "wb") as err:
            procs.append(subprocess.Popen(
                [NOTARY, "serve", "--data-dir", str(tmp_path / "d"), "--listen",
                 f"127.0.0.1:{port}", "--no-log", "--rate-limit", "0.001", "--rate-burst",
                 "2", *extra], stderr=err))
        wait_port(port, 60)
        return port

    return start


@pytest.fixture
def haproxy_factory(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> object:
    def start(backend_port: int, send_proxy: bool) -> int:
        port = free_port()
        cfg = tmp_path / f"haproxy-{port}.cfg"
        cfg.write_text(
            "global\n    maxconn 100\n"
            "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 10s\n"
            "    timeout server 10s\n"
            f"frontend f\n    bind 127.0.0.1:{port}\n    default_backend b\n"
            f"backend b\n    server n 127.0.0.1:{backend_port}"
            f"{' send-proxy-v2' if send_proxy else ''}\n")
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        procs.append(proc)
        wait_port(port, 60)
        return port

    return start


def _ctx() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def status_from(port: int, source: str) -> int:
    """GET a malformed target (400 once admitted, no probe) from ``source``."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                       source_address=(source, 0), context=_ctx())
    try:
        conn.request("GET", "/target/not-a-target")
        return conn.getresponse().status
    finally:
        conn.close()


def proxy_v2(src: str, src_port: int = 40000) -> bytes:
    addrs = socket.inet_aton(src) + socket.inet_aton("127.0.0.1") + struct.pack(
        "!HH", src_port, 8443)
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", 12) + addrs


def raw_status(port: int, source: str, header: bytes) -> int | None:
    """Send ``header`` then a TLS request; the status, or None if the notary hung up.

    TLS runs over memory buffers (``wrap_bio``), so a connection the notary closes at once
    leaves no half-made TLS socket behind."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _ctx().wrap_bio(incoming, outgoing)
    request = b"GET /target/not-a-target HTTP/1.0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10,
                                  source_address=(source, 0)) as raw:
        try:
            raw.sendall(header)
            for _ in range(50):  # bounded: a handshake and a reply take a few rounds
                try:
                    if request:
                        tls.do_handshake()
                        tls.write(request)
                        request = b""
                    reply = tls.read(100)
                    if reply:
                        return int(reply.split()[1])
                except ssl.SSLWantReadError:
                    pass
                raw.sendall(outgoing.read())
                data = raw.recv(65536)
                if not data:
                    return None
                incoming.write(data)
        except (OSError, ssl.SSLError):
            return None
    raise AssertionError("no answer within 50 rounds")


def test_each_client_is_charged_by_the_address_haproxy_announces(
        notary_factory: object, haproxy_factory: object) -> None:
    notary = notary_factory("--trusted-proxy", "127.0.0.1/32")  # type: ignore[operator]
    front = haproxy_factory(notary, True)  # type: ignore[operator]
    assert [status_from(front, "127.0.0.2") for _ in range(3)] == [400, 400, 429]
    assert status_from(front, "127.0.0.3") == 400  # its own budget, untouched


def test_twin_without_the_header_every_client_is_haproxy(
        notary_factory: object, haproxy_factory: object) -> None:
    notary = notary_factory()  # type: ignore[operator]
    front = haproxy_factory(notary, False)  # type: ignore[operator]
    assert [status_from(front, "127.0.0.2") for _ in range(3)] == [400, 400, 429]
    assert status_from(front, "127.0.0.3") == 429  # charged to haproxy's address too


def test_trusted_peer_without_header_is_refused(notary_factory: object) -> None:
    notary = notary_factory("--trusted-proxy", "127.0.0.1/32")  # type: ignore[operator]
    assert raw_status(notary, "127.0.0.1", b"") is None
    # twin: the same peer with a header is served, as the address it announces
    assert raw_status(notary, "127.0.0.1", proxy_v2("192.0.2.7")) == 400


def test_untrusted_peer_with_header_is_refused(notary_factory: object) -> None:
    notary = notary_factory("--trusted-proxy", "127.0.0.1/32")  # type: ignore[operator]
    assert raw_status(notary, "127.0.0.2", proxy_v2("192.0.2.7")) is None
    # twin: the same untrusted peer without a header is served as itself
    assert raw_status(notary, "127.0.0.2", b"") == 400


def test_announced_addresses_have_their_own_budgets(notary_factory: object) -> None:
    notary = notary_factory("--trusted-proxy", "127.0.0.1/32")  # type: ignore[operator]
    statuses = [raw_status(notary, "127.0.0.1", proxy_v2("192.0.2.7")) for _ in range(3)]
    assert statuses == [400, 400, 429]
    assert raw_status(notary, "127.0.0.1", proxy_v2("192.0.2.8")) == 400


def test_bad_trusted_proxy_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([NOTARY, "serve", "--data-dir", str(tmp_path / "d"),
                           "--trusted-proxy", "not-a-net"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "notary: --trusted-proxy 'not-a-net' is not an address or CIDR"]
