"""Hostile clients against a real ``notary serve`` process: slow heads and bodies, thousands
of idle connections, bursts above probe capacity, the rate limit and the connection cap.

Every case checks that memory stays bounded, refusals are fast where a limit applies, and a
healthy request is still answered.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import resource
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from security_support import (
    NotaryProcess,
    Results,
    ThreadServer,
    client_ctx,
    copy_identity,
    leaf_der,
    open_fds,
    parse_reply,
    read_to_eof,
    sha1_colon,
)

SUITE = "hostile clients"
KEEPALIVE = 2.0
BODY_TIMEOUT = 2.0
RSS_GROWTH_BOUND = 64 * 1024  # KiB
PER_CONNECTION_BOUND = 128  # KiB of notary RSS per idle pre-handshake connection


def silent(conn: socket.socket) -> None:
    conn.settimeout(30)
    while conn.recv(65536):
        pass


@pytest.fixture(scope="module")
def notary(identity_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[NotaryProcess]:
    d = tmp_path_factory.mktemp("hc")
    cfg = d / "notary.toml"
    cfg.write_text(f"keepalive_timeout = {KEEPALIVE}\nbody_timeout = {BODY_TIMEOUT}\n")
    n = NotaryProcess(copy_identity(identity_dir, d / "data"), [
        "--config", str(cfg), "--allow-target", "127.0.0.0/8",
        "--resolve", "site.test=127.0.0.1", "--max-probes", "2", "--probe-timeout", "4"])
    yield n
    n.stop()


def tls_connect(port: int, timeout: float = 15) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return client_ctx().wrap_socket(raw)


def good(notary: NotaryProcess, target: ThreadServer, cert: trustme.LeafCert) -> int:
    return notary.query(f"site.test+{target.port}", sha1_colon(leaf_der(cert))).status


def trickle_until_closed(sock: ssl.SSLSocket, data: bytes, every: float, limit: float
                         ) -> tuple[float | None, bytes]:
    """Send ``data`` one byte per ``every`` s; (seconds until the server answered or
    closed, what it sent). None if it did neither within ``limit``."""
    t0 = time.monotonic()
    sock.settimeout(every)
    for b in data:
        if time.monotonic() - t0 > limit:
            return None, b""
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return time.monotonic() - t0, b""
        try:
            got = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0, b""
        return time.monotonic() - t0, got
    return None, b""


def test_slow_header_client_is_cut_off(notary: NotaryProcess, good_target: ThreadServer,
                                       site_cert: trustme.LeafCert, results: Results) -> None:
    before = notary.rss()
    with tls_connect(notary.port) as s:
        took, got = trickle_until_closed(
            s, b"POST /target/site.test+443 HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200,
            every=0.25, limit=KEEPALIVE + 8)
    assert took is not None, "a slow header held the connection open"
    assert took < KEEPALIVE + 5
    assert good(notary, good_target, site_cert) == 200
    results.add(SUITE, "slow header: one byte every 0.25 s (keep-alive timeout 2 s)",
                "connection closed at the header deadline", "closed", took,
                (before, notary.rss()))


def test_slow_body_client_gets_408(notary: NotaryProcess, good_target: ThreadServer,
                                   site_cert: trustme.LeafCert, results: Results) -> None:
    before = notary.rss()
    for path in ("/target/site.test+443", "/v2/answer"):
        with tls_connect(notary.port) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n"
                      "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode())
            took, got = trickle_until_closed(s, b"fingerprint=" + b"A" * 180, every=0.25,
                                             limit=BODY_TIMEOUT + 8)
        assert took is not None, f"a slow body held {path} open"
        assert took < BODY_TIMEOUT + 5
        assert got.startswith(b"HTTP/1.1 408"), got[:80]
        results.add(SUITE, f"slow body to {path}: one byte every 0.25 s (body timeout 2 s)",
                    "408 at the body deadline", got.split(b"\r\n")[0].decode(), took,
                    (before, notary.rss()))
    assert good(notary, good_target, site_cert) == 200


def test_whole_body_in_time_is_answered(notary: NotaryProcess, good_target: ThreadServer,
                                        site_cert: trustme.LeafCert) -> None:
    """Twin: a body sent in two parts well within the deadline is read and answered."""
    body = f"fingerprint={sha1_colon(leaf_der(site_cert))}".encode()
    with tls_connect(notary.port) as s:
        s.sendall(f"POST /target/site.test+{good_target.port} HTTP/1.0\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        time.sleep(0.5)
        s.sendall(body[10:])
        reply = parse_reply(read_to_eof(s), 0)
    assert reply.status == 200


def test_idle_tls_connections_are_closed(notary: NotaryProcess, good_target: ThreadServer,
                                         site_cert: trustme.LeafCert, results: Results) -> None:
    before = notary.rss()
    socks = [tls_connect(notary.port) for _ in range(200)]
    try:
        assert good(notary, good_target, site_cert) == 200
        during = notary.rss()
        t0 = time.monotonic()
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, KEEPALIVE + 6 - (time.monotonic() - t0)))
            with contextlib.suppress(OSError):
                if s.recv(1) == b"":
                    closed += 1
        took = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    assert closed == len(socks)
    results.add(SUITE, "200 idle TLS connections (no request)",
                "all closed at the keep-alive timeout; healthy request served",
                f"{closed} closed; RSS while held {during} KiB", took, (before, notary.rss()))


def _raise_fd_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def test_thousands_of_idle_connections(notary: NotaryProcess, good_target: ThreadServer,
                                       site_cert: trustme.LeafCert, results: Results) -> None:
    """3000 TCP connections that never start TLS: memory bounded, healthy requests served."""
    n = 3000
    _raise_fd_limit(n + 1000)
    base_fds = open_fds(notary.pid)
    before = notary.rss()
    socks: list[socket.socket] = []
    t0 = time.monotonic()
    try:
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", notary.port), timeout=10))
        # the kernel completes connections before the notary accepts them: wait (well within
        # the 10 s handshake timeout) until it holds them
        deadline = time.monotonic() + 5
        while open_fds(notary.pid) < base_fds + n * 0.9 and time.monotonic() < deadline:
            time.sleep(0.1)
        held_fds = open_fds(notary.pid)
        during = notary.rss()
        t1 = time.monotonic()
        status = good(notary, good_target, site_cert)
        healthy_s = time.monotonic() - t1
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while open_fds(notary.pid) > base_fds + 50 and time.monotonic() < deadline:
        time.sleep(0.2)
    after_fds = open_fds(notary.pid)
    assert status == 200
    assert healthy_s < 5
    assert held_fds >= base_fds + n * 0.9  # they were really held by the notary
    per_conn = (during - before) / n
    assert per_conn < PER_CONNECTION_BOUND
    assert after_fds <= base_fds + 50
    results.add(SUITE, f"{n} idle TCP connections that never start TLS",
                "bounded memory; healthy request served; fds released",
                f"healthy 200 in {healthy_s:.2f} s; fds {base_fds}->{held_fds}->{after_fds}; "
                f"RSS while held {during} KiB ({per_conn:.0f} KiB per connection)",
                time.monotonic() - t0, (before, notary.rss()))


def test_never_handshaking_client_is_dropped(identity_dir: Path, tmp_path: Path,
                                             results: Results) -> None:
    """A client that opens the TLS port and never sends a ClientHello is dropped at
    ``tls_handshake_timeout`` (asyncio's default would hold it 60 s)."""
    cfg = tmp_path / "n.toml"
    cfg.write_text("tls_handshake_timeout = 1.5\n")
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "d"), ["--config", str(cfg)])
    try:
        with socket.create_connection(("127.0.0.1", n.port), timeout=30) as s:
            t0 = time.monotonic()
            got = s.recv(10)
            took = time.monotonic() - t0
        with tls_connect(n.port) as s:  # twin: a real handshake is unaffected
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            ok = parse_reply(read_to_eof(s), 0).status
    finally:
        n.stop()
    assert got == b"" and 1.0 < took < 6
    assert ok == 200
    results.add(SUITE, "TCP connection to the TLS port that never sends a ClientHello",
                "dropped at tls_handshake_timeout (1.5 s here, default 10 s)", "closed", took)


