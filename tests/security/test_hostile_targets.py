"""Hostile targets: real sockets on 127.0.0.1 that misbehave during the probe's handshake.

A ``notary serve`` process (``--allow-target 127.0.0.0/8``, probe timeout 2 s) is asked
about each. It must answer 503 within its probe timeout (generous bound), stay healthy (a
live probe of a good site afterwards still works) and keep its memory bounded.
"""

from __future__ import annotations

import os
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme
from security_support import (
    NotaryProcess,
    Results,
    ThreadServer,
    copy_identity,
    leaf_der,
    sha1_colon,
    tls_handler,
)

SUITE = "hostile targets"
PROBE_TIMEOUT = 2.0
ANSWER_BOUND = PROBE_TIMEOUT + 4.0  # generous: shared 2-core machine
RSS_GROWTH_BOUND = 40 * 1024  # KiB


@pytest.fixture(scope="module")
def notary(identity_dir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[NotaryProcess]:
    n = NotaryProcess(copy_identity(identity_dir, tmp_path_factory.mktemp("ht") / "d"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "site.test=127.0.0.1",
        "--probe-timeout", str(PROBE_TIMEOUT)])
    yield n
    n.stop()


def read_hello(conn: socket.socket) -> bytes:
    conn.settimeout(10)
    return conn.recv(65536)


def huge_chain_handler(site_cert: trustme.LeafCert, ca: trustme.CA, tmp: Path
                       ) -> Callable[[socket.socket], None]:
    """A genuine TLS server whose chain is the leaf plus 400 intermediates (~400 KB)."""
    inter = ca.create_child_ca()
    pem = inter.cert_pem.bytes()
    chain = tmp / "huge-chain.pem"
    chain.write_bytes(site_cert.cert_chain_pems[0].bytes() + pem * 400)
    key = tmp / "leaf.key"
    key.write_bytes(site_cert.private_key_pem.bytes())
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain, key)
    return tls_handler(ctx, hold=5)


def endless_records(conn: socket.socket) -> None:
    """After the ClientHello, an endless stream of 16 KiB TLS handshake records."""
    read_hello(conn)
    record = struct.pack("!BHH", 22, 0x0303, 16384) + b"\x0b" + b"\xff" * 16383
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conn.sendall(record)


def trickle(conn: socket.socket) -> None:
    """Slowloris: after the ClientHello, one byte of a ServerHello record every 0.3 s."""
    read_hello(conn)
    data = struct.pack("!BHH", 22, 0x0303, 90) + b"\x02\x00\x00\x56\x03\x03" + b"\x00" * 84
    for b in data:
        conn.sendall(bytes([b]))
        time.sleep(0.3)


def reset_mid_handshake(conn: socket.socket) -> None:
    read_hello(conn)
    conn.sendall(struct.pack("!BHH", 22, 0x0303, 90) + b"\x02\x00\x00")
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()  # RST


def plain_http(conn: socket.socket) -> None:
    read_hello(conn)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n"
                 b"\r\nBad Request")
    conn.close()


def garbage(conn: socket.socket) -> None:
    read_hello(conn)
    conn.sendall(os.urandom(64 * 1024))
    conn.close()


def accept_and_close(conn: socket.socket) -> None:
    conn.close()


def silent(conn: socket.socket) -> None:
    conn.settimeout(30)
    while conn.recv(65536):
        pass


CASES: list[tuple[str, str]] = [
    ("huge", "huge certificate chain (leaf + 400 intermediates, ~400 KB)"),
    ("endless", "endless stream of TLS handshake records"),
    ("trickle", "slowloris: ServerHello one byte every 0.3 s"),
    ("reset", "TCP reset in the middle of the handshake"),
    ("http", "plain HTTP instead of TLS"),
    ("garbage", "64 KiB of random bytes"),
    ("close", "accepts and closes at once"),
    ("silent", "accepts and never answers"),
]