def test_burst_above_probe_capacity(notary: NotaryProcess, good_target: ThreadServer,
                                    site_cert: trustme.LeafCert, results: Results) -> None:
    """--max-probes 2: two slow probes fill it; 20 more targets get a fast 503 + Retry-After;
    a cached target is still answered."""
    assert good(notary, good_target, site_cert) == 200  # cached now
    stalls = [ThreadServer(silent) for _ in range(22)]
    before = notary.rss()
    try:
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            holders = [pool.submit(notary.query, f"127.0.0.1+{s.port}", "AA" * 20)
                       for s in stalls[:2]]
            time.sleep(0.5)
            t0 = time.monotonic()
            burst = list(pool.map(lambda s: notary.query(f"127.0.0.1+{s.port}", "AA" * 20),
                                  stalls[2:]))
            took = time.monotonic() - t0
            cached = good(notary, good_target, site_cert)
            held = [h.result() for h in holders]
    finally:
        for s in stalls:
            s.close()
    assert [r.status for r in burst] == [503] * 20
    assert all(r.header("retry-after") for r in burst)
    assert all(r.header("cache-status") == "converge-notary; fwd=miss; detail=capacity"
               for r in burst)
    assert max(r.seconds for r in burst) < 2.0  # refused at once, not after a probe
    assert cached == 200
    assert [r.status for r in held] == [503, 503]  # the slow probes time out
    results.add(SUITE, "20 new targets while --max-probes 2 are busy",
                "fast 503 + Retry-After; cached answers still served",
                f"20 x 503 (capacity), slowest {max(r.seconds for r in burst):.2f} s; "
                "cached 200", took, (before, notary.rss()))