def healthy(notary: NotaryProcess, good: ThreadServer) -> int:
    """A live probe of a good site (an unseen fingerprint forces a probe): expect 409."""
    reply = notary.query(f"site.test+{good.port}", secrets.token_hex(20))
    assert reply.header("cache-status") == "converge-notary; fwd=miss"
    return reply.status


@pytest.mark.parametrize(("kind", "label"), CASES, ids=[c[0] for c in CASES])
def test_hostile_target_gets_503_and_the_notary_stays_healthy(
    notary: NotaryProcess, good_target: ThreadServer, site_cert: trustme.LeafCert,
    ca: trustme.CA, tmp_path: Path, results: Results, kind: str, label: str,
) -> None:
    handlers: dict[str, Callable[[], Callable[[socket.socket], None]]] = {
        "huge": lambda: huge_chain_handler(site_cert, ca, tmp_path),
        "endless": lambda: endless_records, "trickle": lambda: trickle,
        "reset": lambda: reset_mid_handshake, "http": lambda: plain_http,
        "garbage": lambda: garbage, "close": lambda: accept_and_close, "silent": lambda: silent,
    }
    fp = sha1_colon(leaf_der(site_cert))
    before = notary.rss()
    with ThreadServer(handlers[kind]()) as hostile:
        reply = notary.query(f"127.0.0.1+{hostile.port}", fp)
        assert hostile.accepted >= 1  # the probe did reach the hostile target
    assert reply.status == 503, (reply.status, reply.body[:200])
    assert reply.seconds < ANSWER_BOUND
    assert notary.alive()
    assert healthy(notary, good_target) == 409
    after = notary.rss()
    assert after - before < RSS_GROWTH_BOUND
    results.add(SUITE, label, f"503 within ~{PROBE_TIMEOUT:g} s; healthy after",
                f"{reply.status}; live probe afterwards OK", reply.seconds, (before, after))


def test_good_target_twin(notary: NotaryProcess, good_target: ThreadServer,
                          site_cert: trustme.LeafCert) -> None:
    """Must-pass twin: the same notary answers 200 for a well-behaved target."""
    reply = notary.query(f"site.test+{good_target.port}", sha1_colon(leaf_der(site_cert)))
    assert reply.status == 200


def test_many_hostile_targets_at_once(notary: NotaryProcess, good_target: ThreadServer,
                                      results: Results) -> None:
    """Twenty slowloris and silent targets probed concurrently: all 503, memory bounded."""
    import concurrent.futures

    servers = [ThreadServer(trickle if i % 2 else silent) for i in range(20)]
    before = notary.rss()
    t0 = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(
                lambda s: notary.query(f"127.0.0.1+{s.port}", "AA" * 20), servers))
    finally:
        for s in servers:
            s.close()
    took = time.monotonic() - t0
    assert [r.status for r in replies] == [503] * 20
    assert took < ANSWER_BOUND + 4
    assert healthy(notary, good_target) == 409
    after = notary.rss()
    assert after - before < RSS_GROWTH_BOUND
    results.add(SUITE, "20 slowloris/silent targets probed concurrently",
                "all 503 within the probe timeout", f"20 x 503, slowest "
                f"{max(r.seconds for r in replies):.2f} s", took, (before, after))


def test_notary_is_not_a_flood_amplifier(notary: NotaryProcess, results: Results) -> None:
    """40 concurrent and 20 later requests about one silent target: one probe reaches it
    (single flight, then the negative cache answers)."""
    import concurrent.futures

    with ThreadServer(silent) as target:
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            first = list(pool.map(lambda _: notary.query(f"127.0.0.1+{target.port}", "AA" * 20),
                                  range(40)))
        later = [notary.query(f"127.0.0.1+{target.port}", "AA" * 20) for _ in range(20)]
        took = time.monotonic() - t0
        reached = target.accepted
    assert [r.status for r in first + later] == [503] * 60
    assert reached == 1
    assert all(r.header("cache-status") == "converge-notary; hit; detail=unreachable"
               for r in later)
    results.add(SUITE, "60 requests (40 at once) about one silent target",
                "one probe reaches the target; the rest share it or hit the negative cache",
                f"60 x 503; target saw {reached} connection", took)