def test_rate_limit_burst(identity_dir: Path, tmp_path: Path, good_target: ThreadServer,
                          site_cert: trustme.LeafCert, results: Results) -> None:
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "d"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "site.test=127.0.0.1",
        "--rate-limit", "5", "--rate-burst", "5"])
    try:
        before = n.rss()
        t0 = time.monotonic()
        replies = [n.query(f"site.test+{good_target.port}", sha1_colon(leaf_der(site_cert)))
                   for _ in range(30)]
        took = time.monotonic() - t0
        after = n.rss()
    finally:
        n.stop()
    statuses = [r.status for r in replies]
    limited = [r for r in replies if r.status == 429]
    assert statuses[0] == 200
    assert len(limited) >= 15
    assert all(r.header("retry-after") for r in limited)
    assert max(r.seconds for r in limited) < 1.0
    results.add(SUITE, "30 requests at once from one address (--rate-limit 5, burst 5)",
                "fast 429 + Retry-After beyond the burst",
                f"{statuses.count(200)} x 200, {len(limited)} x 429", took, (before, after))


def test_connection_cap(identity_dir: Path, tmp_path: Path, good_target: ThreadServer,
                        site_cert: trustme.LeafCert, results: Results) -> None:
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "d"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "site.test=127.0.0.1",
        "--max-connections", "20"])
    try:
        before = n.rss()
        held = [tls_connect(n.port) for _ in range(40)]
        try:
            time.sleep(0.3)
            over = n.query(f"site.test+{good_target.port}", sha1_colon(leaf_der(site_cert)))
        finally:
            for s in held:
                s.close()
        time.sleep(0.5)
        again = n.query(f"site.test+{good_target.port}", sha1_colon(leaf_der(site_cert)))
        after = n.rss()
    finally:
        n.stop()
    assert over.status == 503 and over.header("retry-after")
    assert over.seconds < 2
    assert again.status == 200
    results.add(SUITE, "40 open connections with --max-connections 20",
                "fast 503 + Retry-After while over the cap; served after",
                f"{over.status} then {again.status}", over.seconds, (before, after))


@pytest.mark.parametrize(("name", "head"), [
    ("100 header fields (bound 64)",
     "".join(f"X-H{i}: v\r\n" for i in range(100))),
    ("a 20 KB header field (bound 8190 bytes)", "X-Big: " + "a" * 20000 + "\r\n"),
    ("a 20 KB request line (bound 8190 bytes)", None),
])
def test_oversized_heads_are_refused(notary: NotaryProcess, good_target: ThreadServer,
                                     site_cert: trustme.LeafCert, results: Results, name: str,
                                     head: str | None) -> None:
    from security_support import exchange

    if head is None:
        request = f"GET /target/{'a' * 20000}+443 HTTP/1.0\r\n\r\n".encode()
    else:
        request = f"GET /target/site.test+443 HTTP/1.0\r\n{head}\r\n".encode()
    before = notary.rss()
    reply = exchange(notary.port, request)
    assert reply.status in (400, 413, 431), reply.status
    assert good(notary, good_target, site_cert) == 200
    results.add(SUITE, name, "4xx at once; healthy after", str(reply.status), reply.seconds,
                (before, notary.rss()))
